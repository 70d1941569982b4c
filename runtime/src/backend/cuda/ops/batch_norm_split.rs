//! Batch normalization split along the batch (kernels in `norm.cu`): per-part statistics
//! and gradient sums as f64 `[3, C]` rows (count, then two per-channel rows), their
//! merges in part order, and each part's normalization and dX from the merged rows, as
//! the CPU backend computes them.

use super::norm::{channel_affine, channel_sums, channels, per_channel, NULL};
use super::{check_dtype, check_shape, ptr, Arg, Exec, OpResult, Table};
use crate::backend::cuda::CudaBuffer;
use crate::error::KernelError;
use lms_proto::lms::DType;
use lms_proto::ops::scratch::Part;

/// The batch-norm split ops (`lms` domain).
pub(super) const LMS: Table = &[
    ("BatchNormApply", batch_norm_apply),
    ("BatchNormGradData", batch_norm_grad_data),
    ("BatchNormGradMerge", batch_norm_grad_merge),
    ("BatchNormGradSums", batch_norm_grad_sums),
    ("BatchNormMerge", batch_norm_merge),
    ("BatchNormStatistics", batch_norm_statistics),
];

/// Input `i` (named `name`): f64 rows `[rows, c]`.
fn rows_input<'a>(exec: &Exec<'a>, i: usize, name: &str, rows: usize, c: usize) -> OpResult<&'a CudaBuffer> {
    let t = exec.typed_input(i, name, DType::DtypeF64)?;
    check_shape(t, &[rows, c], &format!("input {name}"))?;
    Ok(t)
}

/// The inputs from `from` on: each part's f64 `[3, c]` rows, at least one.
fn parts<'a>(exec: &Exec<'a>, from: usize, c: usize) -> OpResult<Vec<&'a CudaBuffer>> {
    if exec.inputs.len() <= from {
        return Err(KernelError::MissingInput("part 0".into()).into());
    }
    (from..exec.inputs.len()).map(|i| rows_input(exec, i, &format!("part {}", i - from), 3, c)).collect()
}

/// A new buffer for output `i`, which must be declared of `dtype` and `shape` (the
/// kernels write f32 or f64 values of exactly that many elements).
fn output_of(exec: &Exec<'_>, i: usize, dtype: DType, shape: &[usize]) -> OpResult<CudaBuffer> {
    let out = exec.output(i)?;
    let what = format!("output {i}");
    check_dtype(&out, dtype, &what)?;
    check_shape(&out, shape, &what)?;
    Ok(out)
}

/// Address of row `k` of `[rows, c]` doubles at `base`.
fn row(base: u64, k: usize, c: usize) -> u64 {
    base + (k * c * 8) as u64
}

/// BatchNormStatistics(X) → [count, mean, M2] per channel (two passes, as BatchNormTrain).
fn batch_norm_statistics(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.f32_input(0, "X")?;
    let dims = channels(x)?;
    let (n, c, s) = dims;
    let count = (n * s).max(1) as f64;
    let out = output_of(exec, 0, DType::DtypeF64, &[3, c])?;
    let mean = row(out.ptr(), 1, c);
    // Σx into rows 1 and 2 (0), then the mean in row 1; Σ(x − mean)² via scratch into row 2.
    channel_sums(exec, 0, dims, x, None, mean, mean)?;
    exec.launch("scale_stats", c as u64, &[Arg::I64(c as i64), Arg::F64(count), Arg::Ptr(mean)])?;
    let squares = exec.scratch_sized(Part::Statistics, c as u64 * 16)?;
    channel_sums(exec, 1, dims, x, None, mean, squares.ptr())?;
    let args = [Arg::I64(c as i64), Arg::F64(count), Arg::Ptr(squares.ptr()), ptr(&out)];
    exec.launch("bn_part_rows", c as u64, &args)?;
    Ok(vec![out])
}

/// BatchNormMerge(running_mean, running_var, stats…) → new running mean and variance,
/// saved mean and inverse std, and the batch's f64 (mean, invstd).
fn batch_norm_merge(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let c = exec.f32_input(0, "running_mean")?.shape.first().copied().unwrap_or(0);
    let (rm, rv) = (per_channel(exec, 0, "running_mean", c)?, per_channel(exec, 1, "running_var", c)?);
    let parts = parts(exec, 2, c)?;
    let eps = exec.float_attr("epsilon", 1e-5)?;
    let momentum = exec.float_attr("momentum", 0.9)?;
    // acc: Σn·mean then the mean at [0, c); N at [c, 2c); M2 at [2c, 3c).
    let acc = exec.scratch_sized(Part::Statistics, c as u64 * 24)?;
    let over_parts = |kernel: &'static str| -> OpResult<()> {
        for (k, part) in parts.iter().enumerate() {
            let args = [Arg::I64(c as i64), Arg::I32(i32::from(k == 0)), ptr(part), Arg::Ptr(acc.ptr())];
            exec.launch(kernel, c as u64, &args)?;
        }
        Ok(())
    };
    over_parts("bn_merge_means")?;
    exec.launch("bn_merge_mean", c as u64, &[Arg::I64(c as i64), Arg::Ptr(acc.ptr())])?;
    over_parts("bn_merge_squares")?;
    let mut outputs: Vec<CudaBuffer> =
        (0..4).map(|i| output_of(exec, i, DType::DtypeF32, &[c])).collect::<OpResult<_>>()?;
    outputs.push(output_of(exec, 4, DType::DtypeF64, &[2, c])?);
    let unbiased = Arg::I32(i32::from(exec.attrs.int("unbiased", 0)? != 0));
    let mut args =
        vec![Arg::I64(c as i64), Arg::F64(eps), Arg::F64(momentum), unbiased, Arg::Ptr(acc.ptr()), ptr(rm), ptr(rv)];
    args.extend(outputs.iter().map(ptr));
    exec.launch("bn_merge_finish_f32", c as u64, &args)?;
    Ok(outputs)
}

