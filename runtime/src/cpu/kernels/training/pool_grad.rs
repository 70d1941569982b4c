//! Gradients of the pools: MaxPoolGrad (dY routed to the maximum MaxPool picks),
//! AveragePoolGrad (dY spread over each window, divided as AveragePool divides) and
//! GlobalAveragePoolGrad. Scatter-adds accumulate in f64.

use super::super::num::Float;
use super::super::pool::{first_max, Windows};
use super::super::{dispatch_float, Ctx, Kernel};
use super::{from_f64s, same_shape};
use crate::error::{KernelError, Result};
use crate::geometry::window::Window;
use crate::tensor::{numel, Elem, HostTensor};

/// The pooling gradient kernels.
pub(super) const KERNELS: &[(&str, Kernel)] = &[
    ("AveragePoolGrad", |c| pool_grad(c, false)),
    ("GlobalAveragePoolGrad", global_average_pool_grad),
    ("MaxPoolGrad", |c| pool_grad(c, true)),
];

/// MaxPoolGrad(dY, X) or AveragePoolGrad(dY) → dX of the declared shape.
fn pool_grad(ctx: &Ctx<'_>, max: bool) -> Result<Vec<HostTensor>> {
    let dy = ctx.input(0, "dY")?;
    dispatch_float!(dy.dtype(), "input dY", T => pool_grad_typed::<T>(ctx, dy, max))
}

fn pool_grad_typed<T: Float>(ctx: &Ctx<'_>, dy: &HostTensor, max: bool) -> Result<Vec<HostTensor>> {
    let x_shape = ctx.out_shape(0)?;
    let win = Window::pool(&ctx.attrs, x_shape)?;
    let mut y_shape = x_shape[..2].to_vec();
    y_shape.extend_from_slice(win.output_dims());
    same_shape(dy, &y_shape, "dY")?;
    let x = if max {
        let x = ctx.input(1, "X")?;
        same_shape(x, x_shape, "X")?;
        Some(x.view::<T>("input X")?)
    } else {
        None
    };
    let include_pad = ctx.attrs.int("count_include_pad", 0)? != 0;
    let (in_sp, out_sp) = (numel(&win.input), numel(&win.output));
    let windows = Windows::new(&win);
    let dys = dy.view::<T>("input dY")?;
    let mut dx = vec![0.0f64; numel(x_shape)];
    for (p, (dx_p, dy_p)) in dx.chunks_exact_mut(in_sp.max(1)).zip(dys.chunks_exact(out_sp.max(1))).enumerate() {
        let mut dy_p = dy_p.iter().map(|v| v.to_f64());
        windows.for_each(include_pad, |axes, count| {
            let d = dy_p.next().unwrap_or(0.0);
            match x {
                Some(xs) => {
                    let plane = &xs[p * in_sp..][..in_sp];
                    if let Some((_, at)) = first_max(plane, windows.reads(axes)) {
                        dx_p[at] += d;
                    }
                }
                None => {
                    let share = d / count.max(1) as f64;
                    windows.reads(axes).for_each(|at| dx_p[at] += share);
                }
            }
        });
    }
    Ok(vec![from_f64s::<T>(x_shape.to_vec(), dx.into_iter())?])
}

