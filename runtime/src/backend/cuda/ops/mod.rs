//! The CUDA backend's ops: one module per family, each with a table of (op type, kernel).
//!
//! A kernel gets an [`Exec`]: the node's attributes, its input buffers, the declared
//! output types, and the means to allocate outputs and scratch memory in the arena and to
//! launch kernels on the compute stream. Ops not in the tables fail with
//! "op `X` has no CUDA kernel yet" ([`KernelError::NoCudaKernel`]).

mod batch_norm_split;
mod conv;
mod elementwise;
mod host;
mod linalg;
mod movement;
mod norm;
mod pool;
mod reduce;

use super::error::{CudaError, OpError, OpResult};
use super::kernels::{signatures, Param};
use super::layout::Layout;
use super::memory::DeviceBlock;
use super::{CudaBuffer, Gpu};
use crate::attrs::Attrs;
use crate::backend::{Block, KernelContext, Queue};
use crate::error::KernelError;
use crate::tensor::{dtype_name, dtype_size, numel, HostTensor};
use cudarc::driver::{result, DeviceRepr};
use lms_proto::contract::LMS_DOMAIN;
use lms_proto::lms::DType;
use lms_proto::ops::scratch::{self, Part};
use lms_proto::ops::{registry, OpId};
use std::ffi::c_void;
use std::rc::Rc;
use std::sync::OnceLock;

pub(crate) use host::{evaluate_on_host, host_evaluable};

/// A CUDA kernel of an op: computes the node's outputs.
type OpFn = fn(&Exec<'_>) -> OpResult<Vec<CudaBuffer>>;

/// A family's table of (op type, kernel).
type Table = &'static [(&'static str, OpFn)];

/// The ONNX (default domain) families.
const ONNX: &[Table] =
    &[elementwise::ONNX, movement::ONNX, reduce::ONNX, norm::ONNX, linalg::ONNX, conv::ONNX, pool::ONNX, host::ONNX];

/// The `lms` domain families.
const LMS: &[Table] =
    &[elementwise::LMS, movement::LMS, reduce::LMS, norm::LMS, batch_norm_split::LMS, conv::LMS, pool::LMS];

/// The op types of `domain` (`""` or `lms`) with a CUDA kernel, sorted.
pub fn supported_ops(domain: &str) -> Vec<&'static str> {
    let families = if domain == LMS_DOMAIN { LMS } else { ONNX };
    let mut ops: Vec<&'static str> = families.iter().flat_map(|t| t.iter().map(|(op, _)| *op)).collect();
    ops.sort_unstable();
    ops
}

/// The CUDA kernel of each op, indexed by [`OpId`] (built once from the families' tables).
fn kernels() -> &'static [Option<OpFn>] {
    static TABLE: OnceLock<Vec<Option<OpFn>>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = vec![None; registry::all().count()];
        for (domain, families) in [("", ONNX), (LMS_DOMAIN, LMS)] {
            for &(name, kernel) in families.iter().flat_map(|t| t.iter()) {
                if let Some(op) = registry::resolve(domain, name) {
                    table[op.index()] = Some(kernel);
                }
            }
        }
        table
    })
}

/// The kernel of `op`, the op a node named `name` was resolved to when its program was
/// loaded (`None`: an op lms does not define).
pub(crate) fn find(op: Option<OpId>, name: &str) -> OpResult<OpFn> {
    op.and_then(|op| kernels()[op.index()]).ok_or_else(|| OpError::Kernel(KernelError::NoCudaKernel(name.to_string())))
}

/// A kernel argument, passed by value.
pub(crate) enum Arg {
    /// A device address.
    Ptr(u64),
    /// A 64-bit integer.
    I64(i64),
    /// A 32-bit integer (op codes, flags).
    I32(i32),
    /// A 64-bit pattern.
    U64(u64),
    /// A float.
    F32(f32),
    /// A double.
    F64(f64),
    /// A `repr(C)` parameter struct, as its bytes.
    Bytes(Vec<u64>),
}

