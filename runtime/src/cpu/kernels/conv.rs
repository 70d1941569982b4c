//! Conv (1-D, 2-D, 3-D, grouped, strided, dilated, padded) via im2col and GEMM.

use super::num::{gemm, Float};
use super::{dispatch_float, Ctx, Kernel};
use crate::error::{KernelError, Result};
use crate::geometry::window::Window;
use crate::tensor::{numel, HostTensor};

/// The convolution kernel.
pub(super) const KERNELS: &[(&str, Kernel)] = &[("Conv", conv)];

fn conv(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    dispatch_float!(x.dtype(), "input X", T => conv_typed::<T>(ctx, x))
}

/// Channel counts of a grouped op: (channels per group, group count).
pub(super) fn groups(ctx: &Ctx<'_>, channels: usize, what: &str) -> Result<(usize, usize)> {
    let group = ctx.attrs.int("group", 1)?;
    if group < 1 || channels % group as usize != 0 {
        return Err(KernelError::attr("group", format!("{group} does not divide the {channels} channels of {what}")));
    }
    Ok((channels / group as usize, group as usize))
}

/// Checks that optional bias `B` has shape `[channels]` and returns its elements.
pub(super) fn bias<T: Float>(b: Option<&HostTensor>, channels: usize) -> Result<Option<&[T]>> {
    let Some(b) = b else { return Ok(None) };
    if b.shape != [channels] {
        return Err(KernelError::shape("input B", format!("expected shape [{channels}], found {:?}", b.shape)));
    }
    b.view::<T>("input B").map(Some)
}

fn conv_typed<T: Float>(ctx: &Ctx<'_>, x: &HostTensor) -> Result<Vec<HostTensor>> {
    let w = ctx.input(1, "W")?;
    if x.rank() < 3 || w.rank() != x.rank() {
        return Err(KernelError::shape(
            "input W",
            format!("shape {:?} does not fit X of shape {:?}", w.shape, x.shape),
        ));
    }
    let (n, c, m) = (x.shape[0], x.shape[1], w.shape[0]);
    let (cg, group) = groups(ctx, c, "X")?;
    if w.shape[1] != cg || m % group != 0 {
        return Err(KernelError::shape(
            "input W",
            format!("shape {:?} does not fit {c} channels in {group} groups", w.shape),
        ));
    }
    let win = Window::conv(&ctx.attrs, &x.shape[2..], &w.shape[2..])?;
    let b = bias::<T>(ctx.opt_input(2), m)?;
    let (xs, ws) = (x.view::<T>("input X")?, w.view::<T>("input W")?);
    let (mg, kk) = (m / group, numel(&win.kernel));
    let (in_sp, out_sp) = (numel(&win.input), numel(&win.output));
    let pointwise = kk == 1 && win.stride == [1; 3] && win.pad_begin == [0; 3] && win.pad_end == [0; 3];
    let mut y = vec![T::ZERO; n * m * out_sp];
    let mut col = vec![T::ZERO; if pointwise { 0 } else { cg * kk * out_sp }];
    for ni in 0..n {
        for g in 0..group {
            let x_g = &xs[(ni * c + g * cg) * in_sp..][..cg * in_sp];
            let cols = if pointwise {
                x_g
            } else {
                im2col(x_g, cg, &win, &mut col);
                &col[..]
            };
            let w_g = &ws[g * mg * cg * kk..][..mg * cg * kk];
            let y_g = &mut y[(ni * m + g * mg) * out_sp..][..mg * out_sp];
            gemm((mg, cg * kk, out_sp), T::ONE, (w_g, cg * kk, 1), (cols, out_sp, 1), T::ZERO, y_g, out_sp)?;
        }
    }
    if let Some(b) = b {
        add_channel_bias(&mut y, b, out_sp);
    }
    let mut shape = vec![n, m];
    shape.extend_from_slice(win.output_dims());
    Ok(vec![HostTensor::from_vec(shape, y)?])
}

/// Adds `b[channel]` to every element of each channel plane of size `plane`.
pub(super) fn add_channel_bias<T: Float>(y: &mut [T], b: &[T], plane: usize) {
    for (i, chunk) in y.chunks_mut(plane.max(1)).enumerate() {
        let v = b[i % b.len()];
        chunk.iter_mut().for_each(|e| *e = *e + v);
    }
}

