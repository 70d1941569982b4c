//! The triangle a Trilu keeps of each matrix of its last two axes.

use crate::error::{KernelError, Result};

/// Trilu's geometry: each matrix of the last two axes (`rows` x `cols`) keeps its upper
/// (`upper`, the default) or lower triangle from diagonal `k`: element (i, j) where
/// j - i >= k, or <= k; the others are zero.
pub(crate) struct Triangle {
    pub rows: usize,
    pub cols: usize,
    pub k: i64,
    pub upper: bool,
}

impl Triangle {
    /// Reads the triangle of an input of `shape` from the `upper` attribute and the values
    /// of the optional input k (one value, default 0).
    pub(crate) fn read(shape: &[usize], upper: i64, k: Option<&[i64]>) -> Result<Triangle> {
        let k = match k {
            None => 0,
            Some(&[k]) => k,
            Some(other) => return Err(KernelError::shape("input k", format!("holds {} values, not one", other.len()))),
        };
        let [.., rows, cols] = shape[..] else {
            return Err(KernelError::shape("input input", format!("rank {} is below 2", shape.len())));
        };
        Ok(Triangle { rows, cols, k, upper: upper != 0 })
    }

    /// Whether the element at row-major position `e` is kept.
    pub(crate) fn keeps(&self, e: usize) -> bool {
        let diagonal = (e % self.cols) as i64 - ((e / self.cols) % self.rows) as i64;
        if self.upper {
            diagonal >= self.k
        } else {
            diagonal <= self.k
        }
    }
}
