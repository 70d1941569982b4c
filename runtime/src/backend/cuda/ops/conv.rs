//! Convolutions on cuDNN: Conv (forward, bias added by the broadcast Add kernel),
//! ConvGradData (backward data), ConvGradWeight (backward filter) and ConvTranspose
//! (backward data into the unpadded output, then cropped to the pads).
//!
//! cuDNN pads symmetrically; a Conv with asymmetric pads runs on an explicitly padded copy
//! of X (its gradients likewise: the data gradient is computed padded and cropped), in the
//! node's planned scratch block.
//!
//! Each node runs the algorithm its plan records for it (`Plan.conv_algorithms`, read by
//! `lms_proto::ops::scratch::planned_conv_algorithm`; the contract checked it is the one
//! `conv_algorithm` gives its geometry and direction), with the workspace part of its
//! planned scratch block; the original graph and
//! every rewritten one (swaps, recomputation, splits of the same geometry) therefore run
//! the same algorithm and agree bit for bit. There is no fallback: when cuDNN needs more
//! workspace for that algorithm than the plan gives, the node fails with
//! `RuntimeError::ScratchTooSmall` (exit 3).

use super::elementwise::{launch_binary, Binary};
use super::movement::launch_pad;
use super::{check_shape, Exec, OpResult, Table};
use crate::backend::cuda::error::CudaError;
use crate::backend::cuda::error::OpError;
use crate::backend::cuda::libs::{int, Algo, Dnn};
use crate::backend::cuda::CudaBuffer;
use crate::backend::Queue;
use crate::error::KernelError;
use crate::geometry::window::Window;
use cudarc::cudnn::{result as dnn, sys};
use lms_proto::lms::DType;
use lms_proto::ops::scratch::{ConvAlgorithm, Part};
use std::ffi::{c_int, c_void};

/// The ONNX convolutions.
pub(super) const ONNX: Table = &[("Conv", conv), ("ConvTranspose", conv_transpose)];

/// The `lms` convolution gradients.
pub(super) const LMS: Table = &[("ConvGradData", conv_grad_data), ("ConvGradWeight", conv_grad_weight)];

/// A Conv's shapes and window, in cuDNN's terms (at least two spatial axes: a 1-D conv
/// gains a trailing axis of size 1).
struct Geometry {
    x: Vec<c_int>,
    w: Vec<c_int>,
    y: Vec<c_int>,
    pads: Vec<c_int>,
    strides: Vec<c_int>,
    dilations: Vec<c_int>,
    group: c_int,
    /// For asymmetric pads: X's shape padded, and the pad before each axis of X (cuDNN
    /// then sees the padded X and no pads).
    explicit: Option<(Vec<usize>, Vec<i64>)>,
}

impl Geometry {
    /// The geometry of a Conv of X `x` and W `w` with the node's attributes.
    fn new(exec: &Exec<'_>, x: &[usize], w: &[usize]) -> OpResult<Geometry> {
        if x.len() < 3 || w.len() != x.len() {
            return Err(KernelError::shape("input W", format!("shapes X {x:?} and W {w:?} do not fit a Conv")).into());
        }
        let group = exec.attrs.int("group", 1)?;
        let groups = usize::try_from(group).ok().filter(|&g| g > 0 && x[1] % g == 0 && w[0] % g == 0);
        let Some(groups) = groups else {
            return Err(KernelError::attr(
                "group",
                format!("{group} does not divide the channels of X {x:?} and W {w:?}"),
            )
            .into());
        };
        if w[1] * groups != x[1] {
            return Err(KernelError::shape(
                "input W",
                format!("shape {w:?} does not fit {} channels in {groups} groups", x[1]),
            )
            .into());
        }
        let win = Window::conv(&exec.attrs, &x[2..], &w[2..])?;
        let spatial = x.len() - 2;
        let tail = |v: &[usize; 3]| v[3 - spatial..].to_vec();
        let mut y = vec![x[0], w[0]];
        y.extend_from_slice(win.output_dims());
        let (begin, end) = (tail(&win.pad_begin), tail(&win.pad_end));
        if begin == end {
            return Geometry::from_parts(x, w, &y, &begin, &tail(&win.stride), &tail(&win.dilation), groups, None);
        }
        let mut padded = x.to_vec();
        let mut shift = vec![0i64; x.len()];
        for d in 0..spatial {
            padded[2 + d] += begin[d] + end[d];
            shift[2 + d] = begin[d] as i64;
        }
        let zeros = vec![0; spatial];
        let explicit = Some((padded.clone(), shift));
        Geometry::from_parts(&padded, w, &y, &zeros, &tail(&win.stride), &tail(&win.dilation), groups, explicit)
    }

