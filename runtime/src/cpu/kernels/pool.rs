//! Pooling: MaxPool (with optional Indices), AveragePool, GlobalAveragePool,
//! GlobalMaxPool, and LRN (a pool across channels).

use super::num::{Float, Num};
use super::{dispatch_float, Ctx, Kernel};
use crate::error::{KernelError, Result};
use crate::geometry::window::{Lrn, Window};
use crate::tensor::{numel, Elem, HostTensor};

/// The pooling kernels.
pub(super) const KERNELS: &[(&str, Kernel)] = &[
    ("AveragePool", |c| pool(c, Pool::Average)),
    ("GlobalAveragePool", |c| global_pool(c, Pool::Average)),
    ("GlobalMaxPool", |c| global_pool(c, Pool::Max)),
    ("LRN", lrn),
    ("MaxPool", |c| pool(c, Pool::Max)),
];

#[derive(Clone, Copy, PartialEq)]
enum Pool {
    Max,
    Average,
}

fn pool(ctx: &Ctx<'_>, kind: Pool) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    dispatch_float!(x.dtype(), "input X", T => pool_typed::<T>(ctx, x, kind))
}

/// The first maximum of `plane` over the plane offsets `reads` and its offset, in window
/// order: a later equal value does not replace it and NaN never wins, so a window of -inf
/// and NaN picks its first read (-inf). `None` when the window reads nothing.
pub(super) fn first_max<T: Num>(plane: &[T], reads: impl Iterator<Item = usize>) -> Option<(T, usize)> {
    let mut reads = reads.peekable();
    let mut best = (T::LOWEST, *reads.peek()?);
    for at in reads {
        if plane[at] > best.0 {
            best = (plane[at], at);
        }
    }
    Some(best)
}

/// The input coordinates a window reads on each axis (padding skipped).
pub(super) type Axes<'a> = (&'a [usize], &'a [usize], &'a [usize]);

/// The windows of a pool, in output order.
pub(super) struct Windows {
    /// Per axis, per output coordinate: the input coordinates read and the number of taps
    /// inside the padded extent.
    taps: [Vec<(Vec<usize>, usize)>; 3],
    /// The input plane's two inner sizes.
    inner: [usize; 2],
}

impl Windows {
    /// The windows of `win`.
    pub(super) fn new(win: &Window) -> Windows {
        Windows { taps: [0, 1, 2].map(|a| axis_taps(win, a)), inner: [win.input[1], win.input[2]] }
    }

    /// Calls `f(axes, count)` for every window in output order: `axes` are the coordinates
    /// it reads, `count` the divisor of its average (its taps inside the padded extent
    /// with `include_pad`, else its reads).
    pub(super) fn for_each(&self, include_pad: bool, mut f: impl FnMut(Axes<'_>, usize)) {
        let [tz, ty, tx] = &self.taps;
        for (zs, pz) in tz {
            for (ys, py) in ty {
                for (xs, px) in tx {
                    let count = if include_pad { pz * py * px } else { zs.len() * ys.len() * xs.len() };
                    f((zs, ys, xs), count);
                }
            }
        }
    }

    /// The plane offsets a window reads, in window order.
    pub(super) fn reads<'a>(&self, (zs, ys, xs): Axes<'a>) -> impl Iterator<Item = usize> + 'a {
        let [ih, iw] = self.inner;
        zs.iter()
            .flat_map(move |&z| ys.iter().map(move |&yy| (z * ih + yy) * iw))
            .flat_map(move |row| xs.iter().map(move |&xx| row + xx))
    }
}

