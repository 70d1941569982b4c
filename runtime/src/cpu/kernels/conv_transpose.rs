//! ConvTranspose (1-D to 3-D, grouped): GEMM with the transposed weights, then col2im.

use super::conv::{add_channel_bias, bias, groups};
use super::num::{gemm, Float};
use super::{dispatch_float, Ctx, Kernel};
use crate::error::{KernelError, Result};
use crate::geometry::window::{check_spatial_rank, Window};
use crate::tensor::{numel, HostTensor};

/// The transposed-convolution kernel.
pub(super) const KERNELS: &[(&str, Kernel)] = &[("ConvTranspose", conv_transpose)];

fn conv_transpose(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    dispatch_float!(x.dtype(), "input X", T => conv_transpose_typed::<T>(ctx, x))
}

fn conv_transpose_typed<T: Float>(ctx: &Ctx<'_>, x: &HostTensor) -> Result<Vec<HostTensor>> {
    let w = ctx.input(1, "W")?;
    if x.rank() < 3 || w.rank() != x.rank() || w.shape[0] != x.shape[1] {
        return Err(KernelError::shape(
            "input W",
            format!("shape {:?} does not fit X of shape {:?}", w.shape, x.shape),
        ));
    }
    check_spatial_rank(x.rank() - 2, "ConvTranspose")?;
    let (n, c, mg) = (x.shape[0], x.shape[1], w.shape[1]);
    let (cg, group) = groups(ctx, c, "X")?;
    let m = mg * group;
    let win = Window::conv_transpose(&ctx.attrs, &x.shape[2..], &w.shape[2..])?;
    let b = bias::<T>(ctx.opt_input(2), m)?;
    let (xs, ws) = (x.view::<T>("input X")?, w.view::<T>("input W")?);
    let kk = numel(&win.kernel);
    let (in_sp, out_sp) = (numel(&win.output), numel(&win.input));
    let mut y = vec![T::ZERO; n * m * out_sp];
    let mut col = vec![T::ZERO; mg * kk * in_sp];
    for ni in 0..n {
        for g in 0..group {
            let x_g = &xs[(ni * c + g * cg) * in_sp..][..cg * in_sp];
            let w_g = &ws[g * cg * mg * kk..][..cg * mg * kk];
            // col[mg·kk, in_sp] = W_gᵀ · X_g, W_g read transposed through its strides.
            gemm((mg * kk, cg, in_sp), T::ONE, (w_g, 1, mg * kk), (x_g, in_sp, 1), T::ZERO, &mut col, in_sp)?;
            let y_g = &mut y[(ni * m + g * mg) * out_sp..][..mg * out_sp];
            col2im(&col, mg, &win, y_g);
        }
    }
    if let Some(b) = b {
        add_channel_bias(&mut y, b, out_sp);
    }
    let mut shape = vec![n, m];
    shape.extend_from_slice(&win.input[3 - win.rank..]);
    Ok(vec![HostTensor::from_vec(shape, y)?])
}

