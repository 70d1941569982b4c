//! Sliding-window geometry shared by both backends' Conv, ConvTranspose and pools:
//! strides, dilations, pads and auto_pad, with 1-D and 2-D windows padded to 3-D (leading
//! size-1 axes), and LRN's window across channels.

use crate::attrs::Attrs;
use crate::error::{KernelError, Result};

/// Geometry of a window op over 1 to 3 spatial axes, stored as 3-D.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Window {
    /// Number of spatial axes of the op (1, 2 or 3).
    pub rank: usize,
    /// Input spatial size.
    pub input: [usize; 3],
    /// Kernel size.
    pub kernel: [usize; 3],
    /// Output spatial size.
    pub output: [usize; 3],
    /// Stride per axis.
    pub stride: [usize; 3],
    /// Dilation per axis.
    pub dilation: [usize; 3],
    /// Padding before each axis.
    pub pad_begin: [usize; 3],
    /// Padding after each axis.
    pub pad_end: [usize; 3],
}

/// `v` (length <= 3) right-aligned in an array filled with `fill`.
pub(crate) fn to3(v: &[usize], fill: usize) -> [usize; 3] {
    let mut out = [fill; 3];
    out[3 - v.len()..].copy_from_slice(v);
    out
}

/// Largest value accepted in a window attribute, so window arithmetic cannot overflow.
const MAX_WINDOW: i64 = i32::MAX as i64;

/// Attribute `name` as `len` sizes in `[min, MAX_WINDOW]`, `None` when absent.
pub(crate) fn window_attr(attrs: &Attrs<'_>, name: &str, len: usize, min: i64) -> Result<Option<Vec<usize>>> {
    let Some(v) = attrs.ints_opt(name)? else {
        return Ok(None);
    };
    if v.len() != len || v.iter().any(|s| !(min..=MAX_WINDOW).contains(s)) {
        return Err(KernelError::attr(name, format!("expected {len} values in [{min}, {MAX_WINDOW}], found {v:?}")));
    }
    Ok(Some(v.iter().map(|&s| s as usize).collect()))
}

/// The explicit `pads` attribute (begin values, then end values), 0s by default.
pub(crate) fn explicit_pads(attrs: &Attrs<'_>, rank: usize) -> Result<(Vec<usize>, Vec<usize>)> {
    let p = window_attr(attrs, "pads", 2 * rank, 0)?.unwrap_or_else(|| vec![0; 2 * rank]);
    Ok((p[..rank].to_vec(), p[rank..].to_vec()))
}

/// The `strides` and `dilations` attributes of an op with `rank` spatial axes.
pub(crate) fn strides_dilations(attrs: &Attrs<'_>, rank: usize) -> Result<(Vec<usize>, Vec<usize>)> {
    let ones = || vec![1; rank];
    Ok((
        window_attr(attrs, "strides", rank, 1)?.unwrap_or_else(ones),
        window_attr(attrs, "dilations", rank, 1)?.unwrap_or_else(ones),
    ))
}

/// Checks that an op has 1 to 3 spatial axes.
pub(crate) fn check_spatial_rank(rank: usize, what: &str) -> Result<()> {
    if (1..=3).contains(&rank) {
        Ok(())
    } else {
        Err(KernelError::unsupported(format!("{what} with {rank} spatial axes (1 to 3 are)")))
    }
}

impl Window {
    /// Window geometry from the node's attributes (`strides`, `dilations`, `pads`,
    /// `auto_pad`) for an input of spatial size `input` and a kernel of size `kernel`.
    /// `ceil_mode` rounds the output size up, dropping a last window that would start
    /// in the end padding.
    pub fn from_attrs(attrs: &Attrs<'_>, input: &[usize], kernel: &[usize], ceil_mode: bool) -> Result<Window> {
        let rank = input.len();
        check_spatial_rank(rank, "window op")?;
        if kernel.len() != rank || kernel.contains(&0) {
            return Err(KernelError::attr("kernel_shape", format!("{kernel:?} does not fit {rank} spatial axes")));
        }
        let (stride, dilation) = strides_dilations(attrs, rank)?;
        let (mut begin, mut end) = explicit_pads(attrs, rank)?;
        let mut output = vec![0; rank];
        let auto_pad = attrs.string("auto_pad", "NOTSET")?;
        for d in 0..rank {
            let span = (kernel[d] - 1) * dilation[d] + 1;
            match auto_pad {
                "NOTSET" => {}
                "VALID" => (begin[d], end[d]) = (0, 0),
                "SAME_UPPER" | "SAME_LOWER" => {
                    let out = input[d].div_ceil(stride[d]);
                    let total = ((out.max(1) - 1) * stride[d] + span).saturating_sub(input[d]);
                    let small = total / 2;
                    (begin[d], end[d]) =
                        if auto_pad == "SAME_UPPER" { (small, total - small) } else { (total - small, small) };
                }
                other => return Err(KernelError::attr("auto_pad", format!("unknown value `{other}`"))),
            }
            let padded = input[d] + begin[d] + end[d];
            if padded < span {
                return Err(KernelError::shape(
                    "input X",
                    format!("spatial axis {d} of size {padded} (padded) is smaller than the window {span}"),
                ));
            }
            let steps = padded - span;
            output[d] = if ceil_mode {
                let out = steps.div_ceil(stride[d]) + 1;
                if (out - 1) * stride[d] >= input[d] + begin[d] {
                    out - 1
                } else {
                    out
                }
            } else {
                steps / stride[d] + 1
            };
        }
        Ok(Window {
            rank,
            input: to3(input, 1),
            kernel: to3(kernel, 1),
            output: to3(&output, 1),
            stride: to3(&stride, 1),
            dilation: to3(&dilation, 1),
            pad_begin: to3(&begin, 0),
            pad_end: to3(&end, 0),
        })
    }

