//! Gradients of Conv (1-D to 3-D, grouped, strided, dilated, padded) on the GEMM path:
//! ConvGradData is Wᵀ·dY followed by col2im, ConvGradWeight is dY·im2col(X)ᵀ summed
//! over the batch, ConvGradBias sums dY over every axis but 1.

use super::super::conv::{groups, im2col};
use super::super::conv_transpose::col2im;
use super::super::num::{gemm, Float};
use super::super::{dispatch_float, Ctx, Kernel};
use super::from_f64s;
use crate::error::{KernelError, Result};
use crate::geometry::window::Window;
use crate::tensor::{numel, Elem, HostTensor};
use std::ops::Range;

/// The convolution gradient kernels.
pub(super) const KERNELS: &[(&str, Kernel)] =
    &[("ConvGradBias", conv_grad_bias), ("ConvGradData", conv_grad_data), ("ConvGradWeight", conv_grad_weight)];

/// The geometry of the forward Conv that a gradient op differentiates.
struct ConvGeometry {
    /// Batch size, input channels, output channels.
    n: usize,
    c: usize,
    m: usize,
    /// Input and output channels per group, and the group count.
    cg: usize,
    mg: usize,
    group: usize,
    /// Kernel elements, input and output positions per plane.
    kk: usize,
    in_sp: usize,
    out_sp: usize,
    /// The forward window.
    win: Window,
    /// A 1×1 kernel with unit strides and no padding: im2col is the identity.
    pointwise: bool,
}

impl ConvGeometry {
    /// Per image and group, in order: the ranges of dY, of X (or dX) and of W (or dW)
    /// that the group's GEMM reads or writes.
    fn blocks(&self) -> impl Iterator<Item = (Range<usize>, Range<usize>, Range<usize>)> + '_ {
        let (dy_len, x_len) = (self.mg * self.out_sp, self.cg * self.in_sp);
        let w_len = self.mg * self.cg * self.kk;
        (0..self.n).flat_map(move |ni| {
            (0..self.group).map(move |g| {
                let dy = (ni * self.m + g * self.mg) * self.out_sp;
                let x = (ni * self.c + g * self.cg) * self.in_sp;
                (dy..dy + dy_len, x..x + x_len, g * w_len..(g + 1) * w_len)
            })
        })
    }

    /// A zeroed im2col buffer for one group (empty when pointwise: no buffer is needed).
    fn col_buffer<T: Float>(&self) -> Vec<T> {
        let len = if self.pointwise { 0 } else { self.cg * self.kk * self.out_sp };
        vec![T::ZERO; len]
    }
}

/// Checks X, W and dY shapes of a Conv against each other and the attributes.
fn geometry(ctx: &Ctx<'_>, x: &[usize], w: &[usize], dy: &[usize]) -> Result<ConvGeometry> {
    if x.len() < 3 || w.len() != x.len() || dy.len() != x.len() {
        return Err(KernelError::shape("input dY", format!("shapes X {x:?}, W {w:?} and dY {dy:?} do not fit a Conv")));
    }
    let (n, c, m) = (x[0], x[1], w[0]);
    let (cg, group) = groups(ctx, c, "X")?;
    if w[1] != cg || m % group != 0 {
        return Err(KernelError::shape("input W", format!("shape {w:?} does not fit {c} channels in {group} groups")));
    }
    let win = Window::conv(&ctx.attrs, &x[2..], &w[2..])?;
    if dy[..2] != [n, m] || dy[2..] != *win.output_dims() {
        let mut want = vec![n, m];
        want.extend_from_slice(win.output_dims());
        return Err(KernelError::shape("input dY", format!("expected shape {want:?}, found {dy:?}")));
    }
    let kk = numel(&win.kernel);
    let pointwise = kk == 1 && win.stride == [1; 3] && win.pad_begin == [0; 3] && win.pad_end == [0; 3];
    Ok(ConvGeometry {
        n,
        c,
        m,
        cg,
        mg: m / group,
        group,
        kk,
        in_sp: numel(&win.input),
        out_sp: numel(&win.output),
        win,
        pointwise,
    })
}

