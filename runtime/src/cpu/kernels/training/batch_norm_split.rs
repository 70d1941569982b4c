//! BatchNormTrain and BatchNormGrad split along the batch, exactly: per-part
//! statistics merged into the whole batch's (Chan et al.'s parallel variance), and
//! per-part gradient sums added before each part's dX. The per-part tensors are f64
//! `[3, C]` rows (count, then two per-channel rows) so that merging adds no rounding
//! beyond the unsplit kernels' own f64 sums; the code paths are BatchNormTrain's and
//! BatchNormGrad's.

use super::super::norm::{channels, per_channel};
use super::super::num::Float;
use super::super::{dispatch_float, Ctx, Kernel};
use super::norm_train::{grad_input, inverse_std, normalize, running_update, running_variance, ChannelStats, GradSums};
use super::{from_f64s, same_shape};
use crate::error::{KernelError, Result};
use crate::tensor::HostTensor;

/// The batch-norm split kernels.
pub(super) const KERNELS: &[(&str, Kernel)] = &[
    ("BatchNormApply", batch_norm_apply),
    ("BatchNormGradData", batch_norm_grad_data),
    ("BatchNormGradMerge", batch_norm_grad_merge),
    ("BatchNormGradSums", batch_norm_grad_sums),
    ("BatchNormMerge", batch_norm_merge),
    ("BatchNormStatistics", batch_norm_statistics),
];

/// Per-channel rows of an f64 `[3, C]` tensor: count (the same in every column),
/// then two per-channel rows.
struct Rows {
    count: f64,
    first: Vec<f64>,
    second: Vec<f64>,
}

impl Rows {
    /// Input `i` (named `name`), `[3, C]` f64.
    fn input(ctx: &Ctx<'_>, i: usize, name: &str) -> Result<Rows> {
        let t = ctx.input(i, name)?;
        let what = format!("input {name}");
        let [3, c] = t.shape[..] else {
            return Err(KernelError::shape(what, format!("expected [3, C], found {:?}", t.shape)));
        };
        let v = t.view::<f64>(&what)?;
        Ok(Rows { count: v.first().copied().unwrap_or(0.0), first: v[c..2 * c].to_vec(), second: v[2 * c..].to_vec() })
    }

    /// Every input from `from` on, each `[3, C]` with the same C.
    fn inputs(ctx: &Ctx<'_>, from: usize) -> Result<Vec<Rows>> {
        let rows = (from..ctx.inputs.len())
            .map(|i| Rows::input(ctx, i, &format!("part {}", i - from)))
            .collect::<Result<Vec<_>>>()?;
        let c = rows.first().map(|r| r.first.len()).ok_or_else(|| KernelError::MissingInput("part 0".into()))?;
        if let Some(i) = rows.iter().position(|r| r.first.len() != c) {
            return Err(KernelError::shape(format!("input part {i}"), format!("expected [3, {c}]")));
        }
        Ok(rows)
    }

    /// The `[3, C]` f64 tensor.
    fn tensor(self) -> Result<HostTensor> {
        let c = self.first.len();
        let values = std::iter::repeat_n(self.count, c).chain(self.first).chain(self.second).collect::<Vec<f64>>();
        HostTensor::from_vec(vec![3, c], values)
    }
}

/// BatchNormStatistics(X) → [count, mean, M2] per channel of one part of the batch.
fn batch_norm_statistics(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    let (n, c, plane) = channels(x)?;
    let stats = dispatch_float!(x.dtype(), "input X", T => Ok(ChannelStats::of(x.view::<T>("input X")?, n, c, plane)))?;
    Ok(vec![Rows { count: stats.count, first: stats.mean, second: stats.m2 }.tensor()?])
}

/// BatchNormMerge(running_mean, running_var, stats…) → new running mean and variance,
/// saved mean and inverse standard deviation, and the f64 `[2, C]` (mean, invstd)
/// that BatchNormApply reads. The whole batch's mean is the count-weighted mean of the
/// parts' means; its M2 is Σ M2ᵢ + nᵢ·(meanᵢ − mean)².
fn batch_norm_merge(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let dtype = ctx.input(0, "running_mean")?.dtype();
    dispatch_float!(dtype, "input running_mean", T => batch_norm_merge_typed::<T>(ctx))
}

