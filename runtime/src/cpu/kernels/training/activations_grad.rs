//! Gradients of elementwise ops: UnaryGrad (dY · f′(X) for the activations and float
//! math ops, f′ stated beside f in `unary.rs`), PReluGrad and PowGrad (w.r.t. the base).

use super::super::binary::zip_broadcast;
use super::super::num::Float;
use super::super::unary::DERIVATIVES;
use super::super::{dispatch_float, dispatch_num, Ctx, Kernel};
use super::{from_f64s, same_shape, sum_to};
use crate::error::{KernelError, Result};
use crate::tensor::{Elem, HostTensor};

/// The elementwise gradient kernels.
pub(super) const KERNELS: &[(&str, Kernel)] =
    &[("PReluGrad", prelu_grad), ("PowGrad", pow_grad), ("UnaryGrad", unary_grad)];

/// UnaryGrad: dX = dY · f′(X).
fn unary_grad(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let (dy, x) = (ctx.input(0, "dY")?, ctx.input(1, "X")?);
    same_shape(dy, &x.shape, "dY")?;
    let op = ctx.attrs.string("op", "")?;
    let Some(&(_, read)) = DERIVATIVES.iter().find(|(name, _)| *name == op) else {
        return Err(KernelError::attr("op", format!("`{op}` has no UnaryGrad")));
    };
    let derivative = read(&ctx.attrs)?;
    let out = dispatch_float!(x.dtype(), "input X", T => {
        let (dys, xs) = (dy.view::<T>("input dY")?, x.view::<T>("input X")?);
        from_f64s::<T>(
            x.shape.clone(),
            dys.iter().zip(xs).map(|(d, v)| d.to_f64() * derivative(v.to_f64())),
        )
    })?;
    Ok(vec![out])
}

/// PReluGrad: dX = dY · (X < 0 ? slope : 1); dSlope = Σ dY · X where X < 0, summed (f64,
/// in X's order) down to the slope's shape, which broadcasts to X's (numpy).
fn prelu_grad(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let (dy, x, slope) = (ctx.input(0, "dY")?, ctx.input(1, "X")?, ctx.input(2, "slope")?);
    same_shape(dy, &x.shape, "dY")?;
    dispatch_float!(x.dtype(), "input X", T => {
        let (dys, xs) = (dy.view::<T>("input dY")?, x.view::<T>("input X")?);
        let ss = slope.view::<T>("input slope")?;
        let (shape, factor) = zip_broadcast((xs, &x.shape), (ss, &slope.shape), "input slope", |v, s| {
            if v.to_f64() < 0.0 { s.to_f64() } else { 1.0 }
        })?;
        if shape != x.shape {
            return Err(KernelError::shape("input slope", format!("shape {:?} does not broadcast to X's {:?}", slope.shape, x.shape)));
        }
        let dx = from_f64s::<T>(x.shape.clone(), dys.iter().zip(factor).map(|(d, k)| d.to_f64() * k))?;
        let parts: Vec<f64> =
            dys.iter().zip(xs).map(|(d, &v)| if v.to_f64() < 0.0 { d.to_f64() * v.to_f64() } else { 0.0 }).collect();
        let dslope = from_f64s::<T>(slope.shape.clone(), sum_to(&parts, &x.shape, &slope.shape, "input slope")?.into_iter())?;
        Ok(vec![dx, dslope])
    })
}

/// PowGrad: dX = dY · P · X^(P−1), P broadcast with X, summed back to X's shape.
fn pow_grad(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let (dy, x, p) = (ctx.input(0, "dY")?, ctx.input(1, "X")?, ctx.input(2, "P")?);
    let out = dispatch_float!(x.dtype(), "input X", T => pow_grad_typed::<T>(dy, x, p))?;
    Ok(vec![out])
}