/// BatchNormApply(X, scale, bias, batch) → Y with the batch's f64 (mean, invstd).
fn batch_norm_apply(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let x = exec.f32_input(0, "X")?;
    let dims = channels(x)?;
    let c = dims.1;
    let (scale, bias) = (per_channel(exec, 1, "scale", c)?, per_channel(exec, 2, "bias", c)?);
    let batch = rows_input(exec, 3, "batch", 2, c)?;
    let coef = exec.scratch_sized(Part::Coefficients, c as u64 * 24)?;
    let args = [Arg::I64(c as i64), ptr(batch), ptr(scale), ptr(bias), Arg::Ptr(coef.ptr())];
    exec.launch("bn_apply_coef_f32", c as u64, &args)?;
    let y = output_of(exec, 0, DType::DtypeF32, &x.shape)?;
    channel_affine(exec, dims, coef.ptr(), x, &y)?;
    Ok(vec![y])
}

/// BatchNormGradSums(dY, X, saved_mean, saved_invstd) → [count, Σdy, Σdy·x̂] per channel.
fn batch_norm_grad_sums(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (dy, x) = (exec.f32_input(0, "dY")?, exec.f32_input(1, "X")?);
    check_shape(dy, &x.shape, "input dY")?;
    let dims = channels(x)?;
    let (n, c, s) = dims;
    let (mean, invstd) = (per_channel(exec, 2, "saved_mean", c)?, per_channel(exec, 3, "saved_invstd", c)?);
    let stats = exec.scratch_sized(Part::Statistics, c as u64 * 16)?;
    exec.launch("widen_stats_f32", c as u64, &[Arg::I64(c as i64), ptr(mean), ptr(invstd), Arg::Ptr(stats.ptr())])?;
    let out = output_of(exec, 0, DType::DtypeF64, &[3, c])?;
    channel_sums(exec, 2, dims, x, Some(dy), stats.ptr(), row(out.ptr(), 1, c))?;
    let count = (n * s.max(1)) as f64;
    exec.launch("bn_part_rows", c as u64, &[Arg::I64(c as i64), Arg::F64(count), NULL, ptr(&out)])?;
    Ok(vec![out])
}

/// BatchNormGradMerge(sums…) → dscale, dbias and the batch's f64 `[3, C]` sums.
fn batch_norm_grad_merge(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let c = exec.out_shape(0)?.first().copied().unwrap_or(0);
    let parts = parts(exec, 0, c)?;
    let (dscale, dbias) = (output_of(exec, 0, DType::DtypeF32, &[c])?, output_of(exec, 1, DType::DtypeF32, &[c])?);
    let total = output_of(exec, 2, DType::DtypeF64, &[3, c])?;
    for (k, part) in parts.iter().enumerate() {
        let args = [Arg::I64(3 * c as i64), Arg::I32(i32::from(k == 0)), ptr(part), ptr(&total)];
        exec.launch("bn_rows_add", 3 * c as u64, &args)?;
    }
    let args = [Arg::I64(c as i64), Arg::Ptr(row(total.ptr(), 1, c)), ptr(&dscale), ptr(&dbias)];
    exec.launch("bn_grad_params_f32", c as u64, &args)?;
    Ok(vec![dscale, dbias, total])
}

/// BatchNormGradData(dY, X, scale, saved_mean, saved_invstd, sums) → dX of one part.
fn batch_norm_grad_data(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (dy, x) = (exec.f32_input(0, "dY")?, exec.f32_input(1, "X")?);
    check_shape(dy, &x.shape, "input dY")?;
    let (n, c, s) = channels(x)?;
    let scale = per_channel(exec, 2, "scale", c)?;
    let (mean, invstd) = (per_channel(exec, 3, "saved_mean", c)?, per_channel(exec, 4, "saved_invstd", c)?);
    let total = rows_input(exec, 5, "sums", 3, c)?;
    let stats = exec.scratch_sized(Part::Statistics, c as u64 * 16)?;
    exec.launch("widen_stats_f32", c as u64, &[Arg::I64(c as i64), ptr(mean), ptr(invstd), Arg::Ptr(stats.ptr())])?;
    let dx = output_of(exec, 0, DType::DtypeF32, &x.shape)?;
    let args = [
        Arg::I64(n as i64),
        Arg::I64(c as i64),
        Arg::I64(s as i64),
        ptr(total),
        Arg::Ptr(stats.ptr()),
        Arg::Ptr(row(total.ptr(), 1, c)),
        ptr(scale),
        ptr(x),
        ptr(dy),
        ptr(&dx),
    ];
    exec.launch("bn_grad_dx_f32", (n * c * s) as u64, &args)?;
    Ok(vec![dx])
}