    /// A geometry from shapes X, W, Y and the symmetric pads, strides and dilations of
    /// each spatial axis (a 1-D conv gains a trailing axis of size 1).
    #[allow(clippy::too_many_arguments)]
    fn from_parts(
        x: &[usize],
        w: &[usize],
        y: &[usize],
        pads: &[usize],
        strides: &[usize],
        dilations: &[usize],
        groups: usize,
        explicit: Option<(Vec<usize>, Vec<i64>)>,
    ) -> OpResult<Geometry> {
        let (mut x, mut w, mut y) = (x.to_vec(), w.to_vec(), y.to_vec());
        let (mut pads, mut strides, mut dilations) = (pads.to_vec(), strides.to_vec(), dilations.to_vec());
        if x.len() == 3 {
            for v in [&mut x, &mut w, &mut y, &mut strides, &mut dilations] {
                v.push(1);
            }
            pads.push(0);
        }
        let ints = |v: &[usize]| -> OpResult<Vec<c_int>> { v.iter().map(|&d| Ok(int(d, "Conv size")?)).collect() };
        Ok(Geometry {
            x: ints(&x)?,
            w: ints(&w)?,
            y: ints(&y)?,
            pads: ints(&pads)?,
            strides: ints(&strides)?,
            dilations: ints(&dilations)?,
            group: int(groups, "group")?,
            explicit,
        })
    }
}

/// The cuDNN descriptors of a Conv geometry, destroyed on drop.
struct Descriptors {
    x: sys::cudnnTensorDescriptor_t,
    y: sys::cudnnTensorDescriptor_t,
    w: sys::cudnnFilterDescriptor_t,
    conv: sys::cudnnConvolutionDescriptor_t,
}

/// Row-major strides of `dims`.
fn packed(dims: &[c_int]) -> Result<Vec<c_int>, CudaError> {
    let mut strides: Vec<c_int> = vec![1; dims.len()];
    for d in (0..dims.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1]
            .checked_mul(dims[d + 1])
            .ok_or_else(|| CudaError::TooLarge(format!("a convolution tensor of shape {dims:?}")))?;
    }
    Ok(strides)
}

impl Descriptors {
    fn new(g: &Geometry, tf32: bool) -> Result<Descriptors, CudaError> {
        let float = sys::cudnnDataType_t::CUDNN_DATA_FLOAT;
        let mut d = Descriptors {
            x: std::ptr::null_mut(),
            y: std::ptr::null_mut(),
            w: std::ptr::null_mut(),
            conv: std::ptr::null_mut(),
        };
        d.x = dnn::create_tensor_descriptor()?;
        d.y = dnn::create_tensor_descriptor()?;
        d.w = dnn::create_filter_descriptor()?;
        d.conv = dnn::create_convolution_descriptor()?;
        let math = if tf32 { sys::cudnnMathType_t::CUDNN_DEFAULT_MATH } else { sys::cudnnMathType_t::CUDNN_FMA_MATH };
        let (sx, sy) = (packed(&g.x)?, packed(&g.y)?);
        // SAFETY: the descriptors were just created; the arrays hold `len` entries.
        unsafe {
            dnn::set_tensornd_descriptor(d.x, float, g.x.len() as c_int, g.x.as_ptr(), sx.as_ptr())?;
            dnn::set_tensornd_descriptor(d.y, float, g.y.len() as c_int, g.y.as_ptr(), sy.as_ptr())?;
            dnn::set_filternd_descriptor(
                d.w,
                float,
                sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                g.w.len() as c_int,
                g.w.as_ptr(),
            )?;
            dnn::set_convolutionnd_descriptor(
                d.conv,
                g.pads.len() as c_int,
                g.pads.as_ptr(),
                g.strides.as_ptr(),
                g.dilations.as_ptr(),
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                float,
            )?;
            dnn::set_convolution_group_count(d.conv, g.group)?;
            dnn::set_convolution_math_type(d.conv, math)?;
        }
        Ok(d)
    }
}

impl Drop for Descriptors {
    fn drop(&mut self) {
        // SAFETY: each descriptor is destroyed once; null ones (a failed `new`) are skipped.
        unsafe {
            for t in [self.x, self.y] {
                if !t.is_null() {
                    let _ = dnn::destroy_tensor_descriptor(t);
                }
            }
            if !self.w.is_null() {
                let _ = dnn::destroy_filter_descriptor(self.w);
            }
            if !self.conv.is_null() {
                let _ = dnn::destroy_convolution_descriptor(self.conv);
            }
        }
    }
}

