//! Row-by-row walks and strided copies over host data, on the layout geometry of
//! `geometry::layout`.

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