fn batch_norm_merge_typed<T: Float>(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let eps = f64::from(ctx.attrs.float("epsilon", 1e-5)?);
    let momentum = f64::from(ctx.attrs.float("momentum", 0.9)?);
    let parts = Rows::inputs(ctx, 2)?;
    let c = parts[0].first.len();
    let running_mean = per_channel::<T>(ctx, 0, "running_mean", c)?;
    let running_var = per_channel::<T>(ctx, 1, "running_var", c)?;
    let count: f64 = parts.iter().map(|p| p.count).sum();
    let mean: Vec<f64> = (0..c).map(|ch| parts.iter().map(|p| p.count * p.first[ch]).sum::<f64>() / count).collect();
    let var: Vec<f64> = (0..c)
        .map(|ch| parts.iter().map(|p| p.second[ch] + p.count * (p.first[ch] - mean[ch]).powi(2)).sum::<f64>() / count)
        .collect();
    let invstd = inverse_std(&var, eps);
    let mut outs = Vec::with_capacity(5);
    let running_var = running_update(&running_var, &running_variance(ctx, &var, count)?, momentum);
    let running = [running_update(&running_mean, &mean, momentum), running_var];
    for values in running.into_iter().chain([mean.clone(), invstd.clone()]) {
        outs.push(from_f64s::<T>(vec![c], values.into_iter())?);
    }
    outs.push(HostTensor::from_vec(vec![2, c], mean.into_iter().chain(invstd).collect::<Vec<f64>>())?);
    Ok(outs)
}

/// BatchNormApply(X, scale, bias, batch) → Y = (X − mean)·invstd·scale + bias with the
/// whole batch's f64 (mean, invstd).
fn batch_norm_apply(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    dispatch_float!(x.dtype(), "input X", T => batch_norm_apply_typed::<T>(ctx, x))
}

fn batch_norm_apply_typed<T: Float>(ctx: &Ctx<'_>, x: &HostTensor) -> Result<Vec<HostTensor>> {
    let (_, c, plane) = channels(x)?;
    let scale = per_channel::<T>(ctx, 1, "scale", c)?;
    let bias = per_channel::<T>(ctx, 2, "bias", c)?;
    let batch = ctx.input(3, "batch")?;
    same_shape(batch, &[2, c], "batch")?;
    let (mean, invstd) = batch.view::<f64>("input batch")?.split_at(c);
    let y = normalize(x.view::<T>("input X")?, c, plane, mean, invstd, &scale, &bias);
    Ok(vec![HostTensor::from_vec(x.shape.clone(), y)?])
}

/// BatchNormGradSums(dY, X, saved_mean, saved_invstd) → [count, Σdy, Σdy·x̂] per
/// channel of one part of the batch.
fn batch_norm_grad_sums(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(1, "X")?;
    dispatch_float!(x.dtype(), "input X", T => batch_norm_grad_sums_typed::<T>(ctx, x))
}

fn batch_norm_grad_sums_typed<T: Float>(ctx: &Ctx<'_>, x: &HostTensor) -> Result<Vec<HostTensor>> {
    let dy = ctx.input(0, "dY")?;
    same_shape(dy, &x.shape, "dY")?;
    let (n, c, plane) = channels(x)?;
    let mean = per_channel::<T>(ctx, 2, "saved_mean", c)?;
    let invstd = per_channel::<T>(ctx, 3, "saved_invstd", c)?;
    let sums = GradSums::of(x.view::<T>("input X")?, dy.view::<T>("input dY")?, c, plane, &mean, &invstd);
    let count = (n * plane.max(1)) as f64;
    Ok(vec![Rows { count, first: sums.dbias, second: sums.dscale }.tensor()?])
}