/// GlobalAveragePoolGrad(dY [N, C, 1, ...]) → dX: dY / spatial size, broadcast.
fn global_average_pool_grad(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let dy = ctx.input(0, "dY")?;
    let x_shape = ctx.out_shape(0)?;
    if x_shape.len() < 2 {
        return Err(KernelError::shape("output 0", format!("expected [N, C, spatial...], found {x_shape:?}")));
    }
    let mut y_shape = x_shape[..2].to_vec();
    y_shape.resize(x_shape.len(), 1);
    same_shape(dy, &y_shape, "dY")?;
    let sp = numel(&x_shape[2..]);
    let out = dispatch_float!(dy.dtype(), "input dY", T => {
        let dys = dy.view::<T>("input dY")?;
        let values = dys.iter().flat_map(|d| std::iter::repeat_n(d.to_f64() / sp.max(1) as f64, sp));
        from_f64s::<T>(x_shape.to_vec(), values)
    })?;
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use lms_proto::lms::{Attribute, DType::*};

    /// Checks `grad_op` against finite differences of the forward `op` in f64.
    fn check(op: &str, grad_op: &str, attrs: &[Attribute], xs: &[usize], ys: &[usize]) {
        let mut rng = Rng::new(41);
        let (x, dy) = (rng.tensor(xs), rng.tensor(ys));
        let inputs: Vec<&crate::tensor::HostTensor> = if grad_op == "MaxPoolGrad" { vec![&dy, &x] } else { vec![&dy] };
        let got = lms1(grad_op, attrs, &inputs, xs);
        let fd = fd_grad(&x, |x| dot(&run1(op, attrs, &[x], DtypeF64, ys), &dy));
        // Tolerance 1e-4: pools are piecewise linear and the random inputs have no ties.
        assert_near(&got, &fd, 1e-4);
    }

    #[test]
    fn max_pool_grad_matches_finite_differences() {
        let attrs = [
            ints("kernel_shape", &[3, 2]),
            ints("strides", &[2, 1]),
            ints("dilations", &[1, 2]),
            ints("pads", &[1, 1, 1, 0]),
        ];
        // h: 9 + 2 - 3 = 8 -> 5; w: 6 + 1 - 3 = 4 -> 5.
        check("MaxPool", "MaxPoolGrad", &attrs, &[2, 2, 9, 6], &[2, 2, 5, 5]);
        let attrs = [ints("kernel_shape", &[2, 2, 2]), ints("strides", &[2, 2, 2]), int("ceil_mode", 1)];
        check("MaxPool", "MaxPoolGrad", &attrs, &[1, 2, 3, 5, 4], &[1, 2, 2, 3, 2]);
    }

    #[test]
    fn max_pool_grad_routes_ties_to_the_first_maximum() {
        let x = tensor(&[1, 1, 2, 3], vec![1.0f32, 5.0, 5.0, 5.0, 0.0, 5.0]);
        let dy = tensor(&[1, 1, 1, 2], vec![1.0f32, 10.0]);
        let attrs = [ints("kernel_shape", &[2, 2])];
        let got = lms1("MaxPoolGrad", &attrs, &[&dy, &x], &[1, 1, 2, 3]);
        assert_eq!(got, vec![0.0, 11.0, 0.0, 0.0, 0.0, 0.0]);
    }

    #[test]
    fn average_pool_grad_matches_finite_differences() {
        for (include, ceil) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
            let attrs = [
                ints("kernel_shape", &[3, 2]),
                ints("strides", &[2, 2]),
                ints("pads", &[1, 1, 1, 0]),
                int("count_include_pad", include),
                int("ceil_mode", ceil),
            ];
            // h: 8 + 2 - 3 = 7 -> 4 (ceil 5, last start 8 >= 8 + 1? no -> 5);
            // w: 5 + 1 - 2 = 4 -> 3 either way.
            let h = if ceil == 1 { 5 } else { 4 };
            check("AveragePool", "AveragePoolGrad", &attrs, &[2, 2, 8, 5], &[2, 2, h, 3]);
        }
        check(
            "AveragePool",
            "AveragePoolGrad",
            &[ints("kernel_shape", &[2]), ints("pads", &[1, 1]), int("count_include_pad", 1)],
            &[1, 3, 5],
            &[1, 3, 6],
        );
    }

    #[test]
    fn global_average_pool_grad_spreads_evenly() {
        let dy = tensor(&[1, 2, 1, 1], vec![4.0f32, -8.0]);
        let got = lms1("GlobalAveragePoolGrad", &[], &[&dy], &[1, 2, 2, 2]);
        assert_eq!(got, vec![1.0, 1.0, 1.0, 1.0, -2.0, -2.0, -2.0, -2.0]);
        check("GlobalAveragePool", "GlobalAveragePoolGrad", &[], &[2, 3, 4, 5], &[2, 3, 1, 1]);
    }
}
