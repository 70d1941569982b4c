//! Dropout in training: DropoutTrain draws a keep mask from (run seed, the node's `seed`,
//! step), so a rewritten graph gets the masks of the original and every step a new one;
//! DropoutGrad applies the kept mask to the gradient.

use super::super::num::Float;
use super::super::{dispatch_float, Ctx, Kernel};
use super::{float_attr, same_shape};
use crate::backend::KernelContext;
use crate::error::{KernelError, Result};
use crate::tensor::HostTensor;
use rand_chacha::ChaCha8Rng;
use rand_core::{RngCore, SeedableRng};

/// The dropout kernels.
pub(super) const KERNELS: &[(&str, Kernel)] = &[("DropoutGrad", dropout_grad), ("DropoutTrain", dropout_train)];

/// Attribute `ratio` (default 0.5), which must lie in [0, 1).
fn ratio(ctx: &Ctx<'_>) -> Result<f64> {
    let ratio = float_attr(ctx, "ratio", Some(0.5))?;
    if (0.0..1.0).contains(&ratio) {
        Ok(ratio)
    } else {
        Err(KernelError::attr("ratio", format!("{ratio} is outside [0, 1)")))
    }
}

/// The keep mask of `len` elements: each kept with probability 1 − `ratio`, drawn from a
/// ChaCha8 stream keyed by the run seed, the node's seed and the step.
fn keep_mask(exec: &KernelContext, seed: i64, ratio: f64, len: usize) -> Vec<bool> {
    let mut key = [0u8; 32];
    key[..8].copy_from_slice(&exec.run_seed.to_le_bytes());
    key[8..16].copy_from_slice(&seed.to_le_bytes());
    key[16..24].copy_from_slice(&exec.step.to_le_bytes());
    key[24..].copy_from_slice(b"dropout\0");
    let mut rng = ChaCha8Rng::from_seed(key);
    (0..len).map(|_| (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64 >= ratio).collect()
}

/// x·mask/(1 − ratio) elementwise.
fn apply<T: Float>(xs: &[T], mask: &[bool], ratio: f64) -> Vec<T> {
    let keep = 1.0 - ratio;
    xs.iter().zip(mask).map(|(x, &m)| if m { T::from_f64(x.to_f64() / keep) } else { T::ZERO }).collect()
}

/// DropoutTrain(X) → Y, mask.
fn dropout_train(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    let ratio = ratio(ctx)?;
    let mask = keep_mask(ctx.exec, ctx.attrs.int("seed", 0)?, ratio, x.numel());
    let y = dispatch_float!(x.dtype(), "input X", T => {
        HostTensor::from_vec(x.shape.clone(), apply(x.view::<T>("input X")?, &mask, ratio))
    })?;
    let mut outs = vec![y, HostTensor::from_vec(x.shape.clone(), mask)?];
    outs.truncate(ctx.outputs.len());
    Ok(outs)
}

/// DropoutGrad(dY, mask) → dX = dY·mask/(1 − ratio).
fn dropout_grad(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let (dy, mask) = (ctx.input(0, "dY")?, ctx.input(1, "mask")?);
    same_shape(mask, &dy.shape, "mask")?;
    let ratio = ratio(ctx)?;
    let mask = mask.as_bool("input mask")?;
    let dx = dispatch_float!(dy.dtype(), "input dY", T => {
        HostTensor::from_vec(dy.shape.clone(), apply(dy.view::<T>("input dY")?, mask, ratio))
    })?;
    Ok(vec![dx])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::backend::KernelContext;
    use crate::tensor::HostTensor;
    use lms_proto::lms::DType::*;

    /// DropoutTrain of `x` with node seed `seed` and ratio 0.3 in `exec`: (Y, mask).
    fn dropout(x: &HostTensor, seed: i64, exec: KernelContext) -> (Vec<f32>, Vec<bool>) {
        let outs = run_lms_at(
            "DropoutTrain",
            &[float("ratio", 0.3), int("seed", seed)],
            &[x],
            &[(DtypeF32, x.shape.clone()), (DtypeBool, x.shape.clone())],
            &exec,
        )
        .unwrap();
        (f32s(&outs[0]), outs[1].as_bool("mask").unwrap().to_vec())
    }

    #[test]
    fn masks_depend_on_run_seed_node_seed_and_step_only() {
        let x = tensor(&[100, 100], vec![2.0f32; 10_000]);
        let at = |run_seed, step| KernelContext { run_seed, step };
        let (y, mask) = dropout(&x, 4, at(1, 0));
        assert_eq!(dropout(&x, 4, at(1, 0)).1, mask, "same seeds and step");
        assert_ne!(dropout(&x, 4, at(1, 1)).1, mask, "another step");
        assert_ne!(dropout(&x, 5, at(1, 0)).1, mask, "another node seed");
        assert_ne!(dropout(&x, 4, at(2, 0)).1, mask, "another run seed");
        let kept = mask.iter().filter(|&&m| m).count() as f64 / mask.len() as f64;
        assert!((kept - 0.7).abs() < 0.015, "keep rate {kept}");
        let scaled = (2.0f64 / (1.0 - f64::from(0.3f32))) as f32;
        for (v, m) in y.iter().zip(&mask) {
            assert_eq!(*v, if *m { scaled } else { 0.0 });
        }
    }

    #[test]
    fn grad_applies_the_mask_and_ratio_is_checked() {
        let dy = tensor(&[4], vec![1.0f32, 2.0, 3.0, 4.0]);
        let mask = tensor(&[4], vec![true, false, true, false]);
        let got = lms1("DropoutGrad", &[float("ratio", 0.5)], &[&dy, &mask], &[4]);
        assert_eq!(got, vec![2.0, 0.0, 6.0, 0.0]);
        let x = tensor(&[3], vec![1.0f32, 2.0, 3.0]);
        let (y, mask) = dropout(&x, 0, KernelContext::default());
        assert_eq!(mask.len(), 3);
        assert_eq!(y.len(), 3);
        let err = run_lms("DropoutTrain", &[float("ratio", 1.0)], &[&x], &[(DtypeF32, vec![3]), (DtypeBool, vec![3])])
            .unwrap_err();
        assert_eq!(err.to_string(), "DropoutTrain: attribute `ratio`: 1 is outside [0, 1)");
        let all = run_lms("DropoutTrain", &[float("ratio", 0.0)], &[&x], &[(DtypeF32, vec![3]), (DtypeBool, vec![3])])
            .unwrap();
        assert_eq!(f32s(&all[0]), f32s(&x));
    }
}