/// BatchNormGradMerge(sums…) → dscale, dbias (the declared dtype) and the whole
/// batch's f64 `[3, C]` sums that BatchNormGradData reads.
fn batch_norm_grad_merge(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let parts = Rows::inputs(ctx, 0)?;
    let c = parts[0].first.len();
    let total = |row: fn(&Rows) -> &Vec<f64>| (0..c).map(|ch| parts.iter().map(|p| row(p)[ch]).sum()).collect();
    let whole =
        Rows { count: parts.iter().map(|p| p.count).sum(), first: total(|p| &p.first), second: total(|p| &p.second) };
    let (dscale, dbias) = (whole.second.clone(), whole.first.clone());
    let grads = dispatch_float!(ctx.out_dtype(0)?, "output dscale", T => Ok([
        from_f64s::<T>(vec![c], dscale.into_iter())?,
        from_f64s::<T>(vec![c], dbias.into_iter())?,
    ]))?;
    Ok(grads.into_iter().chain([whole.tensor()?]).collect())
}

/// BatchNormGradData(dY, X, scale, saved_mean, saved_invstd, sums) → dX of one part
/// from the whole batch's sums and count.
fn batch_norm_grad_data(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(1, "X")?;
    dispatch_float!(x.dtype(), "input X", T => batch_norm_grad_data_typed::<T>(ctx, x))
}