/// Unfolds the windows of `channels` input planes into `col`, a
/// `[channels · kernel elements, output positions]` row-major matrix (zeros for padding).
pub(super) fn im2col<T: Float>(x: &[T], channels: usize, win: &Window, col: &mut [T]) {
    let [id, ih, iw] = win.input;
    let [kd, kh, kw] = win.kernel;
    let [od, oh, ow] = win.output;
    let mut rows = col.chunks_exact_mut(od * oh * ow);
    for c in 0..channels {
        let plane = &x[c * id * ih * iw..][..id * ih * iw];
        for kz in 0..kd {
            for ky in 0..kh {
                for kx in 0..kw {
                    let Some(dst) = rows.next() else { return };
                    let mut o = 0;
                    for oz in 0..od {
                        let iz = win.source(0, oz, kz);
                        for oy in 0..oh {
                            let iy = win.source(1, oy, ky);
                            for ox in 0..ow {
                                dst[o] = match (iz, iy, win.source(2, ox, kx)) {
                                    (Some(z), Some(y), Some(x)) => plane[(z * ih + y) * iw + x],
                                    _ => T::ZERO,
                                };
                                o += 1;
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

    /// Direct 3-D convolution, the reference: loops over batch, output channel, output
    /// position, input channel of the group and kernel offset.
    #[allow(clippy::too_many_arguments)]
    fn naive_conv3d(
        x: &[f32],
        xs: [usize; 5],
        w: &[f32],
        ws: [usize; 5],
        b: Option<&[f32]>,
        group: usize,
        stride: [usize; 3],
        dil: [usize; 3],
        pad: [usize; 3],
        out: [usize; 3],
    ) -> Vec<f32> {
        let [n, c, id, ih, iw] = xs;
        let [m, cg, kd, kh, kw] = ws;
        let mg = m / group;
        let mut y = Vec::new();
        for ni in 0..n {
            for mi in 0..m {
                let g = mi / mg;
                for oz in 0..out[0] {
                    for oy in 0..out[1] {
                        for ox in 0..out[2] {
                            let mut acc = b.map_or(0.0, |b| b[mi] as f64);
                            for ci in 0..cg {
                                for kz in 0..kd {
                                    for ky in 0..kh {
                                        for kx in 0..kw {
                                            let z = (oz * stride[0] + kz * dil[0]) as isize - pad[0] as isize;
                                            let yy = (oy * stride[1] + ky * dil[1]) as isize - pad[1] as isize;
                                            let xx = (ox * stride[2] + kx * dil[2]) as isize - pad[2] as isize;
                                            if z < 0
                                                || yy < 0
                                                || xx < 0
                                                || z >= id as isize
                                                || yy >= ih as isize
                                                || xx >= iw as isize
                                            {
                                                continue;
                                            }
                                            let (z, yy, xx) = (z as usize, yy as usize, xx as usize);
                                            let xv = x[(((ni * c + g * cg + ci) * id + z) * ih + yy) * iw + xx];
                                            let wv = w[(((mi * cg + ci) * kd + kz) * kh + ky) * kw + kx];
                                            acc += xv as f64 * wv as f64;
                                        }
                                    }
                                }
                            }
                            y.push(acc as f32);
                        }
                    }
                }
            }
        }
        y
    }

    fn conv(attrs: &[Attribute], x: &HostTensor, w: &HostTensor, b: Option<&HostTensor>, out: &[usize]) -> Vec<f32> {
        let outs = run_opt("Conv", 17, attrs, &[Some(x), Some(w), b], &[(DtypeF32, out.to_vec())]).unwrap();
        f32s(&outs[0])
    }

    #[test]
    fn conv2d_matches_direct_conv_with_groups_stride_dilation_padding() {
        let mut rng = Rng::new(7);
        let x = rng.tensor(&[2, 4, 7, 6]);
        let w = rng.tensor(&[6, 2, 3, 2]);
        let b = rng.tensor(&[6]);
        // pads: top 1, left 0, bottom 2, right 1 -> padded 10 x 7.
        let attrs =
            [int("group", 2), ints("strides", &[2, 1]), ints("dilations", &[1, 2]), ints("pads", &[1, 0, 2, 1])];
        // out h = (10 - 3) / 2 + 1 = 4; out w = (7 - 3) / 1 + 1 = 5.
        let got = conv(&attrs, &x, &w, Some(&b), &[2, 6, 4, 5]);
        // The reference skips reads past the end, which is the end padding.
        let want = naive_conv3d(
            &f32s(&x),
            [2, 4, 1, 7, 6],
            &f32s(&w),
            [6, 2, 1, 3, 2],
            Some(&f32s(&b)),
            2,
            [1, 2, 1],
            [1, 1, 2],
            [0, 1, 0],
            [1, 4, 5],
        );
        assert_close(&got, &want);
    }

    #[test]
    fn conv1d_and_conv3d_match_direct_conv() {
        let mut rng = Rng::new(11);
        let x = rng.tensor(&[1, 3, 10]);
        let w = rng.tensor(&[2, 3, 3]);
        let got = conv(&[ints("strides", &[2]), ints("pads", &[1, 1])], &x, &w, None, &[1, 2, 5]);
        let want = naive_conv3d(
            &f32s(&x),
            [1, 3, 1, 1, 10],
            &f32s(&w),
            [2, 3, 1, 1, 3],
            None,
            1,
            [1, 1, 2],
            [1; 3],
            [0, 0, 1],
            [1, 1, 5],
        );
        assert_close(&got, &want);

        // Depthwise 3-D conv with dilation and padding.
        let x = rng.tensor(&[2, 3, 5, 4, 6]);
        let w = rng.tensor(&[3, 1, 2, 3, 2]);
        let b = rng.tensor(&[3]);
        let attrs = [
            int("group", 3),
            ints("dilations", &[2, 1, 1]),
            ints("pads", &[1, 1, 1, 1, 1, 1]),
            ints("strides", &[1, 2, 2]),
        ];
        // d: 7 - 3 + 1 = 5; h: (6 - 3) / 2 + 1 = 2; w: (8 - 2) / 2 + 1 = 4.
        let got = conv(&attrs, &x, &w, Some(&b), &[2, 3, 5, 2, 4]);
        let want = naive_conv3d(
            &f32s(&x),
            [2, 3, 5, 4, 6],
            &f32s(&w),
            [3, 1, 2, 3, 2],
            Some(&f32s(&b)),
            3,
            [1, 2, 2],
            [2, 1, 1],
            [1, 1, 1],
            [5, 2, 4],
        );
        assert_close(&got, &want);
    }

    #[test]
    fn pointwise_and_same_padding() {
        let mut rng = Rng::new(3);
        let x = rng.tensor(&[2, 5, 3, 4]);
        let w = rng.tensor(&[4, 5, 1, 1]);
        let got = conv(&[], &x, &w, None, &[2, 4, 3, 4]);
        let want = naive_conv3d(
            &f32s(&x),
            [2, 5, 1, 3, 4],
            &f32s(&w),
            [4, 5, 1, 1, 1],
            None,
            1,
            [1; 3],
            [1; 3],
            [0; 3],
            [1, 3, 4],
        );
        assert_close(&got, &want);

        // SAME_UPPER, 3x3, stride 1: pads 1 on each side.
        let w = rng.tensor(&[2, 5, 3, 3]);
        let got = conv(&[string("auto_pad", "SAME_UPPER")], &x, &w, None, &[2, 2, 3, 4]);
        let want = naive_conv3d(
            &f32s(&x),
            [2, 5, 1, 3, 4],
            &f32s(&w),
            [2, 5, 1, 3, 3],
            None,
            1,
            [1; 3],
            [1; 3],
            [0, 1, 1],
            [1, 3, 4],
        );
        assert_close(&got, &want);
    }

    #[test]
    fn mismatched_weights_are_errors() {
        let mut rng = Rng::new(5);
        let x = rng.tensor(&[1, 4, 5, 5]);
        let w = rng.tensor(&[2, 3, 3, 3]);
        let err = run("Conv", 17, &[], &[&x, &w], &[(DtypeF32, vec![1, 2, 3, 3])]).unwrap_err();
        assert_eq!(err.to_string(), "Conv: input W: shape [2, 3, 3, 3] does not fit 4 channels in 1 groups");
        let w = rng.tensor(&[2, 4, 7, 7]);
        assert!(run("Conv", 17, &[], &[&x, &w], &[(DtypeF32, vec![1, 2, 1, 1])]).is_err());
    }

    #[test]
    fn conv_is_bit_deterministic() {
        let mut rng = Rng::new(9);
        let x = rng.tensor(&[1, 8, 9, 9]);
        let w = rng.tensor(&[16, 8, 3, 3]);
        let a = conv(&[ints("pads", &[1, 1, 1, 1])], &x, &w, None, &[1, 16, 9, 9]);
        let b = conv(&[ints("pads", &[1, 1, 1, 1])], &x, &w, None, &[1, 16, 9, 9]);
        assert_eq!(
            a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            b.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    }
}
