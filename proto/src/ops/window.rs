//! Sliding-window geometry of convolution and pooling, the one statement both sides of
//! the contract read: the `kernel_shape`, `strides`, `dilations`, `pads` and `auto_pad`
//! attributes (and `ConvTranspose`'s `output_padding` and `output_shape`), the padding
//! they resolve to for an input size and the output size they give. The compiler's shape
//! rules take the output size; the runtime's kernels take the whole [`Window`].

use super::util::{fmt_shape, wide_to_dim};
use super::{ShapeError, ShapeResult};
use crate::types::{AttrError, Attrs};

/// Largest value accepted in a window attribute, so that a kernel's window arithmetic
/// (positions in `usize`) cannot overflow.
pub const MAX_WINDOW: i64 = i32::MAX as i64;

/// How padding is chosen (`auto_pad`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AutoPad {
    /// Explicit `pads`.
    NotSet,
    /// Pad so that the output is `ceil(input / stride)`, the larger half at the end.
    SameUpper,
    /// Same, the larger half at the beginning.
    SameLower,
    /// No padding.
    Valid,
}

impl AutoPad {
    fn parse(attrs: &Attrs) -> ShapeResult<AutoPad> {
        match attrs.string("auto_pad", "NOTSET".into())?.as_str() {
            // Some exporters write an empty string for the default.
            "NOTSET" | "" => Ok(AutoPad::NotSet),
            "SAME_UPPER" => Ok(AutoPad::SameUpper),
            "SAME_LOWER" => Ok(AutoPad::SameLower),
            "VALID" => Ok(AutoPad::Valid),
            other => Err(ShapeError::UnsupportedAttr { name: "auto_pad".into(), value: other.into() }),
        }
    }

    /// `total` padding split into (begin, end): `SAME_UPPER` puts the smaller half first,
    /// every other mode the larger.
    fn split(self, total: i128) -> (i128, i128) {
        let half = total / 2;
        if self == AutoPad::SameUpper {
            (half, total - half)
        } else {
            (total - half, half)
        }
    }
}

/// The window attributes of a node with `n` spatial axes, before an input size resolves
/// the implicit (`SAME_*`) padding.
struct Attributes {
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    /// Explicit padding at the beginning of each spatial axis (0 unless `NOTSET`).
    pads_begin: Vec<usize>,
    /// Explicit padding at the end of each spatial axis.
    pads_end: Vec<usize>,
    auto_pad: AutoPad,
}

impl Attributes {
    /// Reads the window attributes; the kernel is `kernel_shape` when `weight` is `None`
    /// (pooling), else the weight's spatial shape, which `kernel_shape` must then equal.
    fn parse(attrs: &Attrs, n: usize, weight: Option<&[usize]>) -> ShapeResult<Attributes> {
        let kernel = match (attrs.ints_opt("kernel_shape")?, weight) {
            (Some(k), weight) => {
                let k = sizes(&k, n, "kernel_shape", 1)?;
                if let Some(w) = weight.filter(|w| *w != k.as_slice()) {
                    return Err(ShapeError::Invalid(format!(
                        "kernel_shape {} differs from the weight's {}",
                        fmt_shape(&k),
                        fmt_shape(w)
                    )));
                }
                k
            }
            (None, Some(w)) if w.len() == n && !w.contains(&0) => w.to_vec(),
            (None, Some(w)) => {
                return Err(ShapeError::Invalid(format!(
                    "weight kernel {} does not fit {n} spatial axes",
                    fmt_shape(w)
                )))
            }
            (None, None) => return Err(AttrError::Missing("kernel_shape".into()).into()),
        };
        let list = |name: &str, default: usize| -> ShapeResult<Vec<usize>> {
            match attrs.ints_opt(name)? {
                Some(v) => sizes(&v, n, name, 1),
                None => Ok(vec![default; n]),
            }
        };
        let (strides, dilations) = (list("strides", 1)?, list("dilations", 1)?);
        let auto_pad = AutoPad::parse(attrs)?;
        let (pads_begin, pads_end) = match attrs.ints_opt("pads")? {
            Some(p) if auto_pad == AutoPad::NotSet => {
                let p = sizes(&p, 2 * n, "pads", 0)?;
                (p[..n].to_vec(), p[n..].to_vec())
            }
            _ => (vec![0; n], vec![0; n]),
        };
        Ok(Attributes { kernel, strides, dilations, pads_begin, pads_end, auto_pad })
    }