impl Arg {
    /// An iteration layout, passed by value.
    pub fn layout(layout: &Layout) -> Arg {
        Arg::params(layout)
    }

    /// A `repr(C)` struct of 8-byte fields, passed by value.
    pub fn params<T: DeviceRepr + Copy>(value: &T) -> Arg {
        let words = std::mem::size_of::<T>().div_ceil(8);
        let mut buffer = vec![0u64; words];
        // SAFETY: `buffer` has room for `T`, and `T` is plain data (DeviceRepr).
        unsafe { std::ptr::write_unaligned(buffer.as_mut_ptr().cast::<T>(), *value) };
        Arg::Bytes(buffer)
    }

    /// The parameter kind this argument passes.
    fn kind(&self) -> Param {
        match self {
            Arg::Ptr(_) => Param::Ptr,
            Arg::I64(_) => Param::I64,
            Arg::I32(_) => Param::I32,
            Arg::U64(_) => Param::U64,
            Arg::F32(_) => Param::F32,
            Arg::F64(_) => Param::F64,
            Arg::Bytes(_) => Param::Struct,
        }
    }

    fn as_param(&self) -> *mut c_void {
        let p: *const c_void = match self {
            Arg::Ptr(v) | Arg::U64(v) => (v as *const u64).cast(),
            Arg::I64(v) => (v as *const i64).cast(),
            Arg::I32(v) => (v as *const i32).cast(),
            Arg::F32(v) => (v as *const f32).cast(),
            Arg::F64(v) => (v as *const f64).cast(),
            Arg::Bytes(v) => v.as_ptr().cast(),
        };
        p.cast_mut()
    }
}

/// The address of a buffer as a kernel argument.
pub(crate) fn ptr(buffer: &CudaBuffer) -> Arg {
    Arg::Ptr(buffer.ptr())
}

/// Threads per block of the elementwise kernels.
const THREADS: u32 = 256;
/// Largest grid the grid-stride kernels are launched with.
const MAX_BLOCKS: u64 = 1 << 20;

/// Blocks for `work` items at `per_block` items per block, within [1, MAX_BLOCKS].
fn blocks(work: u64, per_block: u64) -> u32 {
    work.div_ceil(per_block.max(1)).clamp(1, MAX_BLOCKS) as u32
}

/// What a kernel sees of its node and the device.
pub(crate) struct Exec<'a> {
    /// The device, its kernels and libraries.
    pub gpu: &'a Gpu,
    /// The op type.
    pub op: &'a str,
    /// The ONNX opset of the node's domain.
    pub opset: i64,
    /// The node's attributes.
    pub attrs: Attrs<'a>,
    /// Input slots (`None`: an omitted optional input).
    pub inputs: &'a [Option<&'a CudaBuffer>],
    /// The declared dtype and shape of each output.
    pub outputs: &'a [(DType, Vec<usize>)],
    /// The planned block of each output (empty outside a plan).
    pub blocks: &'a [Block],
    /// The node's planned scratch block, when it takes one.
    pub scratch: Option<Block>,
    /// The parts of the node's scratch block (`lms_proto::ops::scratch::layout`).
    pub layout: scratch::Layout,
    /// The cuDNN algorithm and workspace the plan records for a convolution node
    /// (`lms_proto::ops::scratch::planned_conv_algorithm`).
    pub conv_algorithm: Option<scratch::ConvAlgorithm>,
    /// The run's seed and step.
    pub context: &'a KernelContext,
}

