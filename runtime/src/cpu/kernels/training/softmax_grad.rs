//! Gradients of Softmax (dX = Y·(dY − Σ dY·Y)) and LogSoftmax (dX = dY − exp(Y)·Σ dY),
//! along `axis` or, with `coerce`, over the input coerced to 2-D at `axis` (opset < 13);
//! the defaults of `axis` follow (-1, or 1 with `coerce`).

use super::super::num::Float;
use super::super::{dispatch_float, Ctx, Kernel};
use super::same_shape;
use crate::error::Result;
use crate::geometry::softmax::softmax_layout;
use crate::tensor::HostTensor;
use lms_proto::ops::SoftmaxAxis;

/// The softmax gradient kernels.
pub(super) const KERNELS: &[(&str, Kernel)] =
    &[("LogSoftmaxGrad", |c| softmax_grad(c, true)), ("SoftmaxGrad", |c| softmax_grad(c, false))];

/// SoftmaxGrad or LogSoftmaxGrad (dY, Y) → dX.
fn softmax_grad(ctx: &Ctx<'_>, log: bool) -> Result<Vec<HostTensor>> {
    let (dy, y) = (ctx.input(0, "dY")?, ctx.input(1, "Y")?);
    same_shape(dy, &y.shape, "dY")?;
    let form = SoftmaxAxis::new(ctx.attrs.int("coerce", 0)? != 0);
    let layout = softmax_layout(&y.shape, ctx.attrs.int("axis", form.default)?, form.coerced)?;
    let out = dispatch_float!(y.dtype(), "input Y", T => {
        let dx = softmax_grad_typed(dy.view::<T>("input dY")?, y.view::<T>("input Y")?, layout, log);
        HostTensor::from_vec(y.shape.clone(), dx)
    })?;
    Ok(vec![out])
}

/// The gradient over the middle axis of [outer, n, inner], sums in f64.
fn softmax_grad_typed<T: Float>(dy: &[T], y: &[T], (outer, n, inner): (usize, usize, usize), log: bool) -> Vec<T> {
    let mut dx = vec![T::ZERO; y.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |j: usize| (o * n + j) * inner + i;
            let sum: f64 = (0..n)
                .map(|j| {
                    let d = dy[at(j)].to_f64();
                    if log {
                        d
                    } else {
                        d * y[at(j)].to_f64()
                    }
                })
                .sum();
            for j in 0..n {
                let (d, v) = (dy[at(j)].to_f64(), y[at(j)].to_f64());
                dx[at(j)] = T::from_f64(if log { d - v.exp() * sum } else { v * (d - sum) });
            }
        }
    }
    dx
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use lms_proto::lms::DType::*;

    /// Checks the gradient of `op` at `opset` (axis attribute `axis`) against finite
    /// differences of the forward kernel.
    fn check(op: &str, opset: i64, axis: i64) {
        let mut rng = Rng::new(81);
        let shape = [2, 3, 4];
        let (x, dy) = (rng.tensor(&shape), rng.tensor(&shape));
        let forward = |x: &crate::tensor::HostTensor, dtype| {
            run(op, opset, &[int("axis", axis)], &[x], &[(dtype, shape.to_vec())]).unwrap()
        };
        let y = forward(&x, DtypeF32).remove(0);
        let attrs = [int("axis", axis), int("coerce", i64::from(opset < 13))];
        let got = lms1(&format!("{op}Grad"), &attrs, &[&dy, &y], &shape);
        let fd = fd_grad(&x, |x| dot(&forward(x, DtypeF64)[0], &dy));
        // Tolerance 1e-4: Y is rounded to f32 before the gradient uses it.
        assert_near(&got, &fd, 1e-4);
    }

    #[test]
    fn softmax_grads_match_finite_differences() {
        for op in ["Softmax", "LogSoftmax"] {
            check(op, 13, 1);
            check(op, 13, -1);
            check(op, 11, 1);
            check(op, 11, -1);
            check(op, 11, 0);
        }
    }
}