/// ConvGradData(dY, W) → dX of the declared shape.
fn conv_grad_data(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let dy = ctx.input(0, "dY")?;
    dispatch_float!(dy.dtype(), "input dY", T => conv_grad_data_typed::<T>(ctx, dy))
}

fn conv_grad_data_typed<T: Float>(ctx: &Ctx<'_>, dy: &HostTensor) -> Result<Vec<HostTensor>> {
    let w = ctx.input(1, "W")?;
    let x_shape = ctx.out_shape(0)?;
    let geo = geometry(ctx, x_shape, &w.shape, &dy.shape)?;
    let (cg, mg, kk, out_sp) = (geo.cg, geo.mg, geo.kk, geo.out_sp);
    let (dys, ws) = (dy.view::<T>("input dY")?, w.view::<T>("input W")?);
    let mut dx = vec![T::ZERO; geo.n * geo.c * geo.in_sp];
    let mut col = geo.col_buffer::<T>();
    for (dy_r, x_r, w_r) in geo.blocks() {
        // W_g is [mg, cg·kk]; read transposed through its strides.
        let w_g = (&ws[w_r], 1, cg * kk);
        let dx_g = &mut dx[x_r];
        let dy_g = (&dys[dy_r], out_sp, 1);
        if geo.pointwise {
            gemm((cg, mg, out_sp), T::ONE, w_g, dy_g, T::ZERO, dx_g, out_sp)?;
        } else {
            gemm((cg * kk, mg, out_sp), T::ONE, w_g, dy_g, T::ZERO, &mut col, out_sp)?;
            col2im(&col, cg, &geo.win, dx_g);
        }
    }
    Ok(vec![HostTensor::from_vec(x_shape.to_vec(), dx)?])
}

/// ConvGradWeight(dY, X) → dW of the declared shape.
fn conv_grad_weight(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let dy = ctx.input(0, "dY")?;
    dispatch_float!(dy.dtype(), "input dY", T => conv_grad_weight_typed::<T>(ctx, dy))
}

fn conv_grad_weight_typed<T: Float>(ctx: &Ctx<'_>, dy: &HostTensor) -> Result<Vec<HostTensor>> {
    let x = ctx.input(1, "X")?;
    let w_shape = ctx.out_shape(0)?;
    let geo = geometry(ctx, &x.shape, w_shape, &dy.shape)?;
    let (cg, mg, kk, out_sp) = (geo.cg, geo.mg, geo.kk, geo.out_sp);
    let (dys, xs) = (dy.view::<T>("input dY")?, x.view::<T>("input X")?);
    let mut dw = vec![T::ZERO; geo.m * cg * kk];
    let mut col = geo.col_buffer::<T>();
    for (dy_r, x_r, w_r) in geo.blocks() {
        let x_g = &xs[x_r];
        let cols = if geo.pointwise {
            x_g
        } else {
            im2col(x_g, cg, &geo.win, &mut col);
            &col[..]
        };
        // dW_g[mg, cg·kk] += dY_g[mg, out_sp] · colsᵀ, cols read transposed.
        gemm((mg, out_sp, cg * kk), T::ONE, (&dys[dy_r], out_sp, 1), (cols, 1, out_sp), T::ONE, &mut dw[w_r], cg * kk)?;
    }
    Ok(vec![HostTensor::from_vec(w_shape.to_vec(), dw)?])
}