impl<'a> Exec<'a> {
    /// Input `i` (named `name` in errors), which must be present.
    pub fn input(&self, i: usize, name: &str) -> OpResult<&'a CudaBuffer> {
        self.opt_input(i).ok_or_else(|| KernelError::MissingInput(name.to_string()).into())
    }

    /// Input `i` when present.
    pub fn opt_input(&self, i: usize) -> Option<&'a CudaBuffer> {
        self.inputs.get(i).copied().flatten()
    }

    /// Input `i`, which must be present and of dtype `dtype`.
    pub fn typed_input(&self, i: usize, name: &str, dtype: DType) -> OpResult<&'a CudaBuffer> {
        let t = self.input(i, name)?;
        check_dtype(t, dtype, &format!("input {name}"))?;
        Ok(t)
    }

    /// Input `i` as f32 (the only float type the CUDA kernels compute in).
    pub fn f32_input(&self, i: usize, name: &str) -> OpResult<&'a CudaBuffer> {
        self.typed_input(i, name, DType::DtypeF32)
    }

    /// The declared shape of output `i`.
    pub fn out_shape(&self, i: usize) -> OpResult<&'a [usize]> {
        self.outputs
            .get(i)
            .map(|o| &o.1[..])
            .ok_or_else(|| KernelError::invalid(format!("output {i} is not declared")).into())
    }

    /// The buffer of declared output `i`: at its planned block when there is one.
    pub fn output(&self, i: usize) -> OpResult<CudaBuffer> {
        let (dtype, shape) =
            self.outputs.get(i).ok_or_else(|| KernelError::invalid(format!("output {i} is not declared")))?;
        let bytes = Self::bytes_of(*dtype, shape)?;
        let block = self.gpu.block(self.blocks.get(i), bytes, Queue::Compute)?;
        Ok(CudaBuffer { block: Rc::new(block), dtype: *dtype, shape: shape.clone(), host: None })
    }

    /// The bytes of a tensor of `dtype` and `shape`.
    fn bytes_of(dtype: DType, shape: &[usize]) -> OpResult<u64> {
        let size = dtype_size(dtype)
            .ok_or_else(|| KernelError::unsupported(format!("dtype {} on the CUDA backend", dtype_name(dtype))))?;
        Ok((numel(shape) as u64)
            .checked_mul(size as u64)
            .ok_or_else(|| KernelError::invalid(format!("shape {shape:?} overflows")))?)
    }

    /// Part `part` of the node's scratch block ([`Exec::layout`], the plan's rule): its
    /// bytes in the planned block under a plan, else an allocation of its size.
    pub fn scratch_part(&self, part: Part) -> OpResult<DeviceBlock> {
        let (offset, bytes) = self
            .layout
            .part(part)
            .ok_or_else(|| KernelError::invalid(format!("the node's scratch rule gives it no {part:?} part")))?;
        if !self.gpu.device.has_plan() {
            return Ok(self.gpu.device.alloc(bytes, Queue::Compute)?);
        }
        match self.scratch {
            Some(block) if self.layout.bytes() <= block.bytes => {
                Ok(self.gpu.device.planned(block.offset + offset, bytes, Queue::Compute)?)
            }
            planned => Err(KernelError::invalid(format!(
                "scratch of {} bytes, the plan gives the node {} bytes",
                self.layout.bytes(),
                planned.map_or(0, |b| b.bytes)
            ))
            .into()),
        }
    }

    /// Part `part` of the node's scratch block, which the rule sized for exactly `bytes`
    /// (a difference is an error: the rule and the kernel disagree).
    pub fn scratch_sized(&self, part: Part, bytes: u64) -> OpResult<DeviceBlock> {
        let block = self.scratch_part(part)?;
        if block.bytes() != bytes {
            return Err(KernelError::invalid(format!(
                "a {part:?} scratch part of {bytes} bytes, the rule gives it {} bytes",
                block.bytes()
            ))
            .into());
        }
        Ok(block)
    }

    /// A temporary of `dtype` and `shape` in part `part` of the node's scratch block, which
    /// the rule sized for exactly it.
    pub fn scratch_buffer(&self, part: Part, dtype: DType, shape: &[usize]) -> OpResult<CudaBuffer> {
        let block = self.scratch_sized(part, Self::bytes_of(dtype, shape)?)?;
        Ok(CudaBuffer { block: Rc::new(block), dtype, shape: shape.to_vec(), host: None })
    }

    /// A device flag (4 bytes, zeroed) that kernels set on an error the CPU backend
    /// reports (a label outside its classes, an integer division by zero); read it back
    /// with [`Exec::raised`] after them. The flag is the node's planned [`Part::Flag`]
    /// where its scratch rule gives it one, else the backend's fixed flag (integer `Div`,
    /// whose rule cannot see the dtype), which [`Exec::raised`] reads back before the next
    /// node runs.
    pub fn error_flag(&self) -> OpResult<Rc<DeviceBlock>> {
        let flag = match self.layout.part(Part::Flag) {
            Some(_) => Rc::new(self.scratch_part(Part::Flag)?),
            None => Rc::clone(&self.gpu.flag),
        };
        self.zero(flag.ptr(), 4)?;
        Ok(flag)
    }

    /// Whether a kernel set `flag` (from [`Exec::error_flag`]); synchronizes the compute
    /// stream.
    pub fn raised(&self, flag: &DeviceBlock) -> OpResult<bool> {
        let stream = self.gpu.device.stream(Queue::Compute);
        let mut bytes = [0u8; 4];
        // SAFETY: the flag holds 4 bytes; the stream is synchronized before they are read.
        unsafe { result::memcpy_dtoh_async(&mut bytes[..], flag.ptr(), stream.cu_stream()) }
            .map_err(CudaError::from)?;
        stream.synchronize().map_err(CudaError::from)?;
        Ok(bytes != [0; 4])
    }

    /// A float attribute widened to f64, `default` when absent.
    pub fn float_attr(&self, name: &str, default: f32) -> OpResult<f64> {
        Ok(f64::from(self.attrs.float(name, default)?))
    }

    /// A float attribute that must be present, widened to f64.
    pub fn required_float(&self, name: &str) -> OpResult<f64> {
        self.attrs.float_opt(name)?.map(f64::from).ok_or_else(|| KernelError::attr(name, "is required").into())
    }

    /// Launches kernel `name` over `work` grid-stride items with [`THREADS`] threads per block.
    pub fn launch(&self, name: &'static str, work: u64, args: &[Arg]) -> OpResult<()> {
        if work == 0 {
            return Ok(());
        }
        self.launch_grid(name, blocks(work, THREADS as u64), THREADS, args)
    }

    /// Launches kernel `name` with one block of `threads` per item of `items` (capped;
    /// the kernels loop over the rest).
    pub fn launch_blocks(&self, name: &'static str, items: u64, threads: u32, args: &[Arg]) -> OpResult<()> {
        if items == 0 {
            return Ok(());
        }
        self.launch_grid(name, items.clamp(1, MAX_BLOCKS) as u32, threads, args)
    }

    /// Launches kernel `name` with `warps` warps of work, 8 warps per block.
    pub fn launch_warps(&self, name: &'static str, warps: u64, args: &[Arg]) -> OpResult<()> {
        if warps == 0 {
            return Ok(());
        }
        self.launch_grid(name, blocks(warps, THREADS as u64 / 32), THREADS, args)
    }

    fn launch_grid(&self, name: &'static str, grid: u32, threads: u32, args: &[Arg]) -> OpResult<()> {
        check_arguments(name, args)?;
        let function = self.gpu.kernels.function(name)?;
        let mut params: Vec<*mut c_void> = args.iter().map(Arg::as_param).collect();
        let stream = self.gpu.device.stream(Queue::Compute);
        // SAFETY: the arguments match the kernel's parameters (each launch site mirrors
        // its `.cu` signature) and point at memory that outlives the launch call; device
        // addresses are blocks kept alive until their fences complete.
        unsafe {
            result::launch_kernel(
                function.cu_function(),
                (grid, 1, 1),
                (threads, 1, 1),
                0,
                stream.cu_stream(),
                &mut params,
            )
        }
        .map_err(CudaError::from)?;
        self.gpu.device.issued(Queue::Compute);
        Ok(())
    }

    /// Sets the `bytes` bytes at `ptr` to zero on the compute stream.
    pub fn zero(&self, ptr: u64, bytes: u64) -> OpResult<()> {
        if bytes == 0 {
            return Ok(());
        }
        let stream = self.gpu.device.stream(Queue::Compute);
        // SAFETY: `ptr` addresses a live block of at least `bytes` bytes.
        unsafe { result::memset_d8_async(ptr, 0, bytes as usize, stream.cu_stream()) }.map_err(CudaError::from)?;
        self.gpu.device.issued(Queue::Compute);
        Ok(())
    }

    /// The values of input `i` on the host: its host copy when it has one, else read back
    /// (synchronizing the compute stream). For small index-like inputs (Slice starts, Pad
    /// pads, Clip bounds, ...).
    pub fn host_value(&self, i: usize, name: &str) -> OpResult<HostTensor> {
        let t = self.input(i, name)?;
        if let Some(host) = &t.host {
            return Ok(HostTensor::clone(host));
        }
        let stream = self.gpu.device.stream(Queue::Compute);
        let mut bytes = vec![0u8; t.bytes() as usize];
        // SAFETY: the block holds `bytes.len()` bytes; the stream is synchronized before
        // the host reads them.
        unsafe { result::memcpy_dtoh_async(&mut bytes, t.ptr(), stream.cu_stream()) }.map_err(CudaError::from)?;
        stream.synchronize().map_err(CudaError::from)?;
        Ok(HostTensor::from_le_bytes(t.dtype, &t.shape, &bytes)?)
    }

    /// Ints given either as attribute `attr` (older opsets) or as input `i` (newer ones).
    pub fn ints_attr_or_input(&self, attr: &str, i: usize, name: &str) -> OpResult<Option<Vec<i64>>> {
        match (self.attrs.ints_opt(attr)?, self.opt_input(i)) {
            (Some(v), None) => Ok(Some(v.to_vec())),
            (None, Some(_)) => Ok(Some(self.host_value(i, name)?.to_i64s(&format!("input {name}"))?)),
            (None, None) => Ok(None),
            (Some(_), Some(_)) => {
                Err(KernelError::attr(attr, format!("given both as attribute and as input {name}")).into())
            }
        }
    }
}

