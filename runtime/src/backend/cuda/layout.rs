//! Index arithmetic handed to the strided kernels: an iteration shape and, per operand,
//! element strides and a base offset (`struct Layout` in `kernels/common.cuh`).

use crate::error::KernelError;
use cudarc::driver::DeviceRepr;

/// The most axes a kernel walks (after merging contiguous axes).
pub const MAX_RANK: usize = 8;
/// The most operands a layout describes (output first).
pub const MAX_OPERANDS: usize = 4;

/// A kernel's iteration space and its operands' strided views of it; matches
/// `struct Layout` in `kernels/common.cuh` field for field.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Number of axes used.
    pub rank: i64,
    /// Elements iterated: the product of `dims[..rank]`.
    pub count: i64,
    /// Axis sizes, outermost first.
    pub dims: [i64; MAX_RANK],
    /// Per operand, its element stride along each axis.
    pub strides: [[i64; MAX_RANK]; MAX_OPERANDS],
    /// Per operand, the element offset of index 0.
    pub offsets: [i64; MAX_OPERANDS],
}

// SAFETY: `Layout` is `repr(C)`, made only of `i64`s, and mirrors the CUDA struct.
unsafe impl DeviceRepr for Layout {}
// The CUDA struct: 2 + 8 + 4·8 + 4 i64s.
const _: () = assert!(std::mem::size_of::<Layout>() == 368);

/// Row-major strides of `shape`, in elements.
pub fn contiguous(shape: &[usize]) -> Vec<i64> {
    let mut strides = vec![0i64; shape.len()];
    let mut acc = 1i64;
    for (d, &n) in shape.iter().enumerate().rev() {
        strides[d] = acc;
        acc = acc.saturating_mul(n as i64);
    }
    strides
}

/// Strides that read `shape` broadcast to `out` (numpy rules, shapes right-aligned; 0 on
/// broadcast axes); `what` names the operand in errors.
pub fn broadcast(shape: &[usize], out: &[usize], what: &str) -> Result<Vec<i64>, KernelError> {
    let fail = || KernelError::shape(what, format!("shape {shape:?} does not broadcast to {out:?}"));
    if shape.len() > out.len() {
        return Err(fail());
    }
    let lead = out.len() - shape.len();
    let own = contiguous(shape);
    let mut strides = vec![0i64; out.len()];
    for (i, (&d, &s)) in shape.iter().zip(&own).enumerate() {
        match (d, out[lead + i]) {
            (d, o) if d == o => strides[lead + i] = if d == 1 { 0 } else { s },
            (1, _) => {}
            _ => return Err(fail()),
        }
    }
    Ok(strides)
}

/// An operand of a layout: its strides over the iteration shape and its base offset.
pub struct View<'a> {
    /// One stride per axis of the iteration shape.
    pub strides: &'a [i64],
    /// Element offset of index 0.
    pub offset: i64,
}