fn pool_typed<T: Float>(ctx: &Ctx<'_>, x: &HostTensor, kind: Pool) -> Result<Vec<HostTensor>> {
    let win = Window::pool(&ctx.attrs, &x.shape)?;
    let xs = x.view::<T>("input X")?;
    let planes = x.shape[0] * x.shape[1];
    let (in_sp, out_sp) = (numel(&win.input), numel(&win.output));
    let include_pad = ctx.attrs.int("count_include_pad", 0)? != 0;
    let column_major = ctx.attrs.int("storage_order", 0)? != 0;
    let want_indices = kind == Pool::Max && ctx.outputs.len() > 1;
    let [id, ih, iw] = win.input;
    // Row-major or column-major flat index of a plane offset, as MaxPool's Indices want.
    let index = |p: usize, at: usize| {
        let (z, yy, xx) = (at / (ih * iw), at / iw % ih, at % iw);
        let at = if column_major { (xx * ih + yy) * id + z } else { at };
        (p * in_sp + at) as i64
    };
    let windows = Windows::new(&win);
    let mut y = Vec::with_capacity(planes * out_sp);
    let mut indices = Vec::with_capacity(if want_indices { planes * out_sp } else { 0 });
    for p in 0..planes {
        let plane = &xs[p * in_sp..][..in_sp];
        windows.for_each(include_pad, |axes, count| {
            let reads = windows.reads(axes);
            match kind {
                Pool::Max => {
                    let best = first_max(plane, reads).unwrap_or((T::LOWEST, 0));
                    y.push(best.0);
                    if want_indices {
                        indices.push(index(p, best.1));
                    }
                }
                Pool::Average => {
                    let sum: f64 = reads.map(|at| plane[at].to_f64()).sum();
                    y.push(T::from_f64(sum / count.max(1) as f64));
                }
            }
        });
    }
    let mut shape = x.shape[..2].to_vec();
    shape.extend_from_slice(win.output_dims());
    let mut outs = vec![HostTensor::from_vec(shape.clone(), y)?];
    if want_indices {
        outs.push(HostTensor::from_vec(shape, indices)?);
    }
    Ok(outs)
}

/// For each output coordinate on `axis`: the input coordinates its window reads
/// (padding skipped) and how many of its taps lie inside the padded extent.
fn axis_taps(win: &Window, axis: usize) -> Vec<(Vec<usize>, usize)> {
    let end = win.pad_begin[axis] + win.input[axis] + win.pad_end[axis];
    let ks = 0..win.kernel[axis];
    (0..win.output[axis])
        .map(|o| {
            let reads = ks.clone().filter_map(|k| win.source(axis, o, k)).collect();
            let padded = ks.clone().filter(|&k| o * win.stride[axis] + k * win.dilation[axis] < end);
            (reads, padded.count())
        })
        .collect()
}

fn global_pool(ctx: &Ctx<'_>, kind: Pool) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    if x.rank() < 2 {
        return Err(KernelError::shape("input X", format!("expected [N, C, spatial...], found {:?}", x.shape)));
    }
    let planes = x.shape[0] * x.shape[1];
    let sp = numel(&x.shape[2..]);
    let mut shape = x.shape[..2].to_vec();
    shape.resize(x.rank(), 1);
    let out = dispatch_float!(x.dtype(), "input X", T => {
        let xs = x.view::<T>("input X")?;
        let y: Vec<T> = (0..planes)
            .map(|p| {
                let plane = &xs[p * sp..][..sp];
                match kind {
                    Pool::Max => plane.iter().fold(T::LOWEST, |m, &v| m.max_nan(v)),
                    Pool::Average => T::from_f64(plane.iter().map(|v| v.to_f64()).sum::<f64>() / sp.max(1) as f64),
                }
            })
            .collect();
        HostTensor::from_vec(shape.clone(), y)
    })?;
    Ok(vec![out])
}

