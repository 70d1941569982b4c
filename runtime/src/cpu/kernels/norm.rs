//! Normalizations: BatchNormalization (inference form, running statistics),
//! InstanceNormalization and LayerNormalization. Statistics and the normalization
//! itself are computed in f64 and rounded once to the output type.

use super::layout::strided_copy;
use super::num::Float;
use super::{dispatch_float, Ctx, Kernel};
use crate::error::{KernelError, Result};
use crate::geometry::layout::{broadcast_strides, norm_axis};
use crate::tensor::{numel, Elem, HostTensor};
use lms_proto::lms::DType;

/// The normalization kernels.
pub(super) const KERNELS: &[(&str, Kernel)] =
    &[("BatchNormalization", batch_norm), ("InstanceNormalization", instance_norm), ("LayerNormalization", layer_norm)];

/// Mean and population variance of `xs`, two-pass in f64.
pub(super) fn moments<T: Elem>(xs: &[T]) -> (f64, f64) {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().map(|v| v.to_f64()).sum::<f64>() / n;
    let var = xs.iter().map(|v| (v.to_f64() - mean).powi(2)).sum::<f64>() / n;
    (mean, var)
}

/// A per-channel parameter: shape `[c]`, elements widened to f64.
pub(super) fn per_channel<T: Float>(ctx: &Ctx<'_>, i: usize, name: &str, c: usize) -> Result<Vec<f64>> {
    let t = ctx.input(i, name)?;
    if t.shape != [c] {
        return Err(KernelError::shape(format!("input {name}"), format!("expected shape [{c}], found {:?}", t.shape)));
    }
    Ok(t.view::<T>(&format!("input {name}"))?.iter().map(|v| v.to_f64()).collect())
}

/// Checks that X is `[N, C, ...]` and returns (N, C, elements per channel plane).
pub(super) fn channels(x: &HostTensor) -> Result<(usize, usize, usize)> {
    if x.rank() < 2 {
        return Err(KernelError::shape("input X", format!("expected [N, C, ...], found {:?}", x.shape)));
    }
    Ok((x.shape[0], x.shape[1], numel(&x.shape[2..])))
}

fn batch_norm(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    if ctx.attrs.int("training_mode", 0)? != 0 || ctx.outputs.len() > 1 {
        return Err(KernelError::unsupported("BatchNormalization in training mode (inference form only)"));
    }
    if ctx.attrs.int("spatial", 1)? == 0 {
        return Err(KernelError::unsupported("BatchNormalization with spatial = 0"));
    }
    let x = ctx.input(0, "X")?;
    dispatch_float!(x.dtype(), "input X", T => batch_norm_typed::<T>(ctx, x))
}

/// y = (x - mean) / sqrt(var + epsilon) · scale + B, per channel.
fn batch_norm_typed<T: Float>(ctx: &Ctx<'_>, x: &HostTensor) -> Result<Vec<HostTensor>> {
    let (_, c, plane) = channels(x)?;
    let eps = f64::from(ctx.attrs.float("epsilon", 1e-5)?);
    let scale = per_channel::<T>(ctx, 1, "scale", c)?;
    let bias = per_channel::<T>(ctx, 2, "B", c)?;
    let mean = per_channel::<T>(ctx, 3, "input_mean", c)?;
    let var = per_channel::<T>(ctx, 4, "input_var", c)?;
    let xs = x.view::<T>("input X")?;
    let mut y = Vec::with_capacity(xs.len());
    for (i, chunk) in xs.chunks(plane.max(1)).enumerate() {
        let ch = i % c;
        let a = scale[ch] / (var[ch] + eps).sqrt();
        y.extend(chunk.iter().map(|v| T::from_f64((v.to_f64() - mean[ch]) * a + bias[ch])));
    }
    Ok(vec![HostTensor::from_vec(x.shape.clone(), y)?])
}

fn instance_norm(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "input")?;
    dispatch_float!(x.dtype(), "input input", T => instance_norm_typed::<T>(ctx, x))
}