    /// The extent of the dilated kernel along `axis`.
    fn span(&self, axis: usize) -> i128 {
        (self.kernel[axis] as i128 - 1) * self.dilations[axis] as i128 + 1
    }
}

/// A window op's geometry over its spatial axes for one input size: a `Conv`, a pool, or
/// a `ConvTranspose` seen as the forward convolution it is the adjoint of (its `input`
/// is the `ConvTranspose`'s output, its `output` the `ConvTranspose`'s input). Output
/// position `o` at kernel offset `k` reads input position
/// `o · stride + k · dilation − pad_begin` on each axis, or padding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Input size per spatial axis.
    pub input: Vec<usize>,
    /// Output size per spatial axis.
    pub output: Vec<usize>,
    /// Kernel size per spatial axis.
    pub kernel: Vec<usize>,
    /// Stride per spatial axis.
    pub strides: Vec<usize>,
    /// Dilation per spatial axis.
    pub dilations: Vec<usize>,
    /// Padding at the beginning of each spatial axis (explicit, or resolved from `auto_pad`).
    pub pads_begin: Vec<usize>,
    /// Padding at the end of each spatial axis.
    pub pads_end: Vec<usize>,
}

impl Window {
    /// The window of a `Conv` (or its gradients) over spatial input `input` with the
    /// weight's spatial shape `kernel`.
    pub fn conv(attrs: &Attrs, input: &[usize], kernel: &[usize]) -> ShapeResult<Window> {
        let a = Attributes::parse(attrs, input.len(), Some(kernel))?;
        Window::forward(a, input, false)
    }

    /// The window of a pool (or its gradient) over X `x` ([N, C, spatial...]) from
    /// `kernel_shape`, `ceil_mode` and the padding attributes.
    pub fn pool(attrs: &Attrs, x: &[usize]) -> ShapeResult<Window> {
        if x.len() < 3 {
            return Err(ShapeError::Invalid(format!("pooled input {} is not [N, C, spatial...]", fmt_shape(x))));
        }
        let a = Attributes::parse(attrs, x.len() - 2, None)?;
        Window::forward(a, &x[2..], attrs.int("ceil_mode", 0)? != 0)
    }

    /// The window of a `ConvTranspose` over spatial input `input` with the weight's
    /// spatial shape `kernel`, seen from the forward convolution (see [`Window`]). Its
    /// output size is `output_shape` (spatial, or the full shape), `input · stride` for
    /// `SAME_*`, or `stride · (input − 1) + output_padding + kernel extent − pads`; the
    /// padding of the first two is the difference to that full size, split by `auto_pad`.
    pub fn conv_transpose(attrs: &Attrs, input: &[usize], kernel: &[usize]) -> ShapeResult<Window> {
        let n = input.len();
        let a = Attributes::parse(attrs, n, Some(kernel))?;
        let output_padding = match attrs.ints_opt("output_padding")? {
            Some(p) => sizes(&p, n, "output_padding", 0)?,
            None => vec![0; n],
        };
        let output_shape = match attrs.ints_opt("output_shape")? {
            // Some exporters give the full output shape instead of the spatial part.
            Some(dims) if dims.len() == n + 2 => Some(sizes(&dims[2..], n, "output_shape", 0)?),
            Some(dims) => Some(sizes(&dims, n, "output_shape", 0)?),
            None => None,
        };
        let (mut pads_begin, mut pads_end, mut output) = (a.pads_begin.clone(), a.pads_end.clone(), vec![0; n]);
        for d in 0..n {
            let (size, stride) = (input[d] as i128, a.strides[d] as i128);
            let full = stride * (size - 1) + output_padding[d] as i128 + a.span(d);
            let target = match (&output_shape, a.auto_pad) {
                (Some(s), _) => Some(s[d] as i128),
                (None, AutoPad::SameUpper | AutoPad::SameLower) => Some(size * stride),
                (None, AutoPad::NotSet | AutoPad::Valid) => None,
            };
            let out = match target {
                Some(out) if out > full => {
                    return Err(ShapeError::Invalid(format!(
                        "output size {out} on spatial axis {d} is beyond the full size {full}"
                    )))
                }
                Some(out) => {
                    let (begin, end) = a.auto_pad.split(full - out);
                    (pads_begin[d], pads_end[d]) = (wide_to_dim(begin)?, wide_to_dim(end)?);
                    out
                }
                None => full - pads_begin[d] as i128 - pads_end[d] as i128,
            };
            if out < 1 {
                return Err(ShapeError::Invalid(format!("output size {out} on spatial axis {d} is not positive")));
            }
            output[d] = wide_to_dim(out)?;
        }
        Ok(Window {
            input: output,
            output: input.to_vec(),
            kernel: a.kernel,
            strides: a.strides,
            dilations: a.dilations,
            pads_begin,
            pads_end,
        })
    }

