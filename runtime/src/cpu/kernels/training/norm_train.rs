//! Normalizations in training: BatchNormTrain (batch statistics, running statistics
//! updated), BatchNormGrad, LayerNormGrad and LRNGrad. Statistics and sums are f64.

use super::super::norm::{channels, expand_param, per_channel};
use super::super::num::Float;
use super::super::{dispatch_float, Ctx, Kernel};
use super::{floats, from_f64s, same_shape, sum_to};
use crate::error::{KernelError, Result};
use crate::geometry::layout::norm_axis;
use crate::geometry::window::Lrn;
use crate::tensor::{numel, HostTensor};

/// The training normalization kernels.
pub(super) const KERNELS: &[(&str, Kernel)] = &[
    ("BatchNormGrad", batch_norm_grad),
    ("BatchNormTrain", batch_norm_train),
    ("LRNGrad", lrn_grad),
    ("LayerNormGrad", layer_norm_grad),
];

/// Per channel of X `[N, C, ...]` (planes of `plane` elements): Σ f(channel, value).
fn channel_sums<T: Float>(xs: &[T], c: usize, plane: usize, f: impl Fn(usize, f64) -> f64) -> Vec<f64> {
    let mut sums = vec![0.0f64; c];
    for (i, chunk) in xs.chunks(plane.max(1)).enumerate() {
        let ch = i % c;
        sums[ch] += chunk.iter().map(|v| f(ch, v.to_f64())).sum::<f64>();
    }
    sums
}

/// BatchNormTrain(X, scale, bias, running_mean, running_var) → Y, new running mean and
/// variance, saved mean and inverse standard deviation.
fn batch_norm_train(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    dispatch_float!(x.dtype(), "input X", T => batch_norm_train_typed::<T>(ctx, x))
}

fn batch_norm_train_typed<T: Float>(ctx: &Ctx<'_>, x: &HostTensor) -> Result<Vec<HostTensor>> {
    let (n, c, plane) = channels(x)?;
    let eps = f64::from(ctx.attrs.float("epsilon", 1e-5)?);
    let momentum = f64::from(ctx.attrs.float("momentum", 0.9)?);
    let scale = per_channel::<T>(ctx, 1, "scale", c)?;
    let bias = per_channel::<T>(ctx, 2, "bias", c)?;
    let running_mean = per_channel::<T>(ctx, 3, "running_mean", c)?;
    let running_var = per_channel::<T>(ctx, 4, "running_var", c)?;
    let xs = x.view::<T>("input X")?;
    let stats = ChannelStats::of(xs, n, c, plane);
    let var: Vec<f64> = stats.m2.iter().map(|m2| m2 / stats.count).collect();
    let invstd = inverse_std(&var, eps);
    let y = normalize(xs, c, plane, &stats.mean, &invstd, &scale, &bias);
    let mut outs = vec![HostTensor::from_vec(x.shape.clone(), y)?];
    let running_var = running_update(&running_var, &running_variance(ctx, &var, stats.count)?, momentum);
    let running = [running_update(&running_mean, &stats.mean, momentum), running_var];
    for values in running.into_iter().chain([stats.mean, invstd]) {
        outs.push(from_f64s::<T>(vec![c], values.into_iter())?);
    }
    outs.truncate(ctx.outputs.len());
    Ok(outs)
}

/// Per-channel statistics of X `[N, C, ...]`, in f64: elements per channel, mean and
/// M2 = Σ(x − mean)² (two passes).
pub(super) struct ChannelStats {
    /// Elements per channel (at least 1).
    pub count: f64,
    /// Mean per channel.
    pub mean: Vec<f64>,
    /// Σ(x − mean)² per channel.
    pub m2: Vec<f64>,
}

impl ChannelStats {
    /// The statistics of `xs`, `n` samples of `c` channel planes of `plane` elements.
    pub fn of<T: Float>(xs: &[T], n: usize, c: usize, plane: usize) -> ChannelStats {
        let count = (n * plane).max(1) as f64;
        let mean: Vec<f64> = channel_sums(xs, c, plane, |_, v| v).into_iter().map(|s| s / count).collect();
        let m2 = channel_sums(xs, c, plane, |ch, v| (v - mean[ch]).powi(2));
        ChannelStats { count, mean, m2 }
    }
}

/// 1/√(var + eps) per channel.
pub(super) fn inverse_std(var: &[f64], eps: f64) -> Vec<f64> {
    var.iter().map(|v| 1.0 / (v + eps).sqrt()).collect()
}

