//! Shapes, strides, axes and numpy broadcasting shared by the kernels.

use crate::error::{KernelError, Result};

/// Row-major strides of `shape`, in elements.
pub fn strides(shape: &[usize]) -> Vec<isize> {
    let mut s = vec![0isize; shape.len()];
    let mut acc = 1isize;
    for (d, &n) in shape.iter().enumerate().rev() {
        s[d] = acc;
        acc *= n as isize;
    }
    s
}

/// An axis in `[-rank, rank)` made non-negative; `what` names it in errors.
pub fn norm_axis(axis: i64, rank: usize, what: &str) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(KernelError::invalid(format!("{what} {axis} is out of range for rank {rank}")));
    }
    Ok(if axis < 0 { axis + r } else { axis } as usize)
}

/// Axes made non-negative and checked for repeats.
pub fn norm_axes(axes: &[i64], rank: usize, what: &str) -> Result<Vec<usize>> {
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
pub fn to_dim(v: i64, what: &str) -> Result<usize> {
    usize::try_from(v).map_err(|_| KernelError::invalid(format!("{what} {v} is negative")))
}

/// Number of elements of a shape read from data, `None` if it overflows.
pub fn checked_numel(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// The numpy broadcast of two shapes, or an error naming `what`.
pub fn broadcast_shapes(a: &[usize], b: &[usize], what: &str) -> Result<Vec<usize>> {
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
pub fn broadcast_strides(shape: &[usize], out: &[usize], what: &str) -> Result<Vec<isize>> {
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

/// Walks `shape` row by row (the innermost axis), in row-major order.
///
/// For each row, `f(offsets, len, inner)` gets each operand's element offset at the
/// row start, the row length and each operand's stride along the row. A rank-0
/// shape is one row of length 1; an empty shape has no row.
pub fn for_each_row<const N: usize>(
    shape: &[usize],
    strides: [&[isize]; N],
    mut f: impl FnMut([isize; N], usize, [isize; N]),
) {
    if shape.contains(&0) {
        return;
    }
    let Some((&len, outer)) = shape.split_last() else {
        f([0; N], 1, [0; N]);
        return;
    };
    let inner = strides.map(|s| s[outer.len()]);
    let mut idx = vec![0usize; outer.len()];
    let mut off = [0isize; N];
    loop {
        f(off, len, inner);
        let mut d = outer.len();
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            idx[d] += 1;
            for k in 0..N {
                off[k] += strides[k][d];
            }
            if idx[d] < outer[d] {
                break;
            }
            for k in 0..N {
                off[k] -= strides[k][d] * outer[d] as isize;
            }
            idx[d] = 0;
        }
    }
}

/// Copies the elements of a strided view (`base`, `shape`, `strides`) of `data` into a new
/// row-major vector. The caller guarantees that the view lies inside `data`.
pub fn strided_copy<T: Copy>(data: &[T], base: isize, shape: &[usize], strides: &[isize]) -> Vec<T> {
    let mut out = Vec::with_capacity(shape.iter().product());
    for_each_row(shape, [strides], |[o], len, [s]| {
        let start = base + o;
        out.extend((0..len as isize).map(|j| data[(start + j * s) as usize]));
    });
    out
}

/// Writes the row-major elements of `src` into the strided view (`base`, `shape`,
/// `strides`) of `dst`: the inverse of [`strided_copy`]. The caller guarantees that the
/// view lies inside `dst` and that `src` has its element count.
pub fn strided_scatter<T: Copy>(src: &[T], dst: &mut [T], base: isize, shape: &[usize], strides: &[isize]) {
    let mut next = src.iter();
    for_each_row(shape, [strides], |[o], len, [s]| {
        for (j, v) in (0..len as isize).zip(next.by_ref()) {
            dst[(base + o + j * s) as usize] = *v;
        }
    });
}

/// Product of the dimensions before `axis`, the dimension at `axis`, and after it.
pub fn split_at_axis(shape: &[usize], axis: usize) -> (usize, usize, usize) {
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
    fn strided_copy_transposes_and_reverses() {
        let data: Vec<i32> = (0..6).collect();
        // transpose of [2, 3]
        assert_eq!(strided_copy(&data, 0, &[3, 2], &[1, 3]), vec![0, 3, 1, 4, 2, 5]);
        // reverse the last axis
        assert_eq!(strided_copy(&data, 2, &[2, 3], &[3, -1]), vec![2, 1, 0, 5, 4, 3]);
        assert_eq!(strided_copy(&data, 4, &[], &[]), vec![4]);
        assert!(strided_copy(&data, 0, &[0, 3], &[3, 1]).is_empty());
    }

    #[test]
    fn axes_are_normalized_and_checked() {
        assert_eq!(norm_axis(-1, 3, "axis").unwrap(), 2);
        assert!(norm_axis(3, 3, "axis").is_err());
        assert!(norm_axes(&[0, -3], 3, "axes").is_err());
    }
}