    /// The input's spatial size with its pads, when they begin and end differently on some
    /// axis (a backend that pads symmetrically then works on a padded copy); `None` when
    /// they are symmetric.
    pub fn asymmetric_padded_input(&self) -> Option<Vec<usize>> {
        (self.pads_begin != self.pads_end).then(|| {
            let padded = self.input.iter().zip(&self.pads_begin).zip(&self.pads_end);
            padded.map(|((&size, &begin), &end)| size + begin + end).collect()
        })
    }

    /// This window with the end pads of a forward convolution from `input` to exactly
    /// `output`: on each axis the begin pad where that gives `output` (symmetric pads need
    /// no padded copy), else the least end pad that does (its last window ends at the last
    /// position it reads; padding beyond, shorter than a stride, is never read). The
    /// adjoint convolution of a `ConvTranspose` ([`Window::conv_transpose`]) is this
    /// window's. An error when no end pad gives `output` (output padding of a stride or more).
    pub fn with_tight_end_pads(self) -> ShapeResult<Window> {
        let mut pads_end = Vec::with_capacity(self.input.len());
        for d in 0..self.input.len() {
            let (stride, begin) = (self.strides[d] as i128, self.pads_begin[d] as i128);
            let span = (self.kernel[d] as i128 - 1) * self.dilations[d] as i128 + 1;
            let read = (self.output[d] as i128 - 1) * stride + span;
            // End pads in [least, least + stride) give `output` windows.
            let least = read - self.input[d] as i128 - begin;
            if least + stride <= 0 {
                return Err(ShapeError::Invalid(format!(
                    "output size {} on spatial axis {d} is a stride or more beyond the {read} positions its {} inputs write from pad {begin}",
                    self.input[d], self.output[d]
                )));
            }
            let end = if (least..least + stride).contains(&begin) { begin } else { least.max(0) };
            pads_end.push(wide_to_dim(end)?);
        }
        Ok(Window { pads_end, ..self })
    }

    /// The window over `input` with the attributes `a`. `ceil_mode` rounds the number of
    /// window positions up, dropping a last window that would start in the end padding.
    fn forward(a: Attributes, input: &[usize], ceil_mode: bool) -> ShapeResult<Window> {
        let n = input.len();
        let (mut pads_begin, mut pads_end, mut output) = (a.pads_begin.clone(), a.pads_end.clone(), vec![0; n]);
        for d in 0..n {
            let (size, stride, span) = (input[d] as i128, a.strides[d] as i128, a.span(d));
            let out = match a.auto_pad {
                AutoPad::SameUpper | AutoPad::SameLower => {
                    let out = (size + stride - 1) / stride;
                    let total = ((out.max(1) - 1) * stride + span - size).max(0);
                    let (begin, end) = a.auto_pad.split(total);
                    (pads_begin[d], pads_end[d]) = (wide_to_dim(begin)?, wide_to_dim(end)?);
                    out
                }
                AutoPad::Valid | AutoPad::NotSet => {
                    let begin = pads_begin[d] as i128;
                    let padded = size + begin + pads_end[d] as i128;
                    if padded < span {
                        return Err(ShapeError::Invalid(format!(
                            "kernel extent {span} is larger than padded input {padded} on spatial axis {d}"
                        )));
                    }
                    let positions = padded - span;
                    if ceil_mode {
                        let out = (positions + stride - 1) / stride + 1;
                        if (out - 1) * stride >= size + begin {
                            out - 1
                        } else {
                            out
                        }
                    } else {
                        positions / stride + 1
                    }
                }
            };
            output[d] = wide_to_dim(out)?;
        }
        Ok(Window {
            input: input.to_vec(),
            output,
            kernel: a.kernel,
            strides: a.strides,
            dilations: a.dilations,
            pads_begin,
            pads_end,
        })
    }
}

