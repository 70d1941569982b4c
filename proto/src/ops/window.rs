//! Sliding-window geometry shared by convolution and pooling: the
//! `kernel_shape`, `strides`, `dilations`, `pads` and `auto_pad` attributes
//! and the output size they give.

use super::util::{fmt_shape, to_dim, wide_to_dim};
use super::{Node, ShapeError, ShapeResult};
use crate::types::Attrs;

/// How padding is chosen (`auto_pad`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum AutoPad {
    /// Explicit `pads`.
    NotSet,
    /// Pad so that the output is `ceil(input / stride)`, extra at the end.
    SameUpper,
    /// Same, extra padding at the beginning.
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

    /// True for the two SAME modes.
    pub(super) fn is_same(self) -> bool {
        matches!(self, AutoPad::SameUpper | AutoPad::SameLower)
    }
}

/// The window attributes of a node with `n` spatial dimensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Window {
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    /// Padding at the beginning of each spatial axis.
    pub pads_begin: Vec<usize>,
    /// Padding at the end of each spatial axis.
    pub pads_end: Vec<usize>,
    pub auto_pad: AutoPad,
}

impl Window {
    /// Reads the window attributes; `kernel` is `kernel_shape` when absent
    /// (convolutions take it from the weight; pooling requires the attribute).
    pub(super) fn parse(node: &Node<'_>, n: usize, kernel: Option<&[usize]>) -> ShapeResult<Window> {
        let attrs = node.attrs;
        let kernel = match (attrs.ints_opt("kernel_shape")?, kernel) {
            (Some(k), weight) => {
                let k = positive_list(&k, n, "kernel_shape")?;
                if let Some(w) = weight.filter(|w| *w != k.as_slice()) {
                    return Err(ShapeError::Invalid(format!(
                        "kernel_shape {} differs from the weight's {}",
                        fmt_shape(&k),
                        fmt_shape(w)
                    )));
                }
                k
            }
            (None, Some(w)) => w.to_vec(),
            (None, None) => return Err(crate::types::AttrError::Missing("kernel_shape".into()).into()),
        };
        let strides = match attrs.ints_opt("strides")? {
            Some(s) => positive_list(&s, n, "strides")?,
            None => vec![1; n],
        };
        let dilations = match attrs.ints_opt("dilations")? {
            Some(d) => positive_list(&d, n, "dilations")?,
            None => vec![1; n],
        };
        let auto_pad = AutoPad::parse(attrs)?;
        let (pads_begin, pads_end) = match attrs.ints_opt("pads")? {
            Some(p) if auto_pad == AutoPad::NotSet => {
                if p.len() != 2 * n {
                    return Err(length_error("pads", p.len(), 2 * n));
                }
                let p = p.iter().map(|&v| to_dim(v, "pads")).collect::<ShapeResult<Vec<_>>>()?;
                (p[..n].to_vec(), p[n..].to_vec())
            }
            _ => (vec![0; n], vec![0; n]),
        };
        Ok(Window { kernel, strides, dilations, pads_begin, pads_end, auto_pad })
    }

    /// The extent of the dilated kernel along `axis`.
    pub(super) fn effective_kernel(&self, axis: usize) -> ShapeResult<usize> {
        let k = self.kernel[axis] as i128;
        wide_to_dim((k - 1) * self.dilations[axis] as i128 + 1)
    }

    /// Output sizes of a convolution or pooling over `input` (spatial dims).
    /// `ceil_mode` rounds the number of window positions up, dropping a last
    /// window that would start in the end padding.
    pub(super) fn output(&self, input: &[usize], ceil_mode: bool) -> ShapeResult<Vec<usize>> {
        (0..input.len())
            .map(|axis| {
                let size = input[axis] as i128;
                let stride = self.strides[axis] as i128;
                let kernel = self.effective_kernel(axis)? as i128;
                let out = match self.auto_pad {
                    AutoPad::SameUpper | AutoPad::SameLower => (size + stride - 1) / stride,
                    AutoPad::Valid | AutoPad::NotSet => {
                        let begin = self.pads_begin[axis] as i128;
                        let padded = size + begin + self.pads_end[axis] as i128;
                        if padded < kernel {
                            return Err(ShapeError::Invalid(format!(
                                "kernel extent {kernel} is larger than padded input {padded} on spatial axis {axis}"
                            )));
                        }
                        let positions = padded - kernel;
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
                wide_to_dim(out)
            })
            .collect()
    }
}

/// A list attribute of `n` positive values.
fn positive_list(values: &[i64], n: usize, name: &str) -> ShapeResult<Vec<usize>> {
    if values.len() != n {
        return Err(length_error(name, values.len(), n));
    }
    values
        .iter()
        .map(|&v| match usize::try_from(v) {
            Ok(d) if d > 0 => Ok(d),
            _ => Err(ShapeError::UnsupportedAttr { name: name.into(), value: format!("{values:?}") }),
        })
        .collect()
}

/// The error for a list attribute of the wrong length.
pub(super) fn length_error(name: &str, got: usize, expected: usize) -> ShapeError {
    ShapeError::Invalid(format!("attribute '{name}' has {got} values, expected {expected}"))
}
