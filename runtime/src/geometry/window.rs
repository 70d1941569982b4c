//! Sliding-window geometry of both backends' Conv, ConvTranspose and pools: the
//! contract's window rule (`lms_proto::ops::window`, the one the compiler's shape rules
//! read) with 1-D and 2-D windows padded to 3-D (leading size-1 axes), and LRN's window
//! across channels.

use crate::attrs::Attrs;
use crate::error::{KernelError, Result};
use lms_proto::ops::window::Window as ContractWindow;

/// Geometry of a window op over 1 to 3 spatial axes, stored as 3-D: the contract's
/// [`lms_proto::ops::window::Window`] with leading size-1 axes.
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
fn to3(v: &[usize], fill: usize) -> [usize; 3] {
    let mut out = [fill; 3];
    out[3 - v.len()..].copy_from_slice(v);
    out
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
    /// The contract's window padded to 3-D; 1 to 3 spatial axes.
    fn padded(w: ContractWindow) -> Result<Window> {
        let rank = w.input.len();
        check_spatial_rank(rank, "window op")?;
        Ok(Window {
            rank,
            input: to3(&w.input, 1),
            kernel: to3(&w.kernel, 1),
            output: to3(&w.output, 1),
            stride: to3(&w.strides, 1),
            dilation: to3(&w.dilations, 1),
            pad_begin: to3(&w.pads_begin, 0),
            pad_end: to3(&w.pads_end, 0),
        })
    }

    /// The window of a Conv (or its gradients) over spatial input `input` with the
    /// weight's spatial shape `kernel` ([`ContractWindow::conv`]).
    pub fn conv(attrs: &Attrs<'_>, input: &[usize], kernel: &[usize]) -> Result<Window> {
        Window::padded(ContractWindow::conv(&attrs.contract(), input, kernel)?)
    }

    /// The window of a pool over an input of shape `x` (`[N, C, spatial...]`)
    /// ([`ContractWindow::pool`]).
    pub fn pool(attrs: &Attrs<'_>, x: &[usize]) -> Result<Window> {
        Window::padded(ContractWindow::pool(&attrs.contract(), x)?)
    }

    /// The window of a ConvTranspose over spatial input `input` with kernel `kernel`, seen
    /// from the equivalent forward conv: its "input" is this op's output and its "output"
    /// is this op's input, so `Window::source` maps input to output
    /// ([`ContractWindow::conv_transpose`]).
    pub fn conv_transpose(attrs: &Attrs<'_>, input: &[usize], kernel: &[usize]) -> Result<Window> {
        Window::padded(ContractWindow::conv_transpose(&attrs.contract(), input, kernel)?)
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