/// Scatter-adds `col` (`[channels · kernel elements, win.output positions]`) into the
/// `channels` planes `y` of size `win.input`, in a fixed order: the adjoint of
/// [`super::conv::im2col`] for a forward-conv window `win`.
pub(super) fn col2im<T: Float>(col: &[T], channels: usize, win: &Window, y: &mut [T]) {
    let [od, oh, ow] = win.input;
    let [kd, kh, kw] = win.kernel;
    let [id, ih, iw] = win.output;
    let mut rows = col.chunks_exact(id * ih * iw);
    for c in 0..channels {
        let plane = &mut y[c * od * oh * ow..][..od * oh * ow];
        for kz in 0..kd {
            for ky in 0..kh {
                for kx in 0..kw {
                    let Some(src) = rows.next() else { return };
                    let mut i = 0;
                    for iz in 0..id {
                        let z = win.source(0, iz, kz);
                        for iy in 0..ih {
                            let yy = win.source(1, iy, ky);
                            for ix in 0..iw {
                                if let (Some(z), Some(yy), Some(xx)) = (z, yy, win.source(2, ix, kx)) {
                                    let e = &mut plane[(z * oh + yy) * ow + xx];
                                    *e = *e + src[i];
                                }
                                i += 1;
                            }
                        }
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::tensor::HostTensor;
    use lms_proto::lms::{Attribute, DType::*};

    /// Direct 2-D transposed convolution: every input element scatters x·w.
    #[allow(clippy::too_many_arguments)]
    fn naive(
        x: &HostTensor,
        w: &HostTensor,
        group: usize,
        s: [usize; 2],
        d: [usize; 2],
        pad: [usize; 2],
        out: [usize; 2],
    ) -> Vec<f32> {
        let (xs, ws) = (f32s(x), f32s(w));
        let [n, c, ih, iw] = x.shape[..] else { panic!() };
        let [_, mg, kh, kw] = w.shape[..] else { panic!() };
        let cg = c / group;
        let m = mg * group;
        let mut y = vec![0.0f64; n * m * out[0] * out[1]];
        for ni in 0..n {
            for ci in 0..c {
                let g = ci / cg;
                for mj in 0..mg {
                    for i in 0..ih {
                        for j in 0..iw {
                            for ki in 0..kh {
                                for kj in 0..kw {
                                    let oy = (i * s[0] + ki * d[0]) as isize - pad[0] as isize;
                                    let ox = (j * s[1] + kj * d[1]) as isize - pad[1] as isize;
                                    if oy < 0 || ox < 0 || oy >= out[0] as isize || ox >= out[1] as isize {
                                        continue;
                                    }
                                    let xv = xs[((ni * c + ci) * ih + i) * iw + j] as f64;
                                    let wv = ws[((ci * mg + mj) * kh + ki) * kw + kj] as f64;
                                    y[((ni * m + g * mg + mj) * out[0] + oy as usize) * out[1] + ox as usize] +=
                                        xv * wv;
                                }
                            }
                        }
                    }
                }
            }
        }
        y.into_iter().map(|v| v as f32).collect()
    }

    fn run_ct(attrs: &[Attribute], x: &HostTensor, w: &HostTensor, out: &[usize]) -> Vec<f32> {
        f32s(&run1("ConvTranspose", attrs, &[x, w], DtypeF32, out))
    }

    #[test]
    fn hand_computed_1d() {
        let x = tensor(&[1, 1, 2], vec![1.0f32, 2.0]);
        let w = tensor(&[1, 1, 3], vec![1.0f32, 1.0, 1.0]);
        assert_eq!(run_ct(&[], &x, &w, &[1, 1, 4]), vec![1.0, 3.0, 3.0, 2.0]);
        assert_eq!(run_ct(&[ints("strides", &[2])], &x, &w, &[1, 1, 5]), vec![1.0, 1.0, 3.0, 2.0, 2.0]);
    }

    #[test]
    fn matches_direct_scatter_with_groups_stride_dilation_pads() {
        let mut rng = Rng::new(21);
        let x = rng.tensor(&[2, 4, 3, 5]);
        let w = rng.tensor(&[4, 3, 3, 2]);
        let attrs = [
            int("group", 2),
            ints("strides", &[2, 3]),
            ints("dilations", &[1, 2]),
            ints("pads", &[1, 0, 0, 2]),
            ints("output_padding", &[1, 0]),
        ];
        // h: 2·2 + 1 + 3 - 1 = 7; w: 3·4 + 0 + 3 - 2 = 13.
        let got = run_ct(&attrs, &x, &w, &[2, 6, 7, 13]);
        assert_close(&got, &naive(&x, &w, 2, [2, 3], [1, 2], [1, 0], [7, 13]));
        // The same output asked for through output_shape (pads then split begin-heavy).
        let attrs = [ints("strides", &[2, 3]), ints("output_shape", &[6, 14])];
        let w = rng.tensor(&[4, 2, 3, 2]);
        // full h: 2·2 + 3 = 7 -> total 1 -> begin 1, end 0; full w: 3·4 + 2 = 14 -> 0.
        let got = run_ct(&attrs, &x, &w, &[2, 2, 6, 14]);
        assert_close(&got, &naive(&x, &w, 1, [2, 3], [1, 1], [1, 0], [6, 14]));
    }

    #[test]
    fn onnx_convtranspose_pads_case() {
        // ONNX backend test `convtranspose_pads`.
        let x = tensor(&[1, 1, 3, 3], (0..9).map(|v| v as f32).collect());
        let w = tensor(&[1, 2, 3, 3], vec![1.0f32; 18]);
        let attrs = [ints("strides", &[3, 2]), ints("pads", &[1, 2, 1, 2])];
        let rows: [[f32; 3]; 7] =
            [[1., 1., 3.], [1., 1., 3.], [7., 4., 9.], [7., 4., 9.], [7., 4., 9.], [13., 7., 15.], [13., 7., 15.]];
        let plane: Vec<f32> = rows.concat();
        assert_eq!(run_ct(&attrs, &x, &w, &[1, 2, 7, 3]), [plane.clone(), plane].concat());
    }

    #[test]
    fn bias_is_added_per_output_channel() {
        let x = tensor(&[1, 1, 1, 1], vec![2.0f32]);
        let w = tensor(&[1, 2, 1, 1], vec![1.0f32, 3.0]);
        let b = tensor(&[2], vec![0.5f32, -0.5]);
        let y = run1("ConvTranspose", &[], &[&x, &w, &b], DtypeF32, &[1, 2, 1, 1]);
        assert_eq!(f32s(&y), vec![2.5, 5.5]);
    }
}
