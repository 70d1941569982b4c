//! Ops computed on the host: Shape and Size (from the declared shapes), Constant, Range
//! (from its scalar inputs read back), and
//! any op whose inputs all have host values and whose outputs are small — the shape
//! arithmetic of exported graphs (Shape → Gather → Concat → Reshape) and constant
//! folding of masks. They run the CPU backend's kernels, so their results are the CPU
//! backend's bit for bit, and are uploaded from pageable memory on the compute stream
//! keeping their host values for the ops that read index inputs.

use super::{Exec, OpResult};
use crate::backend::cuda::{CudaBuffer, CudaError};
use crate::backend::Queue;
use crate::cpu::kernels;
use crate::error::KernelError;
use crate::tensor::{dtype_name, numel, HostTensor};
use cudarc::driver::result;
use lms_proto::contract::LMS_DOMAIN;
use std::rc::Rc;

/// Ops computed on the host whatever their inputs.
pub(super) const ONNX: super::Table = &[("Shape", shape), ("Size", size), ("Constant", constant), ("Range", range)];

/// Range from scalar inputs read on the host: the CPU kernel's values, uploaded.
fn range(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let values = [exec.host_value(0, "start")?, exec.host_value(1, "limit")?, exec.host_value(2, "delta")?];
    let inputs: Vec<Option<&HostTensor>> = values.iter().map(Some).collect();
    let made = kernels::forward("Range", exec.opset, &exec.attrs, &inputs, exec.outputs)?;
    made.into_iter().enumerate().map(|(i, t)| upload(exec, i, t)).collect()
}

/// Largest output (in elements) computed on the host from host inputs.
const HOST_LIMIT: usize = 1 << 20;

/// Whether `exec`'s node is computed on the host: every present input has a host value
/// and the outputs are small. Constant, Shape and Size go through their own kernels.
pub(crate) fn host_evaluable(exec: &Exec<'_>) -> bool {
    let all_known = exec.inputs.iter().flatten().all(|t| t.host.is_some());
    let small = exec.outputs.iter().map(|(_, s)| numel(s)).sum::<usize>() <= HOST_LIMIT;
    let own_kernel = matches!(exec.op, "Shape" | "Size" | "Constant");
    all_known && small && !own_kernel && !exec.inputs.is_empty()
}

/// Runs the CPU backend's kernel of the node on the host values of its inputs and uploads
/// the results.
pub(crate) fn evaluate_on_host(exec: &Exec<'_>, domain: &str) -> OpResult<Vec<CudaBuffer>> {
    let values: Vec<Option<&HostTensor>> = exec.inputs.iter().map(|t| t.and_then(|t| t.host.as_deref())).collect();
    let results = if domain == LMS_DOMAIN {
        kernels::lms(exec.op, &exec.attrs, &values, exec.outputs, exec.context)
    } else {
        kernels::forward(exec.op, exec.opset, &exec.attrs, &values, exec.outputs)
    }
    .map_err(|e| match e {
        KernelError::Op { error, .. } => *error,
        other => other,
    })?;
    results.into_iter().enumerate().map(|(i, t)| upload(exec, i, t)).collect()
}

/// Output `i` (at its planned block) holding `value`, which it keeps as its host value;
/// `value` must have the output's declared dtype and shape.
pub(super) fn upload(exec: &Exec<'_>, i: usize, value: HostTensor) -> OpResult<CudaBuffer> {
    let device = &exec.gpu.device;
    let bytes = value.to_le_bytes();
    let mut out = exec.output(i)?;
    if out.dtype != value.dtype() || out.shape != value.shape {
        return Err(KernelError::shape(
            format!("output {i}"),
            format!(
                "the host kernel made {} {:?}, the node declares {} {:?}",
                dtype_name(value.dtype()),
                value.shape,
                dtype_name(out.dtype),
                out.shape
            ),
        )
        .into());
    }
    if !bytes.is_empty() {
        let stream = device.stream(Queue::Compute);
        // SAFETY: the block holds the bytes; the pageable source is staged by the call.
        unsafe { result::memcpy_htod_async(out.ptr(), &bytes, stream.cu_stream()) }.map_err(CudaError::from)?;
        device.issued(Queue::Compute);
    }
    out.host = Some(Rc::new(value));
    Ok(out)
}

/// Shape: the input's dimensions from `start` to `end` (clamped), as i64.
fn shape(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.input(0, "data")?;
    let r = x.shape.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let (start, end) = (clamp(exec.attrs.int("start", 0)?), clamp(exec.attrs.int("end", r)?));
    let dims: Vec<i64> = x.shape[start..end.max(start)].iter().map(|&d| d as i64).collect();
    let value = HostTensor::from_vec(vec![dims.len()], dims)?;
    Ok(vec![upload(exec, 0, value)?])
}

/// Size: the input's element count, as an i64 scalar.
fn size(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.input(0, "data")?;
    Ok(vec![upload(exec, 0, HostTensor::scalar(x.numel() as i64))?])
}

/// Constant: the value of its attribute.
fn constant(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let values = kernels::forward("Constant", exec.opset, &exec.attrs, &[], exec.outputs).map_err(|e| match e {
        KernelError::Op { error, .. } => *error,
        other => other,
    })?;
    values.into_iter().enumerate().map(|(i, v)| upload(exec, i, v)).collect()
}
