//! The positions a Slice, a `SplitPart` and a `SplitWindow` read along their axes.

use super::layout::strides;
use crate::error::{KernelError, Result};

/// Start index and length of `start..end` by `step` on an axis of size `dim`, clamped
/// as ONNX specifies (in i128, so extreme starts, ends and steps cannot overflow).
fn bounds(start: i64, end: i64, step: i64, dim: usize) -> (usize, usize) {
    let (dim, step) = (dim as i128, i128::from(step));
    let resolve = |v: i64| {
        if v < 0 {
            i128::from(v) + dim
        } else {
            i128::from(v)
        }
    };
    let (s, e) = (resolve(start), resolve(end));
    let (s, len) = if step > 0 {
        let (s, e) = (s.clamp(0, dim), e.clamp(0, dim));
        (s, if e > s { (e - s - 1) / step + 1 } else { 0 })
    } else {
        let (s, e) = (s.max(0).min(dim - 1), e.max(-1).min(dim - 1));
        (s, if s > e { (s - e - 1) / -step + 1 } else { 0 })
    };
    (s.max(0) as usize, len as usize)
}

/// The positions along its axis of `SplitPart` part `index` of `parts` of an axis of
/// length `len`: the `array_split` part (the first `len % parts` parts one longer).
pub(crate) fn split_part_range(len: usize, index: i64, parts: i64) -> Result<std::ops::Range<usize>> {
    if parts < 1 || index < 0 || index >= parts || parts as usize > len.max(1) {
        return Err(KernelError::attr("parts", format!("part {index} of {parts} does not fit length {len}")));
    }
    let (index, parts) = (index as usize, parts as usize);
    let part_len = |i: usize| len / parts + usize::from(i < len % parts);
    let start = (0..index).map(part_len).sum::<usize>();
    Ok(start..start + part_len(index))
}

/// The positions `begin..end` of a `SplitWindow` along an axis of length `len`, checked
/// to lie inside it.
pub(crate) fn window_range(len: usize, begin: i64, end: i64) -> Result<std::ops::Range<usize>> {
    match (usize::try_from(begin), usize::try_from(end)) {
        (Ok(b), Ok(e)) if b <= e && e <= len => Ok(b..e),
        _ => Err(KernelError::attr("end", format!("window {begin}..{end} does not fit length {len}"))),
    }
}

/// The strided view (base offset, shape, strides) of data of shape `dims` that a Slice
/// with these per-axis `starts`, `ends`, `steps` on (non-negative, distinct) `axes` reads.
pub(crate) fn slice_view(
    dims: &[usize],
    starts: &[i64],
    ends: &[i64],
    axes: &[usize],
    steps: &[i64],
) -> Result<(isize, Vec<usize>, Vec<isize>)> {
    if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
        return Err(KernelError::invalid("starts, ends, axes and steps differ in length"));
    }
    let own = strides(dims);
    let (mut shape, mut view, mut base) = (dims.to_vec(), own.clone(), 0isize);
    for (k, &axis) in axes.iter().enumerate() {
        if steps[k] == 0 {
            return Err(KernelError::invalid(format!("step 0 on axis {axis}")));
        }
        let (start, len) = bounds(starts[k], ends[k], steps[k], dims[axis]);
        shape[axis] = len;
        if len > 0 {
            base += start as isize * own[axis];
        }
        // With two or more elements |step| < dim, so the product cannot overflow.
        if len > 1 {
            view[axis] = own[axis] * steps[k] as isize;
        }
    }
    Ok((base, shape, view))
}