/// Y = (X − mean)·invstd·scale + bias per channel of X `[N, C, ...]`.
pub(super) fn normalize<T: Float>(
    xs: &[T],
    c: usize,
    plane: usize,
    mean: &[f64],
    invstd: &[f64],
    scale: &[f64],
    bias: &[f64],
) -> Vec<T> {
    let mut y = Vec::with_capacity(xs.len());
    for (i, chunk) in xs.chunks(plane.max(1)).enumerate() {
        let ch = i % c;
        let (a, b) = (invstd[ch] * scale[ch], bias[ch]);
        y.extend(chunk.iter().map(|v| T::from_f64((v.to_f64() - mean[ch]) * a + b)));
    }
    y
}

/// running·momentum + batch·(1 − momentum) per channel.
/// The batch variance the running variance is updated with: `var` (biased, over
/// `count` elements per channel), or with attribute `unbiased` 1 var·count/(count − 1)
/// (PyTorch's convention; `var` when count is 1).
pub(super) fn running_variance(ctx: &Ctx<'_>, var: &[f64], count: f64) -> Result<Vec<f64>> {
    let unbiased = ctx.attrs.int("unbiased", 0)? != 0 && count > 1.0;
    Ok(if unbiased { var.iter().map(|v| v * count / (count - 1.0)).collect() } else { var.to_vec() })
}

pub(super) fn running_update(running: &[f64], batch: &[f64], momentum: f64) -> Vec<f64> {
    running.iter().zip(batch).map(|(r, b)| r * momentum + b * (1.0 - momentum)).collect()
}

/// BatchNormGrad(dY, X, scale, saved_mean, saved_invstd) → dX, dscale, dbias.
fn batch_norm_grad(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(1, "X")?;
    dispatch_float!(x.dtype(), "input X", T => batch_norm_grad_typed::<T>(ctx, x))
}

fn batch_norm_grad_typed<T: Float>(ctx: &Ctx<'_>, x: &HostTensor) -> Result<Vec<HostTensor>> {
    let dy = ctx.input(0, "dY")?;
    same_shape(dy, &x.shape, "dY")?;
    let (n, c, plane) = channels(x)?;
    let scale = per_channel::<T>(ctx, 2, "scale", c)?;
    let mean = per_channel::<T>(ctx, 3, "saved_mean", c)?;
    let invstd = per_channel::<T>(ctx, 4, "saved_invstd", c)?;
    let (xs, dys) = (x.view::<T>("input X")?, dy.view::<T>("input dY")?);
    let sums = GradSums::of(xs, dys, c, plane, &mean, &invstd);
    let count = (n * plane.max(1)) as f64;
    let dx = grad_input(xs, dys, c, plane, [&scale, &mean, &invstd], count, &sums);
    Ok(vec![
        HostTensor::from_vec(x.shape.clone(), dx)?,
        from_f64s::<T>(vec![c], sums.dscale.into_iter())?,
        from_f64s::<T>(vec![c], sums.dbias.into_iter())?,
    ])
}

/// BatchNormGrad's per-channel sums over X and dY `[N, C, ...]`, in f64.
pub(super) struct GradSums {
    /// Σ dy per channel (dbias).
    pub dbias: Vec<f64>,
    /// Σ dy·x̂ per channel, x̂ = (x − mean)·invstd (dscale).
    pub dscale: Vec<f64>,
}

impl GradSums {
    /// The sums of `dys` and `xs` (channel planes of `plane` elements) given the
    /// saved statistics.
    pub fn of<T: Float>(xs: &[T], dys: &[T], c: usize, plane: usize, mean: &[f64], invstd: &[f64]) -> GradSums {
        let mut dbias = vec![0.0f64; c];
        let mut dscale = vec![0.0f64; c];
        for (i, (xc, dc)) in xs.chunks(plane.max(1)).zip(dys.chunks(plane.max(1))).enumerate() {
            let ch = i % c;
            for (v, d) in xc.iter().zip(dc) {
                let d = d.to_f64();
                dbias[ch] += d;
                dscale[ch] += d * (v.to_f64() - mean[ch]) * invstd[ch];
            }
        }
        GradSums { dbias, dscale }
    }
}

