//! The axis split a Softmax, LogSoftmax and their gradients normalize over.

use super::layout::{norm_axis, split_at_axis};
use crate::error::Result;
use crate::tensor::numel;

/// `shape` viewed as [outer, n, inner] for a softmax at `axis`: along that axis, or with
/// `coerce` (opset < 13) over the input coerced to 2-D at `axis` (inner is 1).
pub(crate) fn softmax_layout(shape: &[usize], axis: i64, coerce: bool) -> Result<(usize, usize, usize)> {
    let axis = norm_axis(axis, shape.len(), "axis")?;
    Ok(if coerce { (numel(&shape[..axis]), numel(&shape[axis..]), 1) } else { split_at_axis(shape, axis) })
}