/// The exact workspace of `algo` for `d`.
fn workspace_size(dnn: &Dnn, d: &Descriptors, algo: Algo) -> Result<usize, CudaError> {
    // SAFETY: the handle and descriptors are live.
    Ok(unsafe {
        match algo {
            Algo::Forward(a) => dnn::get_convolution_forward_workspace_size(dnn.handle, d.x, d.w, d.conv, d.y, a)?,
            Algo::Data(a) => dnn::get_convolution_backward_data_workspace_size(dnn.handle, d.w, d.y, d.conv, d.x, a)?,
            Algo::Filter(a) => {
                dnn::get_convolution_backward_filter_workspace_size(dnn.handle, d.x, d.y, d.conv, d.w, a)?
            }
        }
    })
}

/// The algorithm the plan records for the node.
fn planned_algorithm(exec: &Exec<'_>) -> OpResult<ConvAlgorithm> {
    exec.conv_algorithm.ok_or_else(|| KernelError::invalid("the plan records no convolution algorithm for it").into())
}

/// Runs the node's direction of `g` with its planned algorithm: forward (x, w → y),
/// backward data (w, dy → dx) or backward filter (x, dy → dw); `a` and `b` are the two
/// inputs in that order and `out` the result.
fn run(exec: &Exec<'_>, g: &Geometry, a: &CudaBuffer, b: &CudaBuffer, out: &CudaBuffer) -> OpResult<()> {
    let dnn = exec.gpu.dnn.as_ref().map_err(|reason| CudaError::Library(reason.clone()))?;
    let planned = planned_algorithm(exec)?;
    let algo = Algo::of_plan(planned.direction, planned.algorithm).ok_or_else(|| {
        KernelError::invalid(format!("cuDNN has no {:?} algorithm {}", planned.direction, planned.algorithm))
    })?;
    let d = Descriptors::new(g, exec.gpu.options.tf32)?;
    let needed = workspace_size(dnn, &d, algo)? as u64;
    if needed > planned.workspace_bytes {
        return Err(OpError::ScratchTooSmall {
            what: format!("cuDNN's {:?} algorithm {} workspace", planned.direction, planned.algorithm),
            needed,
            planned: planned.workspace_bytes,
        });
    }
    let workspace = match planned.workspace_bytes {
        0 => None,
        _ => Some(exec.scratch_part(Part::Workspace)?),
    };
    let (ws, bytes) = workspace.as_ref().map_or((std::ptr::null_mut(), 0), |w| (w.ptr() as *mut c_void, w.bytes()));
    let bytes = usize::try_from(bytes).map_err(|_| CudaError::TooLarge(format!("a workspace of {bytes} bytes")))?;
    let (alpha, beta) = (1.0f32, 0.0f32);
    let (one, zero) = ((&alpha as *const f32).cast::<c_void>(), (&beta as *const f32).cast::<c_void>());
    let (pa, pb, po) = (a.ptr() as *const c_void, b.ptr() as *const c_void, out.ptr() as *mut c_void);
    // SAFETY: the descriptors describe the buffers, which are live f32 blocks of these
    // shapes; the workspace block is `bytes` long, at least what the algorithm needs.
    unsafe {
        match algo {
            Algo::Forward(algo) => {
                dnn::convolution_forward(dnn.handle, one, d.x, pa, d.w, pb, d.conv, algo, ws, bytes, zero, d.y, po)
            }
            Algo::Data(algo) => dnn::convolution_backward_data(
                dnn.handle, one, d.w, pa, d.y, pb, d.conv, algo, ws, bytes, zero, d.x, po,
            ),
            Algo::Filter(algo) => dnn::convolution_backward_filter(
                dnn.handle, one, d.x, pa, d.y, pb, d.conv, algo, ws, bytes, zero, d.w, po,
            ),
        }
    }
    .map_err(CudaError::from)?;
    exec.gpu.device.issued(Queue::Compute);
    Ok(())
}

/// Conv(X, W, B?) → Y.
fn conv(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (x, w) = (exec.f32_input(0, "X")?, exec.f32_input(1, "W")?);
    let g = Geometry::new(exec, &x.shape, &w.shape)?;
    let y = exec.output(0)?;
    let padded = padded_input(exec, &g, x)?;
    run(exec, &g, padded.as_ref().unwrap_or(x), w, &y)?;
    add_bias(exec, &y, w.shape[0])?;
    Ok(vec![y])
}

/// Adds input 2 (B, one value per output channel), when given, to `y` in place.
fn add_bias(exec: &Exec<'_>, y: &CudaBuffer, channels: usize) -> OpResult<()> {
    if let Some(b) = exec.opt_input(2) {
        let b = exec.f32_input(2, "B").map(|_| b)?;
        check_shape(b, &[channels], "input B")?;
        let mut channel = vec![1; y.shape.len()];
        channel[1] = channels;
        launch_binary(exec, Binary::Add, y, &b.view(&channel), y)?;
    }
    Ok(())
}