/// dX of BatchNormGrad per channel, from the whole batch's `count` elements per
/// channel and its `sums`: scale·invstd/count·(count·dy − Σdy − x̂·Σdy·x̂).
pub(super) fn grad_input<T: Float>(
    xs: &[T],
    dys: &[T],
    c: usize,
    plane: usize,
    [scale, mean, invstd]: [&[f64]; 3],
    count: f64,
    sums: &GradSums,
) -> Vec<T> {
    let mut dx = Vec::with_capacity(xs.len());
    for (i, (xc, dc)) in xs.chunks(plane.max(1)).zip(dys.chunks(plane.max(1))).enumerate() {
        let ch = i % c;
        let k = scale[ch] * invstd[ch] / count;
        dx.extend(xc.iter().zip(dc).map(|(v, d)| {
            let xhat = (v.to_f64() - mean[ch]) * invstd[ch];
            T::from_f64(k * (count * d.to_f64() - sums.dbias[ch] - xhat * sums.dscale[ch]))
        }));
    }
    dx
}

/// LayerNormGrad(dY, X, scale, mean, invstd) → dX, dscale, dbias (scale's shape).
fn layer_norm_grad(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(1, "X")?;
    dispatch_float!(x.dtype(), "input X", T => layer_norm_grad_typed::<T>(ctx, x))
}

fn layer_norm_grad_typed<T: Float>(ctx: &Ctx<'_>, x: &HostTensor) -> Result<Vec<HostTensor>> {
    let dy = ctx.input(0, "dY")?;
    same_shape(dy, &x.shape, "dY")?;
    let axis = norm_axis(ctx.attrs.int("axis", -1)?, x.rank(), "axis")?;
    let norm_shape = &x.shape[axis..];
    let n = numel(norm_shape).max(1);
    let scale_t = ctx.input(2, "scale")?;
    let scale = expand_param::<T>(scale_t, norm_shape, "scale")?;
    let mut stat_shape = x.shape[..axis].to_vec();
    stat_shape.resize(x.rank(), 1);
    let (mean_t, invstd_t) = (ctx.input(3, "mean")?, ctx.input(4, "invstd")?);
    same_shape(mean_t, &stat_shape, "mean")?;
    same_shape(invstd_t, &stat_shape, "invstd")?;
    let (mean, invstd) = (floats(mean_t, "input mean")?, floats(invstd_t, "input invstd")?);
    let (xs, dys) = (x.view::<T>("input X")?, dy.view::<T>("input dY")?);
    let mut dscale = vec![0.0f64; n];
    let mut dbias = vec![0.0f64; n];
    let mut dx = Vec::with_capacity(xs.len());
    let mut xhat = vec![0.0f64; n];
    for (r, (xr, dr)) in xs.chunks(n).zip(dys.chunks(n)).enumerate() {
        let (mut sum_g, mut sum_gx) = (0.0f64, 0.0f64);
        for j in 0..n {
            xhat[j] = (xr[j].to_f64() - mean[r]) * invstd[r];
            let d = dr[j].to_f64();
            let g = d * scale[j];
            sum_g += g;
            sum_gx += g * xhat[j];
            dscale[j] += d * xhat[j];
            dbias[j] += d;
        }
        let (mean_g, mean_gx) = (sum_g / n as f64, sum_gx / n as f64);
        dx.extend((0..n).map(|j| {
            let g = dr[j].to_f64() * scale[j];
            T::from_f64(invstd[r] * (g - mean_g - xhat[j] * mean_gx))
        }));
    }
    let to_scale = |v: Vec<f64>| {
        let summed = sum_to(&v, norm_shape, &scale_t.shape, "input scale")?;
        from_f64s::<T>(scale_t.shape.clone(), summed.into_iter())
    };
    Ok(vec![HostTensor::from_vec(x.shape.clone(), dx)?, to_scale(dscale)?, to_scale(dbias)?])
}

/// LRNGrad(dY, X) → dX. With d_c = bias + α/size·Σ_{k ∈ win(c)} x_k² and
/// y_c = x_c·d_c^(−β): dx_j = dy_j·d_j^(−β) − 2αβ/size·x_j·Σ_{c: j ∈ win(c)} dy_c·x_c·d_c^(−β−1).
fn lrn_grad(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(1, "X")?;
    dispatch_float!(x.dtype(), "input X", T => lrn_grad_typed::<T>(ctx, x))
}

