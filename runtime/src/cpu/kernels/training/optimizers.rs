//! Optimizer updates (`proto/OPS.md`): SgdUpdate, MomentumUpdate, AdamStep, AdamUpdate.
//! Every output has the variable's shape; each is computed in f64 and rounded once.

use super::super::num::Num;
use super::super::{dispatch_float, Ctx, Kernel};
use super::{float_attr, floats, from_f64s, same_shape, view};
use crate::error::{KernelError, Result};
use crate::tensor::HostTensor;

/// The optimizer kernels.
pub(super) const KERNELS: &[(&str, Kernel)] = &[
    ("AdamStep", adam_step),
    ("AdamUpdate", adam_update),
    ("MomentumUpdate", momentum_update),
    ("SgdUpdate", sgd_update),
];

/// Input W and the elements of W and of the inputs `others` (slot, name), which must
/// have W's shape, as f64.
fn operands(ctx: &Ctx<'_>, others: &[(usize, &str)]) -> Result<(Vec<usize>, Vec<Vec<f64>>)> {
    let w = ctx.input(0, "W")?;
    let mut values = vec![floats(w, "input W")?];
    for &(i, name) in others {
        let t = ctx.input(i, name)?;
        same_shape(t, &w.shape, name)?;
        if t.dtype() != w.dtype() {
            return Err(KernelError::invalid(format!("input {name} differs from W in dtype")));
        }
        values.push(floats(t, &format!("input {name}"))?);
    }
    Ok((w.shape.clone(), values))
}

/// Tensors of W's dtype and `shape` from f64 values.
fn results(ctx: &Ctx<'_>, shape: &[usize], values: Vec<Vec<f64>>) -> Result<Vec<HostTensor>> {
    let w = ctx.input(0, "W")?;
    dispatch_float!(w.dtype(), "input W", T => values
        .into_iter()
        .map(|v| from_f64s::<T>(shape.to_vec(), v.into_iter()))
        .collect())
}

/// SgdUpdate(W, dW) → W − lr·dW.
fn sgd_update(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let lr = float_attr(ctx, "lr", None)?;
    let (shape, v) = operands(ctx, &[(1, "dW")])?;
    let w = v[0].iter().zip(&v[1]).map(|(w, g)| w - lr * g).collect();
    results(ctx, &shape, vec![w])
}

/// MomentumUpdate(W, V, dW) → W − lr·V′, V′ = momentum·V + dW.
fn momentum_update(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let lr = float_attr(ctx, "lr", None)?;
    let momentum = float_attr(ctx, "momentum", None)?;
    let (shape, v) = operands(ctx, &[(1, "V"), (2, "dW")])?;
    let vel: Vec<f64> = v[1].iter().zip(&v[2]).map(|(v, g)| momentum * v + g).collect();
    let w = v[0].iter().zip(&vel).map(|(w, v)| w - lr * v).collect();
    results(ctx, &shape, vec![w, vel])
}

/// AdamStep(t) → t + 1.
fn adam_step(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let t = ctx.input(0, "t")?;
    let out = dispatch_float!(t.dtype(), "input t", T => {
        let next = view::<T>(ctx, 0, "t")?.iter().map(|&v| v + T::ONE).collect::<Vec<T>>();
        HostTensor::from_vec(t.shape.clone(), next)
    })?;
    Ok(vec![out])
}