/// X padded with zeros into the node's scratch block when `g` has asymmetric pads.
fn padded_input(exec: &Exec<'_>, g: &Geometry, x: &CudaBuffer) -> OpResult<Option<CudaBuffer>> {
    let Some((shape, shift)) = &g.explicit else { return Ok(None) };
    let padded = exec.scratch_buffer(Part::Padded, DType::DtypeF32, shape)?;
    launch_pad(exec, x, &padded, shift, 0, 0)?;
    Ok(Some(padded))
}

/// ConvTranspose(X, W, B?) → Y: cuDNN's backward data of the forward conv whose input is
/// Y and whose output is X: with Y's pads when they are symmetric, else into the
/// uncropped Y (no pads, the node's scratch) and the pads cropped off.
fn conv_transpose(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (x, w) = (exec.f32_input(0, "X")?, exec.f32_input(1, "W")?);
    if x.shape.len() < 3 || w.shape.len() != x.shape.len() || w.shape[0] != x.shape[1] {
        return Err(KernelError::shape("input W", format!("shape {:?} does not fit X {:?}", w.shape, x.shape)).into());
    }
    let group = exec.attrs.int("group", 1)?;
    let groups = usize::try_from(group).ok().filter(|&g| g > 0 && x.shape[1] % g == 0);
    let Some(groups) = groups else {
        return Err(
            KernelError::attr("group", format!("{group} does not divide the channels of X {:?}", x.shape)).into()
        );
    };
    let spatial = x.shape.len() - 2;
    let win = Window::conv_transpose(&exec.attrs, &x.shape[2..], &w.shape[2..])?;
    let tail = |v: &[usize; 3]| v[3 - spatial..].to_vec();
    let channels = w.shape[1] * groups;
    let mut full = vec![x.shape[0], channels];
    let mut shift = vec![0i64; x.shape.len()];
    for d in 0..spatial {
        let a = 3 - spatial + d;
        full.push(win.input[a] + win.pad_begin[a] + win.pad_end[a]);
        shift[2 + d] = -(win.pad_begin[a] as i64);
    }
    let y = exec.output(0)?;
    let mut want = vec![x.shape[0], channels];
    want.extend_from_slice(&tail(&win.input));
    check_shape(&y, &want, "output 0")?;
    let geometry = |input: &[usize], pads: &[usize]| {
        Geometry::from_parts(input, &w.shape, &x.shape, pads, &tail(&win.stride), &tail(&win.dilation), groups, None)
    };
    if win.pad_begin == win.pad_end {
        run(exec, &geometry(&y.shape, &tail(&win.pad_begin))?, w, x, &y)?;
    } else {
        let uncropped = exec.scratch_buffer(Part::Uncropped, DType::DtypeF32, &full)?;
        run(exec, &geometry(&full, &vec![0; spatial])?, w, x, &uncropped)?;
        launch_pad(exec, &uncropped, &y, &shift, 0, 0)?;
    }
    add_bias(exec, &y, channels)?;
    Ok(vec![y])
}

/// ConvGradData(dY, W) → dX of the declared shape.
fn conv_grad_data(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (dy, w) = (exec.f32_input(0, "dY")?, exec.f32_input(1, "W")?);
    let dx = exec.output(0)?;
    let g = Geometry::new(exec, &dx.shape, &w.shape)?;
    check_conv_output(&g, dy)?;
    match &g.explicit {
        None => run(exec, &g, w, dy, &dx)?,
        Some((shape, shift)) => {
            let padded = exec.scratch_buffer(Part::Padded, DType::DtypeF32, shape)?;
            run(exec, &g, w, dy, &padded)?;
            let crop: Vec<i64> = shift.iter().map(|s| -s).collect();
            launch_pad(exec, &padded, &dx, &crop, 0, 0)?;
        }
    }
    Ok(vec![dx])
}

/// ConvGradWeight(dY, X) → dW of the declared shape.
fn conv_grad_weight(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (dy, x) = (exec.f32_input(0, "dY")?, exec.f32_input(1, "X")?);
    let dw = exec.output(0)?;
    let g = Geometry::new(exec, &x.shape, &dw.shape)?;
    check_conv_output(&g, dy)?;
    let padded = padded_input(exec, &g, x)?;
    run(exec, &g, padded.as_ref().unwrap_or(x), dy, &dw)?;
    Ok(vec![dw])
}

/// Checks that dY has the forward Conv's output shape.
fn check_conv_output(g: &Geometry, dy: &CudaBuffer) -> OpResult<()> {
    let want: Vec<usize> = g.y[..dy.shape.len().min(g.y.len())].iter().map(|&d| d as usize).collect();
    check_shape(dy, &want, "input dY")
}