/// Normalizes each (sample, channel) plane by its own mean and variance, then scales.
fn instance_norm_typed<T: Float>(ctx: &Ctx<'_>, x: &HostTensor) -> Result<Vec<HostTensor>> {
    let (_, c, plane) = channels(x)?;
    let eps = f64::from(ctx.attrs.float("epsilon", 1e-5)?);
    let scale = per_channel::<T>(ctx, 1, "scale", c)?;
    let bias = per_channel::<T>(ctx, 2, "B", c)?;
    let xs = x.view::<T>("input input")?;
    let mut y = Vec::with_capacity(xs.len());
    for (i, chunk) in xs.chunks(plane.max(1)).enumerate() {
        let ch = i % c;
        let (mean, var) = moments(chunk);
        let a = scale[ch] / (var + eps).sqrt();
        y.extend(chunk.iter().map(|v| T::from_f64((v.to_f64() - mean) * a + bias[ch])));
    }
    Ok(vec![HostTensor::from_vec(x.shape.clone(), y)?])
}

fn layer_norm(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    dispatch_float!(x.dtype(), "input X", T => layer_norm_typed::<T>(ctx, x))
}

/// A parameter broadcast (unidirectionally) to the normalized shape, widened to f64.
pub(super) fn expand_param<T: Float>(t: &HostTensor, shape: &[usize], name: &str) -> Result<Vec<f64>> {
    let what = format!("input {name}");
    let strides = broadcast_strides(&t.shape, shape, &what)?;
    Ok(strided_copy(t.view::<T>(&what)?, 0, shape, &strides).iter().map(|v| v.to_f64()).collect())
}

/// A float tensor of `dtype` from f64 values.
pub(super) fn float_tensor(dtype: DType, shape: Vec<usize>, values: &[f64], what: &str) -> Result<HostTensor> {
    dispatch_float!(dtype, what, U => HostTensor::from_vec(shape, values.iter().map(|&v| U::from_f64(v)).collect::<Vec<U>>()))
}

