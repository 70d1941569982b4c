//! Softmax and LogSoftmax, max-subtracted, with f64 sums.
//!
//! Opset >= 13: along `axis` (default -1). Opset < 13: the input is coerced to 2-D at
//! `axis` (default 1) and normalized over the flattened trailing axes.

use super::num::Float;
use super::{dispatch_float, Ctx, Kernel};
use crate::error::Result;
use crate::geometry::softmax::softmax_layout;
use crate::tensor::HostTensor;
use lms_proto::ops::SoftmaxAxis;

/// The softmax kernels.
pub(super) const KERNELS: &[(&str, Kernel)] =
    &[("LogSoftmax", |c| softmax(c, true)), ("Softmax", |c| softmax(c, false))];

fn softmax(ctx: &Ctx<'_>, log: bool) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "input")?;
    let form = SoftmaxAxis::at_opset(ctx.opset);
    let axis = ctx.attrs.int("axis", form.default)?;
    let (outer, n, inner) = softmax_layout(&x.shape, axis, form.coerced)?;
    let out = dispatch_float!(x.dtype(), "input input", T => {
        HostTensor::from_vec(x.shape.clone(), softmax_typed(x.view::<T>("input input")?, (outer, n, inner), log))
    })?;
    Ok(vec![out])
}

/// Softmax over the middle axis of `xs` viewed as [outer, n, inner].
fn softmax_typed<T: Float>(xs: &[T], (outer, n, inner): (usize, usize, usize), log: bool) -> Vec<T> {
    let mut y = vec![T::ZERO; xs.len()];
    let mut shifted = vec![0.0f64; n];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * n + j) * inner + i;
            let max = (0..n).fold(T::LOWEST, |m, j| m.max_nan(xs[at(j)])).to_f64();
            let mut sum = 0.0f64;
            for (j, s) in shifted.iter_mut().enumerate() {
                *s = xs[at(j)].to_f64() - max;
                sum += s.exp();
            }
            for (j, s) in shifted.iter().enumerate() {
                y[at(j)] = T::from_f64(if log { s - sum.ln() } else { s.exp() / sum });
            }
        }
    }
    y
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use lms_proto::lms::DType::*;

    #[test]
    fn softmax_sums_to_one_along_the_axis() {
        let mut rng = Rng::new(6);
        let x = rng.tensor(&[2, 3, 4]);
        let y = f32s(&run1("Softmax", &[int("axis", 1)], &[&x], DtypeF32, &[2, 3, 4]));
        for o in 0..2 {
            for i in 0..4 {
                let s: f32 = (0..3).map(|j| y[(o * 3 + j) * 4 + i]).sum();
                assert!((s - 1.0).abs() < 1e-6, "sum {s}");
            }
        }
        let x = tensor(&[3], vec![1.0f32, 2.0, 3.0]);
        let e: Vec<f64> = [1.0f64, 2.0, 3.0].iter().map(|v| v.exp()).collect();
        let total: f64 = e.iter().sum();
        let want: Vec<f32> = e.iter().map(|v| (v / total) as f32).collect();
        assert_close(&f32s(&run1("Softmax", &[], &[&x], DtypeF32, &[3])), &want);
        let want_log: Vec<f32> = e.iter().map(|v| (v / total).ln() as f32).collect();
        assert_close(&f32s(&run1("LogSoftmax", &[], &[&x], DtypeF32, &[3])), &want_log);
    }

    #[test]
    fn large_inputs_are_stable() {
        let x = tensor(&[2], vec![1000.0f32, 1000.0]);
        assert_eq!(f32s(&run1("Softmax", &[], &[&x], DtypeF32, &[2])), vec![0.5, 0.5]);
        let y = f32s(&run1("LogSoftmax", &[], &[&x], DtypeF32, &[2]));
        assert_close(&y, &[-std::f32::consts::LN_2, -std::f32::consts::LN_2]);
    }

    #[test]
    fn old_opsets_coerce_to_2d() {
        // Opset 11, default axis 1 on [2, 2, 2]: each sample's 4 values share one softmax.
        let x = tensor(&[2, 2, 2], vec![0.0f32, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]);
        let y = run("Softmax", 11, &[], &[&x], &[(DtypeF32, vec![2, 2, 2])]).unwrap();
        assert_eq!(f32s(&y[0]), vec![0.25; 8]);
        // Opset 13 default axis -1: pairs.
        let y = run("Softmax", 13, &[], &[&x], &[(DtypeF32, vec![2, 2, 2])]).unwrap();
        assert_eq!(f32s(&y[0]), vec![0.5; 8]);
    }
}