/// Checks `args` against the parameters of kernel `name` in its source.
fn check_arguments(name: &'static str, args: &[Arg]) -> Result<(), CudaError> {
    let given: Vec<Param> = args.iter().map(Arg::kind).collect();
    match signatures().get(name) {
        Some(expected) if *expected == given => Ok(()),
        expected => {
            Err(CudaError::Signature { kernel: name, expected: format!("{expected:?}"), given: format!("{given:?}") })
        }
    }
}

/// Checks that `t` has dtype `dtype`; `what` names it in errors.
pub(crate) fn check_dtype(t: &CudaBuffer, dtype: DType, what: &str) -> OpResult<()> {
    if t.dtype == dtype {
        Ok(())
    } else {
        Err(KernelError::Dtype {
            what: what.to_string(),
            expected: dtype_name(dtype).to_string(),
            found: dtype_name(t.dtype).to_string(),
        }
        .into())
    }
}

/// Checks that `t` has shape `shape`; `what` names it in errors.
pub(crate) fn check_shape(t: &CudaBuffer, shape: &[usize], what: &str) -> OpResult<()> {
    if t.shape == shape {
        Ok(())
    } else {
        Err(KernelError::shape(what, format!("expected shape {shape:?}, found {:?}", t.shape)).into())
    }
}