/// ConvGradBias(dY) → Σ dY over every axis but 1, in f64.
fn conv_grad_bias(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let dy = ctx.input(0, "dY")?;
    if dy.rank() < 2 {
        return Err(KernelError::shape("input dY", format!("expected [N, M, ...], found {:?}", dy.shape)));
    }
    let (m, plane) = (dy.shape[1], numel(&dy.shape[2..]));
    let out = dispatch_float!(dy.dtype(), "input dY", T => {
        let mut sums = vec![0.0f64; m];
        for (i, chunk) in dy.view::<T>("input dY")?.chunks(plane.max(1)).enumerate() {
            sums[i % m] += chunk.iter().map(|v| v.to_f64()).sum::<f64>();
        }
        from_f64s::<T>(vec![m], sums.into_iter())
    })?;
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use lms_proto::lms::{Attribute, DType::*};

    /// Checks the three gradients of a Conv with X `xs`, W `ws` and output `ys` against
    /// finite differences of the forward Conv kernel in f64.
    fn check(attrs: &[Attribute], xs: &[usize], ws: &[usize], ys: &[usize]) {
        let mut rng = Rng::new(31);
        let (x, w, dy) = (rng.tensor(xs), rng.tensor(ws), rng.tensor(ys));
        let conv = |x: &crate::tensor::HostTensor, w: &crate::tensor::HostTensor| {
            dot(&run1("Conv", attrs, &[x, w], DtypeF64, ys), &dy)
        };
        let dx = lms1("ConvGradData", attrs, &[&dy, &w], xs);
        // Tolerance 1e-4: f64 central differences of a function linear in x and w.
        assert_near(&dx, &fd_grad(&x, |x| conv(x, &to_f64(&w))), 1e-4);
        let dw = lms1("ConvGradWeight", attrs, &[&dy, &x], ws);
        assert_near(&dw, &fd_grad(&w, |w| conv(&to_f64(&x), w)), 1e-4);
        let db = lms1("ConvGradBias", &[], &[&dy], &ws[..1]);
        let plane: usize = ys[2..].iter().product();
        let want: Vec<f32> = (0..ws[0])
            .map(|mi| {
                (0..ys[0])
                    .flat_map(|ni| f32s(&dy)[(ni * ys[1] + mi) * plane..][..plane].to_vec())
                    .map(f64::from)
                    .sum::<f64>() as f32
            })
            .collect();
        assert_near(&db, &want, 1e-6);
    }

    #[test]
    fn conv_grads_match_finite_differences_2d() {
        check(&[], &[2, 3, 5, 4], &[4, 3, 3, 3], &[2, 4, 3, 2]);
        check(&[ints("strides", &[2, 1]), ints("pads", &[1, 0, 1, 1])], &[2, 3, 6, 5], &[4, 3, 3, 2], &[2, 4, 3, 5]);
        check(&[int("group", 3), ints("dilations", &[2, 1])], &[2, 3, 6, 5], &[6, 1, 2, 2], &[2, 6, 4, 4]);
        // Pointwise, grouped.
        check(&[int("group", 2)], &[2, 4, 3, 3], &[6, 2, 1, 1], &[2, 6, 3, 3]);
    }

    #[test]
    fn conv_grads_match_finite_differences_1d_and_3d() {
        check(&[ints("strides", &[2]), ints("pads", &[1, 2])], &[1, 2, 7], &[3, 2, 3], &[1, 3, 4]);
        check(
            &[
                int("group", 2),
                ints("dilations", &[1, 2, 1]),
                ints("strides", &[1, 1, 2]),
                ints("pads", &[1, 0, 1, 0, 1, 1]),
                ints("kernel_shape", &[2, 2, 3]),
            ],
            &[1, 2, 3, 4, 5],
            &[2, 1, 2, 2, 3],
            &[1, 2, 3, 3, 3],
        );
    }

    #[test]
    fn mismatched_shapes_are_errors() {
        let mut rng = Rng::new(3);
        let (dy, w) = (rng.tensor(&[1, 2, 3, 3]), rng.tensor(&[2, 3, 3, 3]));
        let err = run_lms("ConvGradData", &[], &[&dy, &w], &[(DtypeF32, vec![1, 3, 6, 6])]).unwrap_err();
        assert_eq!(err.to_string(), "ConvGradData: input dY: expected shape [1, 2, 4, 4], found [1, 2, 3, 3]");
    }
}
