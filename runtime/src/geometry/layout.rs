//! Shapes, strides, axes and numpy broadcasting: the layout geometry both backends read.

use crate::error::{KernelError, Result};

/// Row-major strides of `shape`, in elements.
pub(crate) fn strides(shape: &[usize]) -> Vec<isize> {
    let mut s = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for (d, &n) in shape.iter().enumerate().rev() {
        s[d] = acc;
        acc *= n as isize;
    }
    s
}

/// An axis in `[-rank, rank)` made non-negative; `what` names it in errors.
pub(crate) fn norm_axis(axis: i64, rank: usize, what: &str) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(KernelError::invalid(format!("{what} {axis} is out of range for rank {rank}")));
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}

/// Axes made non-negative and checked for repeats.
pub(crate) fn norm_axes(axes: &[i64], rank: usize, what: &str) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let a = norm_axis(a, rank, what)?;
        if out.contains(&a) {
            return Err(KernelError::invalid(format!("{what} {a} is repeated")));
        }
        out.push(a);
    }
    Ok(out)
}

/// A dimension read from a tensor or attribute, checked non-negative.
pub(crate) fn to_dim(v: i64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| KernelError::invalid(format!("{what} {v} is negative")))
}

/// Number of elements of a shape read from data, `None` if it overflows.
pub(crate) fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// The numpy broadcast of two shapes, or an error naming `what`.
pub(crate) fn broadcast_shapes(a: &[usize], b: &[usize], what: &str) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let dim = |s: &[usize], i: usize| {
        if i + s.len() < rank {
            1
        } else {
            s[i + s.len() - rank]
        }
    };
    (0..rank)
        .map(|i| match (dim(a, i), dim(b, i)) {
            (x, y) if x == y || y == 1 => Ok(x),
            (1, y) => Ok(y),
            _ => Err(KernelError::shape(what, format!("shapes {a:?} and {b:?} do not broadcast"))),
        })
        .collect()
}

/// Strides that read `shape` as if broadcast to `out` (0 on broadcast axes).
pub(crate) fn broadcast_strides(shape: &[usize], out: &[usize], what: &str) -> Result<Vec<isize>> {
    if shape.len() > out.len() {
        return Err(KernelError::shape(what, format!("shape {shape:?} does not broadcast to {out:?}")));
    }
    let lead = out.len() - shape.len();
    let own = strides(shape);
    let mut s = vec![0isize; out.len()];
    for (i, (&d, &st)) in shape.iter().zip(&own).enumerate() {
        if d == out[lead + i] {
            s[lead + i] = if d == 1 { 0 } else { st };
        } else if d != 1 {
            return Err(KernelError::shape(what, format!("shape {shape:?} does not broadcast to {out:?}")));
        }
    }
    Ok(s)
}

/// Product of the dimensions before `axis`, the dimension at `axis`, and after it.
pub(crate) fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
    let outer = shape[..axis].iter().product();
    let inner = shape[axis + 1..].iter().product();
    (outer, shape[axis], inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_rules() {
        assert_eq!(broadcast_shapes(&[2, 1, 4], &[3, 1], "x").unwrap(), vec![2, 3, 4]);
        assert_eq!(broadcast_shapes(&[], &[5], "x").unwrap(), vec![5]);
        assert!(broadcast_shapes(&[2, 3], &[4], "x").is_err());
        assert_eq!(broadcast_strides(&[3, 1], &[2, 3, 4], "b").unwrap(), vec![0, 1, 0]);
        assert!(broadcast_strides(&[3], &[2, 4], "b").is_err());
    }

    #[test]
    fn axes_are_normalized_and_checked() {
        assert_eq!(norm_axis(-1, 3, "axis").unwrap(), 2);
        assert!(norm_axis(3, 3, "axis").is_err());
        assert!(norm_axes(&[0, -3], 3, "axes").is_err());
    }
}