/// The element count of a buffer as a kernel argument.
pub(crate) fn count(t: &CudaBuffer) -> Arg {
    Arg::I64(t.numel() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::kernels::{supported_lms_ops, supported_ops as cpu_ops};

    /// The ops of the CPU backend that have no CUDA kernel: kept explicit so that a new
    /// CPU op shows up here, and so that the list in the report stays true.
    #[test]
    fn cuda_ops_cover_every_cpu_op() {
        let onnx = supported_ops("");
        let lms = supported_ops(LMS_DOMAIN);
        let mut missing: Vec<&str> = cpu_ops()
            .into_iter()
            .filter(|op| !onnx.contains(op))
            .chain(supported_lms_ops().into_iter().filter(|op| !lms.contains(op)))
            .collect();
        missing.sort_unstable();
        assert!(missing.is_empty(), "ops without a CUDA kernel: {missing:?}");
        assert!(onnx.iter().all(|op| cpu_ops().contains(op)), "{onnx:?}");
        assert!(lms.iter().all(|op| supported_lms_ops().contains(op)), "{lms:?}");
        let mut dedup = onnx.clone();
        dedup.dedup();
        assert_eq!(dedup, onnx);
    }

    #[test]
    fn ops_without_a_kernel_say_so() {
        let Err(OpError::Kernel(error)) = find(registry::resolve("", "NoSuchOp"), "NoSuchOp") else {
            panic!("NoSuchOp has no CUDA kernel");
        };
        assert_eq!(error.to_string(), "op `NoSuchOp` has no CUDA kernel yet");
        assert!(find(registry::resolve(LMS_DOMAIN, "SgdUpdate"), "SgdUpdate").is_ok());
        assert!(find(registry::resolve("", "SgdUpdate"), "SgdUpdate").is_err());
    }

    /// The registry and the CUDA backend agree: every table entry is an op of the registry,
    /// and every op a backend runs as a kernel ([`lms_proto::ops::registry::OpDef::is_kernel`]) has a CUDA
    /// kernel; the host-run ones (`host::ONNX`: Shape, Size, Constant) compute their values
    /// with the CPU backend's kernel and upload them.
    #[test]
    fn every_op_of_the_registry_has_a_cuda_kernel() {
        for (domain, families) in [("", ONNX), (LMS_DOMAIN, LMS)] {
            for (name, _) in families.iter().flat_map(|t| t.iter()) {
                assert!(registry::resolve(domain, name).is_some(), "CUDA kernel {name} ({domain:?}) is no op");
            }
        }
        let missing: Vec<&str> = registry::all()
            .filter(|&op| op.def().is_kernel() && kernels()[op.index()].is_none())
            .map(OpId::name)
            .collect();
        assert!(missing.is_empty(), "ops without a CUDA kernel: {missing:?}");
    }

    #[test]
    fn kernel_arguments_point_at_their_values() {
        let args = [Arg::I64(-3), Arg::F64(0.5), Arg::params(&[7u64, 9u64])];
        // SAFETY: each pointer addresses the value of its variant.
        unsafe {
            assert_eq!(*args[0].as_param().cast::<i64>(), -3);
            assert_eq!(*args[1].as_param().cast::<f64>(), 0.5);
            assert_eq!(*args[2].as_param().cast::<[u64; 2]>(), [7, 9]);
        }
        assert!(check_arguments("fill_4", &[Arg::I64(3), Arg::Ptr(0), Arg::U64(1)]).is_ok());
        let err = check_arguments("fill_4", &[Arg::I32(3), Arg::Ptr(0), Arg::U64(1)]).unwrap_err();
        assert_eq!(err.to_string(), "kernel `fill_4` takes Some([I64, Ptr, U64]), launched with [I32, Ptr, U64]");
        assert!(check_arguments("no_such_kernel", &[]).is_err());
        assert_eq!(blocks(0, 256), 1);
        assert_eq!(blocks(257, 256), 2);
        assert_eq!(blocks(u64::MAX, 1), MAX_BLOCKS as u32);
    }
}
