//! Normalizations (kernels in `norm.cu`): BatchNormalization (inference), BatchNormTrain
//! and BatchNormGrad over X [N, C, ...]; LayerNormalization, InstanceNormalization and
//! LayerNormGrad over rows; LRN and LRNGrad across channels.

use super::movement::copy_strided;
use super::reduce::sum_to;
use super::{check_shape, ptr, Arg, Exec, OpResult, Table};
use crate::backend::cuda::layout::{broadcast, contiguous, View};
use crate::backend::cuda::CudaBuffer;
use crate::error::KernelError;
use crate::geometry::layout::norm_axis;
use crate::geometry::window::Lrn;
use crate::tensor::numel;
use lms_proto::lms::DType;
use lms_proto::ops::scratch::{channel_splits, column_splits, Part};

/// The ONNX normalizations.
pub(super) const ONNX: Table = &[
    ("BatchNormalization", batch_norm),
    ("InstanceNormalization", instance_norm),
    ("LRN", |e| lrn(e, false)),
    ("LayerNormalization", layer_norm),
];

/// The `lms` normalizations.
pub(super) const LMS: Table = &[
    ("BatchNormGrad", batch_norm_grad),
    ("BatchNormTrain", batch_norm_train),
    ("LRNGrad", |e| lrn(e, true)),
    ("LayerNormGrad", layer_norm_grad),
];

/// LRN(X) → Y, or LRNGrad(dY, X) → dX, over X [N, C, ...].
fn lrn(exec: &Exec<'_>, grad: bool) -> OpResult<Vec<CudaBuffer>> {
    let lrn = Lrn::from_attrs(&exec.attrs)?;
    let x = exec.f32_input(usize::from(grad), "X")?;
    let (n, c, sp) = channels(x)?;
    let out = exec.output(0)?;
    check_shape(&out, &x.shape, "output 0")?;
    let mut args = vec![
        Arg::I64(n as i64),
        Arg::I64(c as i64),
        Arg::I64(sp as i64),
        Arg::I64(lrn.before as i64),
        Arg::I64(lrn.after as i64),
        Arg::F64(lrn.alpha / lrn.size as f64),
        Arg::F64(lrn.beta),
        Arg::F64(lrn.bias),
    ];
    if grad {
        let dy = exec.f32_input(0, "dY")?;
        check_shape(dy, &x.shape, "input dY")?;
        args.push(ptr(dy));
    }
    args.extend([ptr(x), ptr(&out)]);
    exec.launch(if grad { "lrn_grad_f32" } else { "lrn_f32" }, out.numel() as u64, &args)?;
    Ok(vec![out])
}

/// (N, C, elements per channel plane) of X [N, C, ...].
pub(super) fn channels(x: &CudaBuffer) -> OpResult<(usize, usize, usize)> {
    if x.shape.len() < 2 {
        return Err(KernelError::shape("input X", format!("expected [N, C, ...], found {:?}", x.shape)).into());
    }
    Ok((x.shape[0], x.shape[1], numel(&x.shape[2..])))
}

/// Input `i`, an f32 per-channel parameter of shape [c].
pub(super) fn per_channel<'a>(exec: &Exec<'a>, i: usize, name: &str, c: usize) -> OpResult<&'a CudaBuffer> {
    let t = exec.f32_input(i, name)?;
    check_shape(t, &[c], &format!("input {name}"))?;
    Ok(t)
}

/// A null device address for an optional kernel argument.
pub(super) const NULL: Arg = Arg::Ptr(0);

/// Sums per channel of X [n, c, s] into `out` (doubles: the first at [0, c), the second
/// at [c, 2c)), in mode 0 (Σx), 1 (Σ(x − mean)²) or 2 (Σdy, Σdy·xhat).
#[allow(clippy::too_many_arguments)]
pub(super) fn channel_sums(
    exec: &Exec<'_>,
    mode: i32,
    (n, c, s): (usize, usize, usize),
    x: &CudaBuffer,
    dy: Option<&CudaBuffer>,
    stats: u64,
    out: u64,
) -> OpResult<()> {
    let elements = (n * s) as u64;
    let splits = channel_splits(c as u64, elements);
    let chunk = elements.div_ceil(splits).max(1);
    let partial = exec.scratch_sized(Part::ChannelPartials, c as u64 * splits * 16)?;
    exec.launch_warps(
        "channel_partials_f32",
        c as u64 * splits,
        &[
            Arg::I32(mode),
            Arg::I64(n as i64),
            Arg::I64(c as i64),
            Arg::I64(s as i64),
            Arg::I64(splits as i64),
            Arg::I64(chunk as i64),
            ptr(x),
            dy.map_or(NULL, ptr),
            Arg::Ptr(stats),
            Arg::Ptr(stats + c as u64 * 8),
            Arg::Ptr(partial.ptr()),
        ],
    )?;
    exec.launch(
        "channel_finish",
        c as u64,
        &[Arg::I64(c as i64), Arg::I64(splits as i64), Arg::Ptr(partial.ptr()), Arg::Ptr(out)],
    )
}