/// LRN: x / (bias + alpha / size · Σ x²)^beta, the sum over `size` neighbouring channels.
fn lrn(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let x = ctx.input(0, "X")?;
    let Lrn { size, alpha, beta, bias, before, after } = Lrn::from_attrs(&ctx.attrs)?;
    if x.rank() < 2 {
        return Err(KernelError::shape("input X", format!("expected [N, C, ...], found {:?}", x.shape)));
    }
    let (n, c, sp) = (x.shape[0], x.shape[1], numel(&x.shape[2..]));
    let out = dispatch_float!(x.dtype(), "input X", T => {
        let xs = x.view::<T>("input X")?;
        let mut y = Vec::with_capacity(xs.len());
        for ni in 0..n {
            for ci in 0..c {
                let lo = ci.saturating_sub(before);
                let hi = (ci + after).min(c - 1);
                for s in 0..sp {
                    let sq: f64 = (lo..=hi).map(|k| xs[(ni * c + k) * sp + s].to_f64().powi(2)).sum();
                    let v = xs[(ni * c + ci) * sp + s].to_f64();
                    y.push(T::from_f64(v / (bias + alpha / size as f64 * sq).powf(beta)));
                }
            }
        }
        HostTensor::from_vec(x.shape.clone(), y)
    })?;
    Ok(vec![out])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::tensor::HostTensor;
    use lms_proto::lms::{Attribute, DType::*};

    /// Direct 2-D pooling reference: returns (max, average) with the given pads;
    /// `include_pad` counts taps inside the padded extent.
    #[allow(clippy::too_many_arguments)]
    fn naive_pool(
        x: &HostTensor,
        k: [usize; 2],
        s: [usize; 2],
        d: [usize; 2],
        pads: [usize; 4],
        out: [usize; 2],
        include_pad: bool,
    ) -> (Vec<f32>, Vec<f32>) {
        let xs = f32s(x);
        let [n, c, h, w] = x.shape[..] else { panic!() };
        let (mut mx, mut avg) = (Vec::new(), Vec::new());
        for p in 0..n * c {
            for oy in 0..out[0] {
                for ox in 0..out[1] {
                    let (mut m, mut sum, mut cnt, mut padded) = (f32::NEG_INFINITY, 0.0f64, 0, 0);
                    for ky in 0..k[0] {
                        for kx in 0..k[1] {
                            let (py, px) = (oy * s[0] + ky * d[0], ox * s[1] + kx * d[1]);
                            if py < pads[0] + h + pads[2] && px < pads[1] + w + pads[3] {
                                padded += 1;
                            }
                            if py < pads[0] || px < pads[1] || py - pads[0] >= h || px - pads[1] >= w {
                                continue;
                            }
                            let v = xs[(p * h + py - pads[0]) * w + px - pads[1]];
                            m = m.max(v);
                            sum += v as f64;
                            cnt += 1;
                        }
                    }
                    mx.push(m);
                    avg.push((sum / if include_pad { padded } else { cnt } as f64) as f32);
                }
            }
        }
        (mx, avg)
    }

    fn pool(op: &str, attrs: &[Attribute], x: &HostTensor, out: &[usize]) -> Vec<f32> {
        f32s(&run1(op, attrs, &[x], DtypeF32, out))
    }

    #[test]
    fn max_pool_with_indices_in_both_storage_orders() {
        let x = tensor(&[1, 1, 4, 4], (0..16).map(|v| ((v * 7) % 16) as f32).collect());
        // x = [0 7 14 5 / 12 3 10 1 / 8 15 6 13 / 4 11 2 9]
        let attrs = [ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2])];
        let spec = [(DtypeF32, vec![1, 1, 2, 2]), (DtypeI64, vec![1, 1, 2, 2])];
        let out = run("MaxPool", 12, &attrs, &[&x], &spec).unwrap();
        assert_eq!(f32s(&out[0]), vec![12.0, 14.0, 15.0, 13.0]);
        assert_eq!(out[1].as_i64("i").unwrap(), &[4, 2, 9, 11]);
        let attrs = [ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2]), int("storage_order", 1)];
        let out = run("MaxPool", 12, &attrs, &[&x], &spec).unwrap();
        // (row, col) -> col * 4 + row
        assert_eq!(out[1].as_i64("i").unwrap(), &[1, 8, 6, 14]);
    }

    #[test]
    fn ceil_mode_rounds_up_and_drops_windows_starting_in_padding() {
        let x = tensor(&[1, 1, 5, 5], (0..25).map(|v| v as f32).collect());
        let attrs = [ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2]), int("ceil_mode", 1)];
        assert_eq!(pool("MaxPool", &attrs, &x, &[1, 1, 3, 3]), vec![6.0, 8.0, 9.0, 16.0, 18.0, 19.0, 21.0, 23.0, 24.0]);
        let avg = pool("AveragePool", &attrs, &x, &[1, 1, 3, 3]);
        assert_close(&avg, &[3.0, 5.0, 6.5, 13.0, 15.0, 16.5, 20.5, 22.5, 24.0]);
        // 4 wide with one end pad: ceil((4 + 1 - 2) / 2) + 1 = 3, but the third window
        // would start at 4, inside the padding, so 2 remain.
        let x = tensor(&[1, 1, 1, 4], vec![1.0f32, 2.0, 3.0, 4.0]);
        let attrs =
            [ints("kernel_shape", &[1, 2]), ints("strides", &[1, 2]), ints("pads", &[0, 0, 0, 1]), int("ceil_mode", 1)];
        assert_eq!(pool("MaxPool", &attrs, &x, &[1, 1, 1, 2]), vec![2.0, 4.0]);
    }

    #[test]
    fn pools_match_direct_pooling() {
        let mut rng = Rng::new(13);
        let x = rng.tensor(&[2, 3, 9, 8]);
        for (include, ceil) in [(false, false), (true, false), (false, true), (true, true)] {
            let attrs = [
                ints("kernel_shape", &[3, 2]),
                ints("strides", &[2, 3]),
                ints("dilations", &[1, 2]),
                ints("pads", &[1, 1, 1, 0]),
                int("count_include_pad", include as i64),
                int("ceil_mode", ceil as i64),
            ];
            // h: 11 - 3 = 8 -> 8/2 + 1 = 5 either way; w: 9 - 3 = 6 -> 6/3 + 1 = 3 either way.
            let (mx, avg) = naive_pool(&x, [3, 2], [2, 3], [1, 2], [1, 1, 1, 0], [5, 3], include);
            assert_close(&pool("MaxPool", &attrs, &x, &[2, 3, 5, 3]), &mx);
            assert_close(&pool("AveragePool", &attrs, &x, &[2, 3, 5, 3]), &avg);
        }
        // ceil mode adds a partial window: w 8 with k 2, s 3 -> floor 3, ceil 4 (start 9 < 8 + 1? no: 9 >= 9 -> dropped).
        let attrs =
            [ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2]), ints("pads", &[0, 0, 1, 1]), int("ceil_mode", 1)];
        // h: 10 - 2 = 8 -> ceil 4 + 1 = 5, start 8 < 9 kept; w: 9 - 2 = 7 -> ceil 4 + 1 = 5, start 8 < 8? no -> 4.
        let (mx, avg) = naive_pool(&x, [2, 2], [2, 2], [1, 1], [0, 0, 1, 1], [5, 4], false);
        assert_close(&pool("MaxPool", &attrs, &x, &[2, 3, 5, 4]), &mx);
        assert_close(&pool("AveragePool", &attrs, &x, &[2, 3, 5, 4]), &avg);
    }

    #[test]
    fn global_pools_and_lrn() {
        let x = tensor(&[1, 2, 2, 2], vec![1.0f32, 2.0, 3.0, 4.0, -1.0, -2.0, -3.0, -4.0]);
        assert_eq!(pool("GlobalAveragePool", &[], &x, &[1, 2, 1, 1]), vec![2.5, -2.5]);
        assert_eq!(pool("GlobalMaxPool", &[], &x, &[1, 2, 1, 1]), vec![4.0, -1.0]);
        let x = tensor(&[1, 3, 1, 1], vec![1.0f32, 2.0, 3.0]);
        let attrs = [int("size", 3), float("alpha", 0.3), float("beta", 0.5), float("bias", 2.0)];
        let y = pool("LRN", &attrs, &x, &[1, 3, 1, 1]);
        let f = |v: f64, sq: f64| (v / (2.0 + 0.1 * sq).sqrt()) as f32;
        assert_close(&y, &[f(1.0, 5.0), f(2.0, 14.0), f(3.0, 13.0)]);
    }
}