/// A list attribute of `n` values in `[min, MAX_WINDOW]`.
fn sizes(values: &[i64], n: usize, name: &str, min: i64) -> ShapeResult<Vec<usize>> {
    if values.len() != n {
        return Err(length_error(name, values.len(), n));
    }
    if values.iter().any(|v| !(min..=MAX_WINDOW).contains(v)) {
        return Err(ShapeError::UnsupportedAttr { name: name.into(), value: format!("{values:?}") });
    }
    Ok(values.iter().map(|&v| v as usize).collect())
}

/// The error for a list attribute of the wrong length.
pub(super) fn length_error(name: &str, got: usize, expected: usize) -> ShapeError {
    ShapeError::Invalid(format!("attribute '{name}' has {got} values, expected {expected}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Attr;

    fn ints(name: &str, v: &[i64]) -> Attrs {
        Attrs::new().with(name, Attr::Ints(v.to_vec()))
    }

    fn text(attrs: Attrs, name: &str, v: &str) -> Attrs {
        attrs.with(name, Attr::String(v.into()))
    }

    #[test]
    fn same_padding_is_resolved_for_the_input_with_the_larger_half_by_mode() {
        let upper = text(ints("strides", &[2]), "auto_pad", "SAME_UPPER");
        let w = Window::conv(&upper, &[8], &[4]).unwrap();
        // 4 outputs cover (4 − 1)·2 + 4 = 10 positions: 2 of padding, 1 and 1.
        assert_eq!((w.output, w.pads_begin, w.pads_end), (vec![4], vec![1], vec![1]));
        let w = Window::conv(&upper, &[7], &[4]).unwrap();
        assert_eq!((w.output, w.pads_begin, w.pads_end), (vec![4], vec![1], vec![2]));
        let lower = text(ints("strides", &[2]), "auto_pad", "SAME_LOWER");
        let w = Window::conv(&lower, &[7], &[4]).unwrap();
        assert_eq!((w.output, w.pads_begin, w.pads_end), (vec![4], vec![2], vec![1]));
        // VALID ignores explicit pads.
        let valid = text(ints("pads", &[3, 3]), "auto_pad", "VALID");
        assert_eq!(Window::conv(&valid, &[7], &[4]).unwrap().pads_begin, vec![0]);
    }

    #[test]
    fn ceil_mode_drops_a_window_that_starts_in_the_end_padding() {
        let pool = ints("kernel_shape", &[2]).with("strides", Attr::Ints(vec![2])).with("ceil_mode", Attr::Int(1));
        assert_eq!(Window::pool(&pool, &[1, 1, 5]).unwrap().output, vec![3]);
        let padded = pool.clone().with("pads", Attr::Ints(vec![1, 1]));
        // Windows at 0, 2, 4 of the padded 7; one at 6 would start in the end padding.
        assert_eq!(Window::pool(&padded, &[1, 1, 5]).unwrap().output, vec![3]);
        assert_eq!(Window::pool(&ints("kernel_shape", &[2]), &[1, 1, 5]).unwrap().output, vec![4]);
    }

    #[test]
    fn a_transposed_window_is_the_forward_window_from_its_output() {
        let up = ints("strides", &[2]).with("pads", Attr::Ints(vec![1, 0])).with("output_padding", Attr::Ints(vec![1]));
        let w = Window::conv_transpose(&up, &[5], &[3]).unwrap();
        // Full size 2·4 + 1 + 3 = 12, 1 cropped before.
        assert_eq!((w.input, w.output, w.pads_begin, w.pads_end), (vec![11], vec![5], vec![1], vec![0]));
        // output_shape crops the difference to the full size, the larger half first.
        let shaped = ints("strides", &[2]).with("output_shape", Attr::Ints(vec![1, 1, 8]));
        let w = Window::conv_transpose(&shaped, &[5], &[3]).unwrap();
        assert_eq!((w.input, w.pads_begin, w.pads_end), (vec![8], vec![2], vec![1]));
        let same = text(ints("strides", &[2]), "auto_pad", "SAME_UPPER");
        let w = Window::conv_transpose(&same, &[5], &[3]).unwrap();
        assert_eq!((w.input, w.pads_begin, w.pads_end), (vec![10], vec![0], vec![1]));
    }

    #[test]
    fn tight_end_pads_give_the_output_and_prefer_the_begin_pad() {
        let tight = |w: Window| {
            let w = w.with_tight_end_pads().unwrap();
            (w.pads_begin, w.pads_end)
        };
        let up = |pads: &[i64], output_padding: i64| {
            ints("strides", &[2])
                .with("pads", Attr::Ints(pads.to_vec()))
                .with("output_padding", Attr::Ints(vec![output_padding]))
        };
        // 5 inputs write 2·4 + 3 = 11 positions; the output padding (1) is never read.
        assert_eq!(tight(Window::conv_transpose(&up(&[0, 0], 1), &[5], &[3]).unwrap()), (vec![0], vec![0]));
        // Begin pad 1: an end pad of 0 or 1 gives 5 outputs; 1 is symmetric.
        assert_eq!(tight(Window::conv_transpose(&up(&[1, 1], 1), &[5], &[3]).unwrap()), (vec![1], vec![1]));
        assert_eq!(tight(Window::conv_transpose(&up(&[2, 0], 1), &[5], &[3]).unwrap()), (vec![2], vec![0]));
        // A forward window keeps its output.
        let conv = Window::conv(&ints("strides", &[2]).with("pads", Attr::Ints(vec![1, 3])), &[8], &[3]).unwrap();
        let tightened = conv.clone().with_tight_end_pads().unwrap();
        assert_eq!((tightened.output, tightened.pads_end), (conv.output, vec![2]));
        // Output padding of a stride or more leaves outputs no window covers.
        let error = Window::conv_transpose(&up(&[0, 0], 4), &[5], &[3]).unwrap().with_tight_end_pads().unwrap_err();
        assert_eq!(
            error.to_string(),
            "output size 15 on spatial axis 0 is a stride or more beyond the 11 positions its 5 inputs write from pad 0"
        );
    }

    #[test]
    fn windows_out_of_range_are_refused() {
        let error = |r: ShapeResult<Window>| r.unwrap_err().to_string();
        assert_eq!(
            error(Window::conv(&ints("strides", &[MAX_WINDOW + 1]), &[8], &[3])),
            "unsupported value [2147483648] for attribute 'strides'"
        );
        assert_eq!(
            error(Window::conv(&ints("pads", &[-1, 0]), &[8], &[3])),
            "unsupported value [-1, 0] for attribute 'pads'"
        );
        assert_eq!(
            error(Window::conv(&ints("kernel_shape", &[2]), &[8], &[3])),
            "kernel_shape [2] differs from the weight's [3]"
        );
        assert_eq!(error(Window::pool(&Attrs::new(), &[1, 1, 8])), "missing required attribute 'kernel_shape'");
        assert_eq!(
            error(Window::conv_transpose(&ints("output_shape", &[20]), &[5], &[3])),
            "output size 20 on spatial axis 0 is beyond the full size 7"
        );
        assert_eq!(
            error(Window::conv_transpose(&ints("pads", &[4, 3]), &[5], &[3])),
            "output size 0 on spatial axis 0 is not positive"
        );
    }
}
