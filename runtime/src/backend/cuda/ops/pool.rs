//! Pooling (kernels in `pool.cu`): MaxPool (with Indices in either storage order), AveragePool, and
//! their gradients, over 1 to 3 spatial axes.

use super::{check_shape, ptr, Arg, Exec, OpResult, Table};
use crate::backend::cuda::CudaBuffer;
use crate::geometry::window::Window;
use cudarc::driver::DeviceRepr;
use lms_proto::lms::DType;

/// The ONNX pools.
pub(super) const ONNX: Table = &[("AveragePool", |e| pool(e, false)), ("MaxPool", |e| pool(e, true))];

/// The `lms` pool gradients.
pub(super) const LMS: Table = &[("AveragePoolGrad", |e| pool_grad(e, false)), ("MaxPoolGrad", |e| pool_grad(e, true))];

/// `struct Window` in pool.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct WindowParams {
    input: [i64; 3],
    kernel: [i64; 3],
    output: [i64; 3],
    stride: [i64; 3],
    dilation: [i64; 3],
    pad_begin: [i64; 3],
    pad_end: [i64; 3],
}

// SAFETY: `WindowParams` is `repr(C)` plain data mirroring the CUDA struct.
unsafe impl DeviceRepr for WindowParams {}
// The CUDA struct: 7·3 i64s.
const _: () = assert!(std::mem::size_of::<WindowParams>() == 168);

impl WindowParams {
    fn new(w: &Window) -> WindowParams {
        let wide = |v: [usize; 3]| v.map(|d| d as i64);
        WindowParams {
            input: wide(w.input),
            kernel: wide(w.kernel),
            output: wide(w.output),
            stride: wide(w.stride),
            dilation: wide(w.dilation),
            pad_begin: wide(w.pad_begin),
            pad_end: wide(w.pad_end),
        }
    }
}

/// The window of a pool over X `x` ([N, C, spatial...]), and the number of planes.
fn window(exec: &Exec<'_>, x: &[usize]) -> OpResult<(WindowParams, usize, Vec<usize>)> {
    let win = Window::pool(&exec.attrs, x)?;
    let mut y = x[..2].to_vec();
    y.extend_from_slice(win.output_dims());
    Ok((WindowParams::new(&win), x[0] * x[1], y))
}

fn pool(exec: &Exec<'_>, max: bool) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.f32_input(0, "X")?;
    let (w, planes, y_shape) = window(exec, &x.shape)?;
    let y = exec.output(0)?;
    check_shape(&y, &y_shape, "output 0")?;
    if max {
        let column_major = exec.attrs.int("storage_order", 0)? != 0;
        let indices = if exec.outputs.len() > 1 { Some(exec.output(1)?) } else { None };
        if let Some(i) = &indices {
            super::check_dtype(i, DType::DtypeI64, "output Indices")?;
        }
        exec.launch(
            "max_pool_f32",
            y.numel() as u64,
            &[
                Arg::I64(planes as i64),
                Arg::params(&w),
                Arg::I32(i32::from(column_major)),
                ptr(x),
                ptr(&y),
                indices.as_ref().map_or(Arg::Ptr(0), ptr),
            ],
        )?;
        Ok([Some(y), indices].into_iter().flatten().collect())
    } else {
        let include_pad = exec.attrs.int("count_include_pad", 0)? != 0;
        exec.launch(
            "avg_pool_f32",
            y.numel() as u64,
            &[Arg::I64(planes as i64), Arg::params(&w), Arg::I32(i32::from(include_pad)), ptr(x), ptr(&y)],
        )?;
        Ok(vec![y])
    }
}

/// MaxPoolGrad(dY, X) / AveragePoolGrad(dY) → dX of the declared shape.
fn pool_grad(exec: &Exec<'_>, max: bool) -> OpResult<Vec<CudaBuffer>> {
    let dy = exec.f32_input(0, "dY")?;
    let dx = exec.output(0)?;
    let (w, planes, y_shape) = window(exec, &dx.shape)?;
    check_shape(dy, &y_shape, "input dY")?;
    let x = if max {
        let x = exec.f32_input(1, "X")?;
        check_shape(x, &dx.shape, "input X")?;
        ptr(x)
    } else {
        Arg::Ptr(0)
    };
    let include_pad = exec.attrs.int("count_include_pad", 0)? != 0;
    exec.launch(
        "pool_grad_f32",
        dx.numel() as u64,
        &[
            Arg::I64(planes as i64),
            Arg::params(&w),
            Arg::I32(i32::from(max)),
            Arg::I32(i32::from(include_pad)),
            ptr(dy),
            x,
            ptr(&dx),
        ],
    )?;
    Ok(vec![dx])
}