/// y = (x − coef₀) · coef₁ + coef₂ per channel.
pub(super) fn channel_affine(
    exec: &Exec<'_>,
    (n, c, s): (usize, usize, usize),
    coef: u64,
    x: &CudaBuffer,
    y: &CudaBuffer,
) -> OpResult<()> {
    exec.launch(
        "channel_affine_f32",
        (n * c * s) as u64,
        &[Arg::I64(n as i64), Arg::I64(c as i64), Arg::I64(s as i64), Arg::Ptr(coef), ptr(x), ptr(y)],
    )
}

/// BatchNormalization with running statistics (inference form).
fn batch_norm(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    if exec.attrs.int("training_mode", 0)? != 0 || exec.outputs.len() > 1 {
        return Err(KernelError::unsupported("BatchNormalization in training mode (inference form only)").into());
    }
    if exec.attrs.int("spatial", 1)? == 0 {
        return Err(KernelError::unsupported("BatchNormalization with spatial = 0").into());
    }
    let x = exec.f32_input(0, "X")?;
    let dims = channels(x)?;
    let c = dims.1;
    let eps = exec.float_attr("epsilon", 1e-5)?;
    let params: Vec<&CudaBuffer> = [(1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var")]
        .iter()
        .map(|&(i, name)| per_channel(exec, i, name, c))
        .collect::<OpResult<_>>()?;
    let coef = exec.scratch_sized(Part::Coefficients, c as u64 * 24)?;
    exec.launch(
        "bn_infer_coef_f32",
        c as u64,
        &[
            Arg::I64(c as i64),
            Arg::F64(eps),
            ptr(params[0]),
            ptr(params[1]),
            ptr(params[2]),
            ptr(params[3]),
            Arg::Ptr(coef.ptr()),
        ],
    )?;
    let y = exec.output(0)?;
    channel_affine(exec, dims, coef.ptr(), x, &y)?;
    Ok(vec![y])
}

/// BatchNormTrain: batch statistics (two passes, in double), Y, the new running
/// statistics and the saved mean and inverse standard deviation.
fn batch_norm_train(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.f32_input(0, "X")?;
    let dims = channels(x)?;
    let (n, c, s) = dims;
    let eps = exec.float_attr("epsilon", 1e-5)?;
    let momentum = exec.float_attr("momentum", 0.9)?;
    let params: Vec<&CudaBuffer> = [(1, "scale"), (2, "bias"), (3, "running_mean"), (4, "running_var")]
        .iter()
        .map(|&(i, name)| per_channel(exec, i, name, c))
        .collect::<OpResult<_>>()?;
    let count = (n * s).max(1) as f64;
    // stats: Σx → mean at [0, c); Σ(x − mean)² at [2c, 3c).
    let stats = exec.scratch_sized(Part::Statistics, c as u64 * 32)?;
    let (mean, squares) = (stats.ptr(), stats.ptr() + c as u64 * 16);
    channel_sums(exec, 0, dims, x, None, mean, mean)?;
    exec.launch("scale_stats", c as u64, &[Arg::I64(c as i64), Arg::F64(count), Arg::Ptr(mean)])?;
    channel_sums(exec, 1, dims, x, None, mean, squares)?;
    let outputs: Vec<CudaBuffer> = (0..exec.outputs.len().min(5)).map(|i| exec.output(i)).collect::<OpResult<_>>()?;
    let out = |i: usize| outputs.get(i).map_or(NULL, ptr);
    let coef = exec.scratch_sized(Part::Coefficients, c as u64 * 24)?;
    exec.launch(
        "bn_train_stats_f32",
        c as u64,
        &[
            Arg::I64(c as i64),
            Arg::F64(count),
            Arg::F64(eps),
            Arg::F64(momentum),
            Arg::I32(i32::from(exec.attrs.int("unbiased", 0)? != 0)),
            Arg::Ptr(mean),
            Arg::Ptr(squares),
            ptr(params[0]),
            ptr(params[1]),
            ptr(params[2]),
            ptr(params[3]),
            Arg::Ptr(coef.ptr()),
            out(1),
            out(2),
            out(3),
            out(4),
        ],
    )?;
    let y = outputs.first().ok_or_else(|| KernelError::invalid("output 0 is not declared"))?;
    channel_affine(exec, dims, coef.ptr(), x, y)?;
    Ok(outputs)
}

/// BatchNormGrad(dY, X, scale, saved_mean, saved_invstd) → dX, dscale, dbias.
fn batch_norm_grad(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (dy, x) = (exec.f32_input(0, "dY")?, exec.f32_input(1, "X")?);
    check_shape(dy, &x.shape, "input dY")?;
    let dims = channels(x)?;
    let (n, c, s) = dims;
    let scale = per_channel(exec, 2, "scale", c)?;
    let (mean, invstd) = (per_channel(exec, 3, "saved_mean", c)?, per_channel(exec, 4, "saved_invstd", c)?);
    // stats: mean, invstd (double) at [0, 2c); sums Σdy, Σdy·xhat at [2c, 4c).
    let stats = exec.scratch_sized(Part::Statistics, c as u64 * 32)?;
    let sums = stats.ptr() + c as u64 * 16;
    exec.launch("widen_stats_f32", c as u64, &[Arg::I64(c as i64), ptr(mean), ptr(invstd), Arg::Ptr(stats.ptr())])?;
    channel_sums(exec, 2, dims, x, Some(dy), stats.ptr(), sums)?;
    let (dx, dscale, dbias) = (exec.output(0)?, exec.output(1)?, exec.output(2)?);
    exec.launch("bn_grad_params_f32", c as u64, &[Arg::I64(c as i64), Arg::Ptr(sums), ptr(&dscale), ptr(&dbias)])?;
    exec.launch(
        "bn_grad_dx_f32",
        (n * c * s) as u64,
        &[
            Arg::I64(n as i64),
            Arg::I64(c as i64),
            Arg::I64(s as i64),
            NULL,
            Arg::Ptr(stats.ptr()),
            Arg::Ptr(sums),
            ptr(scale),
            ptr(x),
            ptr(dy),
            ptr(&dx),
        ],
    )?;
    Ok(vec![dx, dscale, dbias])
}

/// Threads per block for rows of `n` elements.
fn row_threads(n: usize) -> u32 {
    (n.div_ceil(32) * 32).clamp(32, 256) as u32
}

/// Normalizes `rows` rows of `n` elements; parameters per column, or per row modulo
/// `channels` when `channels` > 0.
#[allow(clippy::too_many_arguments)]
fn row_norm(
    exec: &Exec<'_>,
    (rows, n, channels): (usize, usize, usize),
    eps: f64,
    x: &CudaBuffer,
    scale: &CudaBuffer,
    bias: Option<&CudaBuffer>,
    outputs: &[CudaBuffer],
) -> OpResult<()> {
    let out = |i: usize| outputs.get(i).map_or(NULL, ptr);
    exec.launch_blocks(
        "row_norm_f32",
        rows as u64,
        row_threads(n),
        &[
            Arg::I64(rows as i64),
            Arg::I64(n as i64),
            Arg::I64(channels as i64),
            Arg::F64(eps),
            ptr(x),
            ptr(scale),
            bias.map_or(NULL, ptr),
            out(0),
            out(1),
            out(2),
        ],
    )
}

/// LayerNormalization's `t` (Scale or B) over the normalized shape `dims`: itself when it
/// has their element count, else broadcast (numpy rules) into the scratch part `part` of `dims`.
fn covering(exec: &Exec<'_>, t: &CudaBuffer, dims: &[usize], name: &str, part: Part) -> OpResult<CudaBuffer> {
    if t.numel() == numel(dims) {
        return Ok(t.clone());
    }
    let strides = broadcast(&t.shape, dims, name)?;
    let full = exec.scratch_buffer(part, DType::DtypeF32, dims)?;
    copy_strided(exec, dims, &full, View::new(&contiguous(dims)), t, View::new(&strides))?;
    Ok(full)
}

fn layer_norm(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.f32_input(0, "X")?;
    let axis = norm_axis(exec.attrs.int("axis", -1)?, x.shape.len(), "axis")?;
    let scale = exec.f32_input(1, "Scale")?;
    let bias = exec.opt_input(2);
    let dims = &x.shape[axis..];
    let scale = &covering(exec, scale, dims, "input Scale", Part::Scale)?;
    let bias = bias.map(|b| covering(exec, b, dims, "input B", Part::Bias)).transpose()?;
    let bias = bias.as_ref();
    let (rows, n) = (numel(&x.shape[..axis]), numel(dims));
    let outputs: Vec<CudaBuffer> = (0..exec.outputs.len().min(3)).map(|i| exec.output(i)).collect::<OpResult<_>>()?;
    row_norm(exec, (rows, n, 0), exec.float_attr("epsilon", 1e-5)?, x, scale, bias, &outputs)?;
    Ok(outputs)
}

fn instance_norm(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.f32_input(0, "input")?;
    let (n, c, s) = channels(x)?;
    let scale = per_channel(exec, 1, "scale", c)?;
    let bias = per_channel(exec, 2, "B", c)?;
    let y = exec.output(0)?;
    row_norm(exec, (n * c, s, c), exec.float_attr("epsilon", 1e-5)?, x, scale, Some(bias), std::slice::from_ref(&y))?;
    Ok(vec![y])
}

/// LayerNormGrad(dY, X, scale, mean, invstd) → dX, dscale, dbias.
fn layer_norm_grad(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (dy, x) = (exec.f32_input(0, "dY")?, exec.f32_input(1, "X")?);
    check_shape(dy, &x.shape, "input dY")?;
    let axis = norm_axis(exec.attrs.int("axis", -1)?, x.shape.len(), "axis")?;
    let given_scale = exec.f32_input(2, "scale")?;
    let dims = &x.shape[axis..];
    let scale = &covering(exec, given_scale, dims, "input scale", Part::Scale)?;
    let (rows, n) = (numel(&x.shape[..axis]), numel(dims));
    let (mean, invstd) = (exec.f32_input(3, "mean")?, exec.f32_input(4, "invstd")?);
    let mut stat_shape = x.shape[..axis].to_vec();
    stat_shape.resize(x.shape.len(), 1);
    check_shape(mean, &stat_shape, "input mean")?;
    check_shape(invstd, &stat_shape, "input invstd")?;
    let (dx, given_dscale, given_dbias) = (exec.output(0)?, exec.output(1)?, exec.output(2)?);
    // With a broadcast scale, dscale and dbias are summed down to its shape at the end.
    let broadcast_scale = given_scale.numel() != n;
    let (dscale, dbias) = if broadcast_scale {
        (
            exec.scratch_buffer(Part::ScaleGrad, DType::DtypeF32, dims)?,
            exec.scratch_buffer(Part::BiasGrad, DType::DtypeF32, dims)?,
        )
    } else {
        (given_dscale.clone(), given_dbias.clone())
    };
    exec.launch_blocks(
        "layer_norm_dx_f32",
        rows as u64,
        row_threads(n),
        &[Arg::I64(rows as i64), Arg::I64(n as i64), ptr(dy), ptr(x), ptr(scale), ptr(mean), ptr(invstd), ptr(&dx)],
    )?;
    let splits = column_splits(rows as u64, n as u64);
    let chunk = (rows as u64).div_ceil(splits).max(1);
    let partial = exec.scratch_sized(Part::ColumnPartials, n as u64 * splits * 16)?;
    exec.launch(
        "layer_norm_partials_f32",
        n as u64 * splits,
        &[
            Arg::I64(rows as i64),
            Arg::I64(n as i64),
            Arg::I64(splits as i64),
            Arg::I64(chunk as i64),
            ptr(dy),
            ptr(x),
            ptr(mean),
            ptr(invstd),
            Arg::Ptr(partial.ptr()),
        ],
    )?;
    exec.launch(
        "layer_norm_finish_f32",
        n as u64,
        &[Arg::I64(n as i64), Arg::I64(splits as i64), Arg::Ptr(partial.ptr()), ptr(&dscale), ptr(&dbias)],
    )?;
    if broadcast_scale {
        sum_to(exec, &dscale, &given_dscale)?;
        sum_to(exec, &dbias, &given_dbias)?;
    }
    Ok(vec![dx, given_dscale, given_dbias])
}