/// AdamUpdate(W, M, V, dW, t′) → W′, M′, V′ with bias correction at step t′.
fn adam_update(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let lr = float_attr(ctx, "lr", None)?;
    let beta1 = float_attr(ctx, "beta1", Some(0.9))?;
    let beta2 = float_attr(ctx, "beta2", Some(0.999))?;
    let eps = float_attr(ctx, "epsilon", Some(1e-8))?;
    let (shape, v) = operands(ctx, &[(1, "M"), (2, "V"), (3, "dW")])?;
    let t = match floats(ctx.input(4, "t")?, "input t")?[..] {
        [t] => t,
        _ => return Err(KernelError::shape("input t", "expected a scalar")),
    };
    let (bc1, bc2) = (1.0 - beta1.powf(t), 1.0 - beta2.powf(t));
    let m: Vec<f64> = v[1].iter().zip(&v[3]).map(|(m, g)| beta1 * m + (1.0 - beta1) * g).collect();
    let vv: Vec<f64> = v[2].iter().zip(&v[3]).map(|(v, g)| beta2 * v + (1.0 - beta2) * g * g).collect();
    let w =
        v[0].iter().zip(m.iter().zip(&vv)).map(|(w, (m, v))| w - lr * (m / bc1) / ((v / bc2).sqrt() + eps)).collect();
    results(ctx, &shape, vec![w, m, vv])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use lms_proto::lms::DType::*;

    #[test]
    fn sgd_and_momentum_follow_the_formulas() {
        let w = tensor(&[3], vec![1.0f32, -2.0, 0.5]);
        let g = tensor(&[3], vec![0.5f32, 1.0, -4.0]);
        let v = tensor(&[3], vec![0.1f32, 0.0, -1.0]);
        let lr = f64::from(0.1f32);
        let got = lms1("SgdUpdate", &[float("lr", 0.1)], &[&w, &g], &[3]);
        let want: Vec<f32> =
            f32s(&w).iter().zip(f32s(&g)).map(|(w, g)| (f64::from(*w) - lr * f64::from(g)) as f32).collect();
        assert_eq!(got, want);
        let outs = run_lms(
            "MomentumUpdate",
            &[float("lr", 0.1), float("momentum", 0.9)],
            &[&w, &v, &g],
            &[(DtypeF32, vec![3]), (DtypeF32, vec![3])],
        )
        .unwrap();
        let m = f64::from(0.9f32);
        let vel: Vec<f64> = f32s(&v).iter().zip(f32s(&g)).map(|(v, g)| m * f64::from(*v) + f64::from(g)).collect();
        let want_w: Vec<f32> = f32s(&w).iter().zip(&vel).map(|(w, v)| (f64::from(*w) - lr * v) as f32).collect();
        assert_eq!(f32s(&outs[0]), want_w);
        assert_eq!(f32s(&outs[1]), vel.iter().map(|&v| v as f32).collect::<Vec<_>>());
        let short = tensor(&[2], vec![0.0f32; 2]);
        assert!(run_lms("SgdUpdate", &[float("lr", 0.1)], &[&w, &short], &[(DtypeF32, vec![3])]).is_err());
        assert!(run_lms("SgdUpdate", &[], &[&w, &g], &[(DtypeF32, vec![3])]).is_err());
    }

    #[test]
    fn adam_follows_the_formulas() {
        let t = tensor(&[], vec![2.0f32]);
        assert_eq!(lms1("AdamStep", &[], &[&t], &[]), vec![3.0]);
        let mut rng = Rng::new(101);
        let (w, m, v, g) = (rng.tensor(&[4]), rng.tensor(&[4]), rng.tensor(&[4]), rng.tensor(&[4]));
        let v = tensor(&[4], f32s(&v).iter().map(|x| x.abs()).collect());
        let t = tensor(&[], vec![3.0f32]);
        let attrs = [float("lr", 0.01), float("beta1", 0.8), float("beta2", 0.99), float("epsilon", 1e-6)];
        let outs = run_lms(
            "AdamUpdate",
            &attrs,
            &[&w, &m, &v, &g, &t],
            &[(DtypeF32, vec![4]), (DtypeF32, vec![4]), (DtypeF32, vec![4])],
        )
        .unwrap();
        let [lr, b1, b2, eps] = [0.01f32, 0.8, 0.99, 1e-6].map(f64::from);
        for i in 0..4 {
            let [w, m, v, g] = [&w, &m, &v, &g].map(|t| f64::from(f32s(t)[i]));
            let m1 = b1 * m + (1.0 - b1) * g;
            let v1 = b2 * v + (1.0 - b2) * g * g;
            let w1 = w - lr * (m1 / (1.0 - b1.powi(3))) / ((v1 / (1.0 - b2.powi(3))).sqrt() + eps);
            assert_eq!(f32s(&outs[0])[i], w1 as f32);
            assert_eq!(f32s(&outs[1])[i], m1 as f32);
            assert_eq!(f32s(&outs[2])[i], v1 as f32);
        }
    }
}
