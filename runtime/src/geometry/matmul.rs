//! The shapes of a numpy matmul: each side's batch, their broadcast, M, K and N.

use super::layout::broadcast_shapes;
use crate::error::{KernelError, Result};

/// Splits a shape of rank >= 2 into batch dimensions and the trailing matrix.
fn split_matrix(shape: &[usize]) -> (&[usize], [usize; 2]) {
    let (batch, mat) = shape.split_at(shape.len() - 2);
    (batch, [mat[0], mat[1]])
}

/// The shapes of a numpy matmul of A by B (a 1-D A promoted to [1, K], a 1-D B to [K, 1]):
/// each side's batch dimensions, their broadcast, and the product's M, K and N.
pub(crate) struct MatmulShape {
    pub a_batch: Vec<usize>,
    pub b_batch: Vec<usize>,
    pub batch: Vec<usize>,
    pub m: usize,
    pub k: usize,
    pub n: usize,
}

/// Checks the shapes `a` and `b` of a numpy matmul against each other and splits them.
pub(crate) fn matmul_shape(a: &[usize], b: &[usize]) -> Result<MatmulShape> {
    if a.is_empty() || b.is_empty() {
        return Err(KernelError::shape("inputs A, B", "MatMul needs operands of rank 1 or more"));
    }
    let a_shape = if a.len() == 1 { vec![1, a[0]] } else { a.to_vec() };
    let b_shape = if b.len() == 1 { vec![b[0], 1] } else { b.to_vec() };
    let (a_batch, [m, k]) = split_matrix(&a_shape);
    let (b_batch, [kb, n]) = split_matrix(&b_shape);
    if k != kb {
        return Err(KernelError::shape("input B", format!("inner dimension {kb} differs from A's {k}")));
    }
    Ok(MatmulShape {
        batch: broadcast_shapes(a_batch, b_batch, "inputs A, B")?,
        a_batch: a_batch.to_vec(),
        b_batch: b_batch.to_vec(),
        m,
        k,
        n,
    })
}