fn pow_grad_typed<T: Float>(dy: &HostTensor, x: &HostTensor, p: &HostTensor) -> Result<HostTensor> {
    let exps: Vec<f64> = dispatch_num!(p.dtype(), "input P", U => {
        Ok(p.view::<U>("input P")?.iter().map(|v| v.to_f64()).collect())
    })?;
    let xs = x.view::<T>("input X")?;
    let (shape, slope) =
        zip_broadcast((xs, &x.shape), (&exps, &p.shape), "inputs X, P", |x, e| e * x.to_f64().powf(e - 1.0))?;
    same_shape(dy, &shape, "dY")?;
    let dx: Vec<f64> = dy.view::<T>("input dY")?.iter().zip(slope).map(|(d, s)| d.to_f64() * s).collect();
    let dx = if shape == x.shape { dx } else { sum_to(&dx, &shape, &x.shape, "input X")? };
    from_f64s::<T>(x.shape.clone(), dx.into_iter())
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use lms_proto::lms::{Attribute, DType::*};

    /// Checks UnaryGrad of `op` against finite differences of the forward kernel (in f64).
    fn check(op: &str, attrs: Vec<Attribute>, lo: f32, hi: f32) {
        let mut rng = Rng::new(17);
        let x = rng.tensor(&[3, 4]);
        let x = tensor(&[3, 4], f32s(&x).iter().map(|v| lo + (v + 1.0) / 2.0 * (hi - lo)).collect());
        let dy = rng.tensor(&[3, 4]);
        let mut grad_attrs = attrs.clone();
        grad_attrs.push(string("op", op));
        let got = lms1("UnaryGrad", &grad_attrs, &[&dy, &x], &[3, 4]);
        let fd = fd_grad(&x, |x| dot(&run1(op, &attrs, &[x], DtypeF64, &[3, 4]), &dy));
        // Tolerance 1e-4 relative: f64 central differences with step 1e-4.
        assert_near(&got, &fd, 1e-4);
    }

    #[test]
    fn prelu_grad_matches_finite_differences() {
        let mut rng = Rng::new(23);
        let x = rng.tensor(&[2, 3, 4]);
        let slope = rng.tensor(&[3, 1]);
        let dy = rng.tensor(&[2, 3, 4]);
        let outputs = [(DtypeF32, vec![2, 3, 4]), (DtypeF32, vec![3, 1])];
        let got = run_lms("PReluGrad", &[], &[&dy, &x, &slope], &outputs).unwrap();
        // The forward op in f64 on both inputs (finite differences perturb one of them in f64).
        let wide = |t: &crate::tensor::HostTensor| {
            let values: Vec<f64> = match t.dtype() {
                DtypeF32 => f32s(t).into_iter().map(f64::from).collect(),
                _ => t.as_f64_test(),
            };
            crate::tensor::HostTensor::from_vec(t.shape.clone(), values)
        };
        let loss = |x: &crate::tensor::HostTensor, s: &crate::tensor::HostTensor| {
            dot(&run1("PRelu", &[], &[&wide(x).unwrap(), &wide(s).unwrap()], DtypeF64, &[2, 3, 4]), &dy)
        };
        assert_near(&f32s(&got[0]), &fd_grad(&x, |x| loss(x, &slope)), 1e-4);
        assert_near(&f32s(&got[1]), &fd_grad(&slope, |s| loss(&x, s)), 1e-4);
    }

    #[test]
    fn unary_grads_match_finite_differences() {
        check("Relu", vec![], -1.0, 1.0);
        check("LeakyRelu", vec![float("alpha", 0.2)], -1.0, 1.0);
        check("LeakyRelu", vec![], -1.0, 1.0);
        check("Sigmoid", vec![], -3.0, 3.0);
        check("Tanh", vec![], -2.0, 2.0);
        check("Elu", vec![float("alpha", 0.7)], -1.0, 1.0);
        check("Selu", vec![], -1.0, 1.0);
        check("Selu", vec![float("alpha", 1.5), float("gamma", 2.0)], -1.0, 1.0);
        check("Softplus", vec![], -2.0, 2.0);
        check("Softsign", vec![], -2.0, 2.0);
        check("Exp", vec![], -1.0, 1.0);
        check("Log", vec![], 0.5, 2.0);
        check("Sqrt", vec![], 0.5, 2.0);
        check("Erf", vec![], -1.5, 1.5);
        check("Cos", vec![], -4.0, 4.0);
        check("HardSigmoid", vec![], -2.0, 2.0);
        check("HardSigmoid", vec![float("alpha", 0.5), float("beta", 0.25)], -1.0, 1.0);
        check("HardSwish", vec![], -2.5, 2.5);
        check("Sin", vec![], -4.0, 4.0);
        check("Abs", vec![], -1.0, 1.0);
        check("Neg", vec![], -1.0, 1.0);
        check("Reciprocal", vec![], 0.5, 2.0);
        let x = tensor(&[1], vec![1.0f32]);
        let err = run_lms("UnaryGrad", &[string("op", "Floor")], &[&x, &x], &[(DtypeF32, vec![1])]).unwrap_err();
        assert_eq!(err.to_string(), "UnaryGrad: attribute `op`: `Floor` has no UnaryGrad");
    }

    #[test]
    fn pow_grad_matches_finite_differences_and_sums_broadcast_axes() {
        let mut rng = Rng::new(5);
        let x = tensor(&[2, 3], f32s(&rng.tensor(&[2, 3])).iter().map(|v| 1.0 + 0.5 * v).collect());
        let p = tensor(&[], vec![3.0f32]);
        let dy = rng.tensor(&[2, 3]);
        let got = lms1("PowGrad", &[], &[&dy, &x, &p], &[2, 3]);
        let fd = fd_grad(&x, |x| dot(&run1("Pow", &[], &[x, &to_f64(&p)], DtypeF64, &[2, 3]), &dy));
        assert_near(&got, &fd, 1e-4);
        // X [3] broadcast against P [2, 3]: the gradient sums over the added axis.
        let x = tensor(&[3], vec![1.5f32, 0.5, 2.0]);
        let p = tensor(&[2, 3], vec![2i64, 3, 1, 0, 2, 3]);
        let got = lms1("PowGrad", &[], &[&dy, &x, &p], &[3]);
        let pf = tensor(&[2, 3], vec![2.0f64, 3.0, 1.0, 0.0, 2.0, 3.0]);
        let fd = fd_grad(&x, |x| dot(&run1("Pow", &[], &[x, &pf], DtypeF64, &[2, 3]), &dy));
        assert_near(&got, &fd, 1e-4);
    }
}