fn batch_norm_grad_data_typed<T: Float>(ctx: &Ctx<'_>, x: &HostTensor) -> Result<Vec<HostTensor>> {
    let dy = ctx.input(0, "dY")?;
    same_shape(dy, &x.shape, "dY")?;
    let (_, c, plane) = channels(x)?;
    let scale = per_channel::<T>(ctx, 2, "scale", c)?;
    let mean = per_channel::<T>(ctx, 3, "saved_mean", c)?;
    let invstd = per_channel::<T>(ctx, 4, "saved_invstd", c)?;
    let whole = Rows::input(ctx, 5, "sums")?;
    if whole.first.len() != c {
        return Err(KernelError::shape("input sums", format!("expected [3, {c}]")));
    }
    let sums = GradSums { dbias: whole.first, dscale: whole.second };
    let (xs, dys) = (x.view::<T>("input X")?, dy.view::<T>("input dY")?);
    let dx = grad_input(xs, dys, c, plane, [&scale, &mean, &invstd], whole.count, &sums);
    Ok(vec![HostTensor::from_vec(x.shape.clone(), dx)?])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::tensor::HostTensor;
    use lms_proto::lms::DType::*;

    /// The parts of `x` [N, ...] along the batch: `array_split` lengths.
    fn batch_parts(x: &HostTensor, parts: usize) -> Vec<HostTensor> {
        let n = x.shape[0];
        let row = f32s(x).len() / n;
        let values = f32s(x);
        let mut start = 0;
        (0..parts)
            .map(|i| {
                let len = n / parts + usize::from(i < n % parts);
                let mut shape = x.shape.clone();
                shape[0] = len;
                let part = tensor(&shape, values[start * row..(start + len) * row].to_vec());
                start += len;
                part
            })
            .collect()
    }

    fn concat(parts: &[HostTensor]) -> Vec<f32> {
        parts.iter().flat_map(f32s).collect()
    }

    /// Relative difference of f32 values, against the larger of |want| and 1.
    fn max_rel(got: &[f32], want: &[f32]) -> f64 {
        assert_eq!(got.len(), want.len());
        got.iter().zip(want).map(|(g, w)| f64::from((g - w).abs()) / f64::from(w.abs().max(1.0))).fold(0.0, f64::max)
    }

    #[test]
    fn statistics_merge_and_apply_equal_batch_norm_train_on_random_data() {
        let mut rng = Rng::new(7);
        for (shape, parts) in [(vec![8usize, 3, 4, 4], 3usize), (vec![5, 2, 3], 2), (vec![7, 4], 4)] {
            let c = shape[1];
            let x = rng.tensor(&shape);
            // An offset mean, where sums of squares would cancel.
            let x = tensor(&shape, f32s(&x).iter().map(|v| v + 100.0).collect());
            let (scale, bias, rm, rv) = (rng.tensor(&[c]), rng.tensor(&[c]), rng.tensor(&[c]), rng.tensor(&[c]));
            let attrs = [float("momentum", 0.8), float("epsilon", 1e-3)];
            let stat = (DtypeF32, vec![c]);
            let mut outs = vec![(DtypeF32, shape.clone())];
            outs.extend(std::iter::repeat_n(stat.clone(), 4));
            let whole = run_lms("BatchNormTrain", &attrs, &[&x, &scale, &bias, &rm, &rv], &outs).unwrap();
            let xs = batch_parts(&x, parts);
            let stats: Vec<HostTensor> = xs
                .iter()
                .map(|p| run_lms("BatchNormStatistics", &[], &[p], &[(DtypeF64, vec![3, c])]).unwrap().remove(0))
                .collect();
            let mut inputs = vec![&rm, &rv];
            inputs.extend(&stats);
            let mut merge_outs = vec![stat; 4];
            merge_outs.push((DtypeF64, vec![2, c]));
            let merged = run_lms("BatchNormMerge", &attrs, &inputs, &merge_outs).unwrap();
            for k in 0..4 {
                assert!(max_rel(&f32s(&merged[k]), &f32s(&whole[k + 1])) <= 1e-6, "output {}", k + 1);
            }
            let ys: Vec<HostTensor> = xs
                .iter()
                .map(|p| {
                    let out = [(DtypeF32, p.shape.clone())];
                    run_lms("BatchNormApply", &[], &[p, &scale, &bias, &merged[4]], &out).unwrap().remove(0)
                })
                .collect();
            assert!(max_rel(&concat(&ys), &f32s(&whole[0])) <= 1e-6, "Y of {shape:?} in {parts}");
        }
    }

    #[test]
    fn gradient_sums_merge_and_data_equal_batch_norm_grad_on_random_data() {
        let mut rng = Rng::new(11);
        for (shape, parts) in [(vec![8usize, 3, 4, 4], 3usize), (vec![6, 2, 5], 4)] {
            let c = shape[1];
            let (x, dy, scale, mean) = (rng.tensor(&shape), rng.tensor(&shape), rng.tensor(&[c]), rng.tensor(&[c]));
            let invstd = tensor(&[c], f32s(&rng.tensor(&[c])).iter().map(|v| v.abs() + 0.5).collect());
            let outs = [(DtypeF32, shape.clone()), (DtypeF32, vec![c]), (DtypeF32, vec![c])];
            let whole = run_lms("BatchNormGrad", &[], &[&dy, &x, &scale, &mean, &invstd], &outs).unwrap();
            let (xs, dys) = (batch_parts(&x, parts), batch_parts(&dy, parts));
            let sums: Vec<HostTensor> = xs
                .iter()
                .zip(&dys)
                .map(|(x, dy)| {
                    let out = [(DtypeF64, vec![3, c])];
                    run_lms("BatchNormGradSums", &[], &[dy, x, &mean, &invstd], &out).unwrap().remove(0)
                })
                .collect();
            let refs: Vec<&HostTensor> = sums.iter().collect();
            let merge_outs = [(DtypeF32, vec![c]), (DtypeF32, vec![c]), (DtypeF64, vec![3, c])];
            let merged = run_lms("BatchNormGradMerge", &[], &refs, &merge_outs).unwrap();
            assert!(max_rel(&f32s(&merged[0]), &f32s(&whole[1])) <= 1e-6, "dscale");
            assert!(max_rel(&f32s(&merged[1]), &f32s(&whole[2])) <= 1e-6, "dbias");
            let dxs: Vec<HostTensor> = xs
                .iter()
                .zip(&dys)
                .map(|(x, dy)| {
                    let out = [(DtypeF32, x.shape.clone())];
                    run_lms("BatchNormGradData", &[], &[dy, x, &scale, &mean, &invstd, &merged[2]], &out)
                        .unwrap()
                        .remove(0)
                })
                .collect();
            assert!(max_rel(&concat(&dxs), &f32s(&whole[0])) <= 1e-6, "dX of {shape:?} in {parts}");
        }
    }

    #[test]
    fn a_part_of_the_wrong_width_is_an_error_naming_it() {
        let stats = tensor(&[3, 2], vec![1.0f64; 6]);
        let other = tensor(&[3, 3], vec![1.0f64; 9]);
        let err = run_lms("BatchNormGradMerge", &[], &[&stats, &other], &[(DtypeF32, vec![2])]).unwrap_err();
        assert!(err.to_string().contains("part 1"), "{err}");
    }
}