    /// Output spatial size, with the op's own number of axes.
    pub fn output_dims(&self) -> &[usize] {
        &self.output[3 - self.rank..]
    }

    /// Input coordinate on `axis` read by output position `o` at kernel offset `k`, or
    /// `None` when it falls in the padding.
    #[inline]
    pub fn source(&self, axis: usize, o: usize, k: usize) -> Option<usize> {
        (o * self.stride[axis] + k * self.dilation[axis])
            .checked_sub(self.pad_begin[axis])
            .filter(|&i| i < self.input[axis])
    }
}

/// The window geometry of a pool over an input of shape `x` (`[N, C, spatial...]`) from
/// `kernel_shape`, `ceil_mode` and the pad attributes.
pub(crate) fn pool_window(attrs: &Attrs<'_>, x: &[usize]) -> Result<Window> {
    if x.len() < 3 {
        return Err(KernelError::shape("input X", format!("expected [N, C, spatial...], found {x:?}")));
    }
    let kernel = window_attr(attrs, "kernel_shape", x.len() - 2, 1)?
        .ok_or_else(|| KernelError::attr("kernel_shape", "is required"))?;
    Window::from_attrs(attrs, &x[2..], &kernel, attrs.int("ceil_mode", 0)? != 0)
}

/// The geometry of a ConvTranspose over spatial input `input` with kernel `kernel`, seen
/// from the equivalent forward conv: its "input" is this op's output and its "output" is
/// this op's input, so `Window::source` maps input to output.
pub(crate) fn conv_transpose_window(attrs: &Attrs<'_>, input: &[usize], kernel: &[usize]) -> Result<Window> {
    let rank = input.len();
    let (stride, dilation) = strides_dilations(attrs, rank)?;
    if kernel.contains(&0) {
        return Err(KernelError::shape("input W", format!("empty kernel {kernel:?}")));
    }
    let out_pad = window_attr(attrs, "output_padding", rank, 0)?.unwrap_or_else(|| vec![0; rank]);
    let output_shape = window_attr(attrs, "output_shape", rank, 0)?;
    let auto_pad = attrs.string("auto_pad", "NOTSET")?;
    let (mut begin, mut end) = explicit_pads(attrs, rank)?;
    let mut output = vec![0; rank];
    for d in 0..rank {
        let full = stride[d] * (input[d].max(1) - 1) + out_pad[d] + (kernel[d] - 1) * dilation[d] + 1;
        let target = match (&output_shape, auto_pad) {
            (Some(s), _) => Some(s[d]),
            (None, "SAME_UPPER" | "SAME_LOWER") => Some(input[d] * stride[d]),
            (None, "VALID") => Some(full),
            (None, "NOTSET") => None,
            (None, other) => return Err(KernelError::attr("auto_pad", format!("unknown value `{other}`"))),
        };
        match target {
            Some(out) => {
                let total = full.checked_sub(out).ok_or_else(|| {
                    KernelError::unsupported(format!("output size {out} on axis {d} beyond the full size {full}"))
                })?;
                let half = total / 2;
                (begin[d], end[d]) = if auto_pad == "SAME_UPPER" { (half, total - half) } else { (total - half, half) };
                output[d] = out;
            }
            None => {
                output[d] = full.checked_sub(begin[d] + end[d]).ok_or_else(|| {
                    KernelError::attr("pads", format!("remove more than the {full} elements of axis {d}"))
                })?;
            }
        }
    }
    Ok(Window {
        rank,
        input: to3(&output, 1),
        kernel: to3(kernel, 1),
        output: to3(input, 1),
        stride: to3(&stride, 1),
        dilation: to3(&dilation, 1),
        pad_begin: to3(&begin, 0),
        pad_end: to3(&end, 0),
    })
}

/// LRN's attributes: x / (bias + alpha / size · Σ x²)^beta over channels
/// [c − before, c + after].
pub struct Lrn {
    /// Channels in the sum.
    pub size: usize,
    /// Scale of the sum of squares.
    pub alpha: f64,
    /// Exponent.
    pub beta: f64,
    /// Offset.
    pub bias: f64,
    /// Channels summed before and after the centre.
    pub before: usize,
    /// See `before`.
    pub after: usize,
}

impl Lrn {
    /// The attributes `size`, `alpha`, `beta`, `bias` with ONNX's defaults.
    pub fn from_attrs(attrs: &Attrs<'_>) -> Result<Lrn> {
        let size = attrs.int_opt("size")?.ok_or_else(|| KernelError::attr("size", "is required"))?;
        if size < 1 {
            return Err(KernelError::attr("size", format!("{size} is not positive")));
        }
        let size = size as usize;
        Ok(Lrn {
            size,
            alpha: f64::from(attrs.float("alpha", 1e-4)?),
            beta: f64::from(attrs.float("beta", 0.75)?),
            bias: f64::from(attrs.float("bias", 1.0)?),
            before: (size - 1) / 2,
            after: size / 2,
        })
    }
}
