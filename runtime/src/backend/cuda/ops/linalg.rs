//! Matrix products on cuBLAS: Gemm (optional transposes, alpha, beta·C with C broadcast)
//! and MatMul (numpy batching: strided-batched GEMM where the batches are regular).

use super::movement::copy_strided;
use super::{Exec, OpResult, Table};
use crate::backend::cuda::layout::{broadcast, contiguous, View};
use crate::backend::cuda::libs::Gemm;
use crate::backend::cuda::CudaBuffer;
use crate::backend::Queue;
use crate::error::KernelError;
use crate::geometry::matmul::{matmul_shape, MatmulShape};
use crate::tensor::numel;

/// The matrix products.
pub(super) const ONNX: Table = &[("Gemm", gemm), ("MatMul", matmul)];

/// Issues `g` on cuBLAS.
fn run(exec: &Exec<'_>, g: &Gemm) -> OpResult<()> {
    if g.m == 0 || g.n == 0 || g.batch == 0 {
        return Ok(());
    }
    if g.k == 0 {
        // An empty sum: C = beta·C, which the callers only ask for with beta 0.
        return exec.zero(g.c, (g.batch * g.m * g.n * 4) as u64);
    }
    // SAFETY: the callers pass the addresses of live f32 buffers of the shapes `g` says.
    unsafe { exec.gpu.blas.gemm(g) }?;
    exec.gpu.device.issued(Queue::Compute);
    Ok(())
}

/// A 2-D operand's (rows, cols) after an optional transpose.
fn matrix(t: &CudaBuffer, transpose: bool, what: &str) -> OpResult<(usize, usize)> {
    let [r, c] = t.shape[..] else {
        return Err(KernelError::shape(what, format!("expected a matrix, found shape {:?}", t.shape)).into());
    };
    Ok(if transpose { (c, r) } else { (r, c) })
}

/// Y = alpha · A' · B' + beta · C.
fn gemm(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (a, b) = (exec.f32_input(0, "A")?, exec.f32_input(1, "B")?);
    let (trans_a, trans_b) = (exec.attrs.int("transA", 0)? != 0, exec.attrs.int("transB", 0)? != 0);
    let (m, k) = matrix(a, trans_a, "input A")?;
    let (kb, n) = matrix(b, trans_b, "input B")?;
    if k != kb {
        return Err(KernelError::shape("input B", format!("inner dimension {kb} differs from A's {k}")).into());
    }
    let alpha = exec.attrs.float("alpha", 1.0)?;
    let mut beta = exec.attrs.float("beta", 1.0)?;
    let y = exec.output(0)?;
    match exec.opt_input(2) {
        Some(c) if beta != 0.0 => {
            let c = exec.f32_input(2, "C").map(|_| c)?;
            let view = broadcast(&c.shape, &[m, n], "input C")?;
            copy_strided(exec, &[m, n], &y, View::new(&contiguous(&[m, n])), c, View::new(&view))?;
        }
        _ => beta = 0.0,
    }
    run(
        exec,
        &Gemm {
            m,
            n,
            k,
            trans_a,
            trans_b,
            alpha,
            beta,
            a: a.ptr(),
            b: b.ptr(),
            c: y.ptr(),
            batch: 1,
            stride_a: 0,
            stride_b: 0,
            stride_c: 0,
        },
    )?;
    Ok(vec![y])
}

/// numpy matmul: batch dimensions broadcast; a 1-D A gains (then loses) a leading 1, a
/// 1-D B a trailing 1. Batches that are regular (equal, or one side shared) run as one
/// strided-batched GEMM; others as one GEMM per batch.
fn matmul(exec: &Exec<'_>) -> OpResult<Vec<CudaBuffer>> {
    let (a, b) = (exec.f32_input(0, "A")?, exec.f32_input(1, "B")?);
    let MatmulShape { a_batch, b_batch, batch, m, k, n } = matmul_shape(&a.shape, &b.shape)?;
    let count = numel(&batch);
    let y = exec.output(0)?;
    if y.numel() != count * m * n {
        return Err(KernelError::shape("output 0", format!("{:?} is not the product's shape", y.shape)).into());
    }
    let product = |a_at: u64, b_at: u64, c_at: u64, rows: usize, batch: usize, strides: (usize, usize)| Gemm {
        m: rows,
        n,
        k,
        trans_a: false,
        trans_b: false,
        alpha: 1.0,
        beta: 0.0,
        a: a_at,
        b: b_at,
        c: c_at,
        batch,
        stride_a: strides.0,
        stride_b: strides.1,
        stride_c: rows * n,
    };
    let (a_count, b_count) = (numel(&a_batch), numel(&b_batch));
    if b_count == 1 {
        // B shared by every batch: one GEMM over all rows of A.
        run(exec, &product(a.ptr(), b.ptr(), y.ptr(), count * m, 1, (0, 0)))?;
    } else if a_batch == b_batch || a_count == 1 {
        let stride_a = if a_count == 1 { 0 } else { m * k };
        run(exec, &product(a.ptr(), b.ptr(), y.ptr(), m, count, (stride_a, k * n)))?;
    } else {
        let sa = broadcast(&a_batch, &batch, "input A")?;
        let sb = broadcast(&b_batch, &batch, "input B")?;
        let dims = contiguous(&batch);
        for i in 0..count {
            let (mut oa, mut ob) = (0usize, 0usize);
            for (d, &stride) in dims.iter().enumerate() {
                let idx = (i / stride as usize) % batch[d];
                oa += idx * sa[d] as usize;
                ob += idx * sb[d] as usize;
            }
            let at = |base: u64, elements: usize| base + (elements * 4) as u64;
            run(
                exec,
                &product(at(a.ptr(), oa * m * k), at(b.ptr(), ob * k * n), at(y.ptr(), i * m * n), m, 1, (0, 0)),
            )?;
        }
    }
    Ok(vec![y])
}