impl<'a> View<'a> {
    /// A view at offset 0.
    pub fn new(strides: &'a [i64]) -> View<'a> {
        View { strides, offset: 0 }
    }
}

impl Layout {
    /// The layout iterating `shape` with these operand views: axes of size 1 are dropped
    /// and neighbouring axes that every operand walks contiguously are merged, so the
    /// kernels do as little index arithmetic as possible.
    pub fn new(shape: &[usize], views: &[View<'_>]) -> Result<Layout, KernelError> {
        if views.len() > MAX_OPERANDS || views.iter().any(|v| v.strides.len() != shape.len()) {
            return Err(KernelError::invalid(format!(
                "a strided kernel takes at most {MAX_OPERANDS} operands of rank {}",
                shape.len()
            )));
        }
        // Axes kept, outermost first: (size, stride per operand).
        let mut axes: Vec<(i64, Vec<i64>)> = Vec::new();
        for (d, &n) in shape.iter().enumerate() {
            if n == 1 {
                continue;
            }
            let strides: Vec<i64> = views.iter().map(|v| v.strides[d]).collect();
            match axes.last_mut() {
                Some((outer, outer_strides))
                    if outer_strides.iter().zip(&strides).all(|(&o, &s)| o == s * n as i64) =>
                {
                    *outer *= n as i64;
                    *outer_strides = strides;
                }
                _ => axes.push((n as i64, strides)),
            }
        }
        if axes.len() > MAX_RANK {
            return Err(KernelError::unsupported(format!(
                "a strided view of {} axes that cannot merge (at most {MAX_RANK})",
                axes.len()
            )));
        }
        let mut layout = Layout {
            rank: axes.len() as i64,
            count: shape.iter().map(|&n| n as i64).product(),
            dims: [1; MAX_RANK],
            strides: [[0; MAX_RANK]; MAX_OPERANDS],
            offsets: [0; MAX_OPERANDS],
        };
        for (d, (n, strides)) in axes.iter().enumerate() {
            layout.dims[d] = *n;
            for (k, &s) in strides.iter().enumerate() {
                layout.strides[k][d] = s;
            }
        }
        for (k, v) in views.iter().enumerate() {
            layout.offsets[k] = v.offset;
        }
        Ok(layout)
    }

    /// The element offset of operand `k` at flat index `i` (the kernels' arithmetic).
    #[cfg(test)]
    pub fn offset(&self, k: usize, mut i: i64) -> i64 {
        let mut offset = self.offsets[k];
        for d in (0..self.rank as usize).rev() {
            offset += (i % self.dims[d]) * self.strides[k][d];
            i /= self.dims[d];
        }
        offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguous_operands_merge_into_one_axis() {
        let s = contiguous(&[2, 3, 4]);
        let l = Layout::new(&[2, 3, 4], &[View::new(&s), View::new(&s)]).unwrap();
        assert_eq!((l.rank, l.count, l.dims[0]), (1, 24, 24));
        assert_eq!(l.strides[1][0], 1);
    }

    #[test]
    fn broadcast_and_transpose_views_index_like_numpy() {
        // A [2,1,3] + B [4,1] broadcast to [2,4,3].
        let out = [2usize, 4, 3];
        let (so, sa, sb) =
            (contiguous(&out), broadcast(&[2, 1, 3], &out, "A").unwrap(), broadcast(&[4, 1], &out, "B").unwrap());
        assert_eq!(sa, vec![3, 0, 1]);
        assert_eq!(sb, vec![0, 1, 0]);
        let l = Layout::new(&out, &[View::new(&so), View::new(&sa), View::new(&sb)]).unwrap();
        for i in 0..24i64 {
            let (a0, a1, a2) = (i / 12, i / 3 % 4, i % 3);
            assert_eq!(l.offset(0, i), i);
            assert_eq!(l.offset(1, i), a0 * 3 + a2);
            assert_eq!(l.offset(2, i), a1);
        }
        // A transpose [2,3,4] -> perm [2,0,1] with an offset on the output.
        let src = contiguous(&[2, 3, 4]);
        let view = [src[2], src[0], src[1]];
        let dst = contiguous(&[4, 2, 3]);
        let l = Layout::new(&[4, 2, 3], &[View { strides: &dst, offset: 5 }, View::new(&view)]).unwrap();
        assert_eq!(l.offset(0, 7), 12);
        // Output index 7 is (1, 0, 1): source (0, 1, 1) = 5.
        assert_eq!(l.offset(1, 7), 5);
        assert!(broadcast(&[3], &[2, 4], "B").is_err());
        assert!(broadcast(&[2, 2, 2], &[2, 2], "B").is_err());
    }

    #[test]
    fn unit_axes_vanish_and_too_many_axes_are_refused() {
        let l = Layout::new(&[1, 5, 1], &[View::new(&[9, 1, 7])]).unwrap();
        assert_eq!((l.rank, l.count, l.dims[0], l.strides[0][0]), (1, 5, 5, 1));
        let empty = Layout::new(&[], &[View::new(&[])]).unwrap();
        assert_eq!((empty.rank, empty.count), (0, 1));
        let shape = [2usize; 9];
        let strides: Vec<i64> = (0..9).map(|d| 1 << (2 * d)).collect();
        assert!(Layout::new(&shape, &[View::new(&strides)]).is_err());
        assert!(Layout::new(&[2], &[View::new(&[1, 2])]).is_err());
    }
}