/// Normalizes over the axes from `axis` on; outputs Y and, when declared, Mean and
/// InvStdDev (shaped like X with the normalized axes set to 1).
fn layer_norm_typed<T: Float>(ctx: &Ctx<'_>, x: &HostTensor) -> Result<Vec<HostTensor>> {
    let axis = norm_axis(ctx.attrs.int("axis", -1)?, x.rank(), "axis")?;
    let eps = f64::from(ctx.attrs.float("epsilon", 1e-5)?);
    let norm_shape = &x.shape[axis..];
    let n = numel(norm_shape);
    let scale = expand_param::<T>(ctx.input(1, "Scale")?, norm_shape, "Scale")?;
    let bias = match ctx.opt_input(2) {
        Some(b) => expand_param::<T>(b, norm_shape, "B")?,
        None => vec![0.0; n],
    };
    let xs = x.view::<T>("input X")?;
    let rows = numel(&x.shape[..axis]);
    let (mut y, mut means, mut inv_stds) =
        (Vec::with_capacity(xs.len()), Vec::with_capacity(rows), Vec::with_capacity(rows));
    for row in xs.chunks(n.max(1)).take(rows) {
        let (mean, var) = moments(row);
        let inv = 1.0 / (var + eps).sqrt();
        y.extend(row.iter().enumerate().map(|(j, v)| T::from_f64((v.to_f64() - mean) * inv * scale[j] + bias[j])));
        means.push(mean);
        inv_stds.push(inv);
    }
    let mut outs = vec![HostTensor::from_vec(x.shape.clone(), y)?];
    let mut stat_shape = x.shape[..axis].to_vec();
    stat_shape.resize(x.rank(), 1);
    for (i, values) in [(1, &means), (2, &inv_stds)] {
        if i < ctx.outputs.len() {
            outs.push(float_tensor(ctx.out_dtype(i)?, stat_shape.clone(), values, &format!("output {i}"))?);
        }
    }
    Ok(outs)
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use lms_proto::lms::DType::*;

    #[test]
    fn batch_norm_uses_running_statistics() {
        let x = tensor(&[1, 2, 2], vec![1.0f32, 3.0, 10.0, 20.0]);
        let scale = tensor(&[2], vec![2.0f32, 1.0]);
        let b = tensor(&[2], vec![0.5f32, -1.0]);
        let mean = tensor(&[2], vec![2.0f32, 15.0]);
        let var = tensor(&[2], vec![4.0f32, 25.0]);
        let y = f32s(&run1(
            "BatchNormalization",
            &[float("epsilon", 0.0)],
            &[&x, &scale, &b, &mean, &var],
            DtypeF32,
            &[1, 2, 2],
        ));
        assert_close(&y, &[-0.5, 1.5, -2.0, 0.0]);
        let spec = [(DtypeF32, vec![1, 2, 2]), (DtypeF32, vec![2]), (DtypeF32, vec![2])];
        assert!(run("BatchNormalization", 15, &[], &[&x, &scale, &b, &mean, &var], &spec).is_err());
    }

    #[test]
    fn instance_norm_normalizes_each_plane() {
        let x = tensor(&[1, 2, 4], vec![1.0f32, 2.0, 3.0, 4.0, 10.0, 10.0, 10.0, 10.0]);
        let scale = tensor(&[2], vec![1.0f32, 3.0]);
        let b = tensor(&[2], vec![0.0f32, 7.0]);
        let y = f32s(&run1("InstanceNormalization", &[], &[&x, &scale, &b], DtypeF32, &[1, 2, 4]));
        let s = (1.25f64 + 1e-5).sqrt();
        let want: Vec<f32> = [-1.5, -0.5, 0.5, 1.5].iter().map(|v| (v / s) as f32).chain([7.0; 4]).collect();
        assert_close(&y, &want);
    }

    #[test]
    fn layer_norm_with_statistics_outputs() {
        let mut rng = Rng::new(8);
        let x = rng.tensor(&[2, 3, 4]);
        let scale = rng.tensor(&[4]);
        let b = rng.tensor(&[4]);
        let spec = [(DtypeF32, vec![2, 3, 4]), (DtypeF32, vec![2, 3, 1]), (DtypeF32, vec![2, 3, 1])];
        let out = run("LayerNormalization", 17, &[], &[&x, &scale, &b], &spec).unwrap();
        let (xs, ss, bs) = (f32s(&x), f32s(&scale), f32s(&b));
        let (mut y, mut means, mut invs) = (Vec::new(), Vec::new(), Vec::new());
        for row in xs.chunks(4) {
            let mean = row.iter().map(|&v| v as f64).sum::<f64>() / 4.0;
            let var = row.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / 4.0;
            let inv = 1.0 / (var + 1e-5).sqrt();
            y.extend(
                row.iter().enumerate().map(|(j, &v)| ((v as f64 - mean) * inv * ss[j] as f64 + bs[j] as f64) as f32),
            );
            means.push(mean as f32);
            invs.push(inv as f32);
        }
        assert_close(&f32s(&out[0]), &y);
        assert_close(&f32s(&out[1]), &means);
        assert_close(&f32s(&out[2]), &invs);
        // Normalizing over the last two axes: every [3, 4] block has mean 0 and variance ~1.
        let scale = tensor(&[1], vec![1.0f32]);
        let y = f32s(&run1("LayerNormalization", &[int("axis", 1)], &[&x, &scale], DtypeF32, &[2, 3, 4]));
        for block in y.chunks(12) {
            let mean = block.iter().map(|&v| v as f64).sum::<f64>() / 12.0;
            let var = block.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / 12.0;
            assert!(mean.abs() < 1e-6 && (var - 1.0).abs() < 1e-3, "mean {mean} var {var}");
        }
    }
}