fn lrn_grad_typed<T: Float>(ctx: &Ctx<'_>, x: &HostTensor) -> Result<Vec<HostTensor>> {
    let dy = ctx.input(0, "dY")?;
    same_shape(dy, &x.shape, "dY")?;
    let lrn = Lrn::from_attrs(&ctx.attrs)?;
    if x.rank() < 2 {
        return Err(KernelError::shape("input X", format!("expected [N, C, ...], found {:?}", x.shape)));
    }
    let (n, c, sp) = (x.shape[0], x.shape[1], numel(&x.shape[2..]));
    let (xs, dys) = (x.view::<T>("input X")?, dy.view::<T>("input dY")?);
    let k = 2.0 * lrn.alpha * lrn.beta / lrn.size as f64;
    let mut dx = vec![0.0f64; xs.len()];
    let (mut xv, mut dv, mut d, mut t) = (vec![0.0; c], vec![0.0; c], vec![0.0; c], vec![0.0; c]);
    for ni in 0..n {
        for s in 0..sp {
            let at = |ch: usize| (ni * c + ch) * sp + s;
            for ch in 0..c {
                (xv[ch], dv[ch]) = (xs[at(ch)].to_f64(), dys[at(ch)].to_f64());
            }
            for ch in 0..c {
                let (lo, hi) = (ch.saturating_sub(lrn.before), (ch + lrn.after).min(c - 1));
                let sq: f64 = xv[lo..=hi].iter().map(|v| v * v).sum();
                d[ch] = lrn.bias + lrn.alpha / lrn.size as f64 * sq;
                t[ch] = dv[ch] * xv[ch] * d[ch].powf(-lrn.beta - 1.0);
            }
            for j in 0..c {
                let (lo, hi) = (j.saturating_sub(lrn.after), (j + lrn.before).min(c - 1));
                let cross: f64 = t[lo..=hi].iter().sum();
                dx[at(j)] = dv[j] * d[j].powf(-lrn.beta) - k * xv[j] * cross;
            }
        }
    }
    Ok(vec![from_f64s::<T>(x.shape.clone(), dx.into_iter())?])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::tensor::HostTensor;
    use lms_proto::lms::Attribute;
    use lms_proto::lms::DType::*;

    /// Runs BatchNormTrain on f64 inputs (for finite differences); returns its outputs.
    fn bn_train(x: &HostTensor, scale: &HostTensor, bias: &HostTensor, c: usize) -> Vec<HostTensor> {
        let (rm, rv) = (tensor(&[c], vec![0.5f64; c]), tensor(&[c], vec![2.0f64; c]));
        let mut outs = vec![(DtypeF64, x.shape.clone())];
        outs.extend(std::iter::repeat_n((DtypeF64, vec![c]), 4));
        run_lms("BatchNormTrain", &[float("momentum", 0.8)], &[x, scale, bias, &rm, &rv], &outs).unwrap()
    }

    /// Runs norm gradient `op` on (dY, X, scale, saved mean, saved inverse std) and checks
    /// its dX, dScale and dBias against central differences of `loss(x, scale, bias)`, to
    /// 1e-3: the saved statistics are rounded to f32.
    fn check_norm_grad(
        op: &str,
        attrs: &[Attribute],
        dy: &HostTensor,
        [x, scale, bias]: [&HostTensor; 3],
        [mean, invstd]: [&HostTensor; 2],
        loss: impl Fn(&HostTensor, &HostTensor, &HostTensor) -> f64,
    ) {
        let outputs = [x, scale, bias].map(|t| (DtypeF32, t.shape.clone()));
        let outs = run_lms(op, attrs, &[dy, x, scale, mean, invstd], &outputs).unwrap();
        let (xf, sf, bf) = (to_f64(x), to_f64(scale), to_f64(bias));
        assert_near(&f32s(&outs[0]), &fd_grad(x, |x| loss(x, &sf, &bf)), 1e-3);
        assert_near(&f32s(&outs[1]), &fd_grad(scale, |s| loss(&xf, s, &bf)), 1e-3);
        assert_near(&f32s(&outs[2]), &fd_grad(bias, |b| loss(&xf, &sf, b)), 1e-3);
    }

    #[test]
    fn batch_norm_train_matches_direct_statistics() {
        let x = tensor(&[2, 2, 2], vec![1.0f64, 3.0, 10.0, 20.0, 5.0, 7.0, 30.0, 40.0]);
        let (scale, bias) = (tensor(&[2], vec![2.0f64, 1.0]), tensor(&[2], vec![0.5f64, -1.0]));
        let outs = bn_train(&x, &scale, &bias, 2);
        // Channel 0: 1, 3, 5, 7 (mean 4, var 5); channel 1: 10, 20, 30, 40 (mean 25, var 125).
        let eps = 1e-5f32 as f64;
        let (i0, i1) = (1.0 / (5.0 + eps).sqrt(), 1.0 / (125.0 + eps).sqrt());
        assert_eq!(outs[3].as_f64_test(), vec![4.0, 25.0]);
        assert_eq!(outs[4].as_f64_test(), vec![i0, i1]);
        let m = 0.8f32 as f64;
        let blend = |r: f64, b: f64| r * m + b * (1.0 - m);
        assert_eq!(outs[1].as_f64_test(), vec![blend(0.5, 4.0), blend(0.5, 25.0)]);
        assert_eq!(outs[2].as_f64_test(), vec![blend(2.0, 5.0), blend(2.0, 125.0)]);
        let y = outs[0].as_f64_test();
        let want = [
            (1.0 - 4.0) * i0 * 2.0 + 0.5,
            (3.0 - 4.0) * i0 * 2.0 + 0.5,
            (10.0 - 25.0) * i1 - 1.0,
            (20.0 - 25.0) * i1 - 1.0,
            (5.0 - 4.0) * i0 * 2.0 + 0.5,
        ];
        for (g, w) in y.iter().zip(want) {
            assert!((g - w).abs() < 1e-12, "{g} vs {w}");
        }
    }

    #[test]
    fn batch_norm_grad_matches_finite_differences() {
        let mut rng = Rng::new(51);
        let (x, scale, bias, dy) =
            (rng.tensor(&[3, 2, 2, 2]), rng.tensor(&[2]), rng.tensor(&[2]), rng.tensor(&[3, 2, 2, 2]));
        let saved = bn_train(&to_f64(&x), &to_f64(&scale), &to_f64(&bias), 2);
        let f32_of = |t: &HostTensor| tensor(&t.shape, t.as_f64_test().iter().map(|&v| v as f32).collect());
        let (mean, invstd) = (f32_of(&saved[3]), f32_of(&saved[4]));
        let loss = |x: &HostTensor, s: &HostTensor, b: &HostTensor| dot(&bn_train(x, s, b, 2)[0], &dy);
        check_norm_grad("BatchNormGrad", &[], &dy, [&x, &scale, &bias], [&mean, &invstd], loss);
    }

    #[test]
    fn layer_norm_grad_matches_finite_differences() {
        let mut rng = Rng::new(61);
        // Normalized over the last two axes; scale [1, 4] broadcasts over [3, 4].
        let (x, scale, bias, dy) =
            (rng.tensor(&[2, 3, 4]), rng.tensor(&[1, 4]), rng.tensor(&[1, 4]), rng.tensor(&[2, 3, 4]));
        let attrs = [int("axis", -2)];
        let ln = |x: &HostTensor, s: &HostTensor, b: &HostTensor, dtype| {
            let outs = [(dtype, vec![2, 3, 4]), (dtype, vec![2, 1, 1]), (dtype, vec![2, 1, 1])];
            run("LayerNormalization", 17, &attrs, &[x, s, b], &outs).unwrap()
        };
        let stats = ln(&x, &scale, &bias, DtypeF32);
        let loss = |x: &HostTensor, s: &HostTensor, b: &HostTensor| dot(&ln(x, s, b, DtypeF64)[0], &dy);
        check_norm_grad("LayerNormGrad", &attrs, &dy, [&x, &scale, &bias], [&stats[1], &stats[2]], loss);
    }

    #[test]
    fn lrn_grad_matches_finite_differences() {
        let mut rng = Rng::new(71);
        let (x, dy) = (rng.tensor(&[2, 5, 2, 3]), rng.tensor(&[2, 5, 2, 3]));
        for size in [2, 3, 5] {
            let attrs = [int("size", size), float("alpha", 0.3), float("beta", 0.75), float("bias", 1.5)];
            let got = lms1("LRNGrad", &attrs, &[&dy, &x], &[2, 5, 2, 3]);
            let fd = fd_grad(&x, |x| dot(&run1("LRN", &attrs, &[x], DtypeF64, &[2, 5, 2, 3]), &dy));
            assert_near(&got, &fd, 1e-4);
        }
    }
}
