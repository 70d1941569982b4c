//! Gemm and MatMul on matrixmultiply's GEMM, with strides instead of copies.

use super::layout::{for_each_row, strided_copy};
use super::num::{gemm, Float};
use super::{dispatch_float, Ctx, Kernel};
use crate::error::{KernelError, Result};
use crate::geometry::layout::broadcast_strides;
use crate::geometry::matmul::{matmul_shape, MatmulShape};
use crate::tensor::{numel, HostTensor};

/// The linear-algebra kernels.
pub(super) const KERNELS: &[(&str, Kernel)] = &[("Gemm", gemm_op), ("MatMul", matmul)];

fn gemm_op(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let a = ctx.input(0, "A")?;
    dispatch_float!(a.dtype(), "input A", T => gemm_typed::<T>(ctx, a))
}

/// A 2-D operand's (rows, cols) after an optional transpose, and its (row, col) strides.
fn matrix(t: &HostTensor, transpose: bool, what: &str) -> Result<((usize, usize), (usize, usize))> {
    let [r, c] = t.shape[..] else {
        return Err(KernelError::shape(what, format!("expected a matrix, found shape {:?}", t.shape)));
    };
    Ok(if transpose { ((c, r), (1, c)) } else { ((r, c), (c, 1)) })
}

/// Y = alpha · A' · B' + beta · C, with A' and B' optionally transposed and C broadcast.
fn gemm_typed<T: Float>(ctx: &Ctx<'_>, a: &HostTensor) -> Result<Vec<HostTensor>> {
    let b = ctx.input(1, "B")?;
    let ((m, k), sa) = matrix(a, ctx.attrs.int("transA", 0)? != 0, "input A")?;
    let ((kb, n), sb) = matrix(b, ctx.attrs.int("transB", 0)? != 0, "input B")?;
    if k != kb {
        return Err(KernelError::shape("input B", format!("inner dimension {kb} differs from A's {k}")));
    }
    let alpha = T::from_f32(ctx.attrs.float("alpha", 1.0)?);
    let mut beta = T::from_f32(ctx.attrs.float("beta", 1.0)?);
    let mut y = vec![T::ZERO; m * n];
    match ctx.opt_input(2) {
        Some(c) if beta != T::ZERO => {
            let strides = broadcast_strides(&c.shape, &[m, n], "input C")?;
            y = strided_copy(c.view::<T>("input C")?, 0, &[m, n], &strides);
        }
        _ => beta = T::ZERO,
    }
    let (av, bv) = (a.view::<T>("input A")?, b.view::<T>("input B")?);
    gemm((m, k, n), alpha, (av, sa.0, sa.1), (bv, sb.0, sb.1), beta, &mut y, n)?;
    Ok(vec![HostTensor::from_vec(vec![m, n], y)?])
}

fn matmul(ctx: &Ctx<'_>) -> Result<Vec<HostTensor>> {
    let a = ctx.input(0, "A")?;
    dispatch_float!(a.dtype(), "input A", T => matmul_typed::<T>(ctx, a))
}

/// numpy matmul: batch dimensions broadcast; a 1-D A gains (then loses) a leading 1,
/// a 1-D B a trailing 1.
fn matmul_typed<T: Float>(ctx: &Ctx<'_>, a: &HostTensor) -> Result<Vec<HostTensor>> {
    let b = ctx.input(1, "B")?;
    let MatmulShape { a_batch, b_batch, batch, m, k, n } = matmul_shape(&a.shape, &b.shape)?;
    let (av, bv) = (a.view::<T>("input A")?, b.view::<T>("input B")?);
    let count = numel(&batch);
    let mut y = vec![T::ZERO; count * m * n];
    if b_batch.is_empty() {
        // B is shared by every batch: one GEMM over all rows of A (contiguous).
        gemm((count * m, k, n), T::ONE, (av, k, 1), (bv, n, 1), T::ZERO, &mut y, n)?;
    } else {
        let sa = broadcast_strides(&a_batch, &batch, "input A")?;
        let sb = broadcast_strides(&b_batch, &batch, "input B")?;
        let mut pairs = Vec::with_capacity(count);
        for_each_row(&batch, [&sa, &sb], |[oa, ob], len, [ia, ib]| {
            pairs.extend((0..len as isize).map(|j| ((oa + j * ia) as usize, (ob + j * ib) as usize)));
        });
        for (i, (pa, pb)) in pairs.into_iter().enumerate() {
            let (am, bm) = (&av[pa * m * k..][..m * k], &bv[pb * k * n..][..k * n]);
            gemm((m, k, n), T::ONE, (am, k, 1), (bm, n, 1), T::ZERO, &mut y[i * m * n..][..m * n], n)?;
        }
    }
    let mut shape = batch;
    if a.rank() > 1 {
        shape.push(m);
    }
    if b.rank() > 1 {
        shape.push(n);
    }
    Ok(vec![HostTensor::from_vec(shape, y)?])
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use crate::tensor::HostTensor;
    use lms_proto::lms::DType::*;

    /// Naive batched matmul on already broadcast, 2-D-promoted operands.
    #[allow(clippy::too_many_arguments)]
    fn naive(
        a: &[f32],
        b: &[f32],
        batch_a: &dyn Fn(usize) -> usize,
        batch_b: &dyn Fn(usize) -> usize,
        count: usize,
        m: usize,
        k: usize,
        n: usize,
    ) -> Vec<f32> {
        let mut y = Vec::new();
        for bi in 0..count {
            let (oa, ob) = (batch_a(bi) * m * k, batch_b(bi) * k * n);
            for i in 0..m {
                for j in 0..n {
                    y.push((0..k).map(|p| a[oa + i * k + p] as f64 * b[ob + p * n + j] as f64).sum::<f64>() as f32);
                }
            }
        }
        y
    }

    fn matmul(a: &HostTensor, b: &HostTensor, out: &[usize]) -> Vec<f32> {
        f32s(&run1("MatMul", &[], &[a, b], DtypeF32, out))
    }

    #[test]
    fn matmul_matches_naive_with_batch_broadcasting() {
        let mut rng = Rng::new(1);
        let (a, b) = (rng.tensor(&[2, 3, 4, 5]), rng.tensor(&[5, 6]));
        let want = naive(&f32s(&a), &f32s(&b), &|i| i, &|_| 0, 6, 4, 5, 6);
        assert_close(&matmul(&a, &b, &[2, 3, 4, 6]), &want);
        // [3, 1, 4, 5] x [2, 5, 6] -> [3, 2, 4, 6]
        let (a, b) = (rng.tensor(&[3, 1, 4, 5]), rng.tensor(&[2, 5, 6]));
        let want = naive(&f32s(&a), &f32s(&b), &|i| i / 2, &|i| i % 2, 6, 4, 5, 6);
        assert_close(&matmul(&a, &b, &[3, 2, 4, 6]), &want);
    }

    #[test]
    fn matmul_promotes_vectors() {
        let mut rng = Rng::new(2);
        let (v, w) = (rng.tensor(&[5]), rng.tensor(&[5]));
        let dot: f64 = f32s(&v).iter().zip(f32s(&w)).map(|(x, y)| *x as f64 * y as f64).sum();
        assert_close(&matmul(&v, &w, &[]), &[dot as f32]);
        let b = rng.tensor(&[2, 5, 3]);
        let want = naive(&f32s(&v), &f32s(&b), &|_| 0, &|i| i, 2, 1, 5, 3);
        assert_close(&matmul(&v, &b, &[2, 3]), &want);
        let a = rng.tensor(&[2, 4, 5]);
        let want = naive(&f32s(&a), &f32s(&v), &|i| i, &|_| 0, 2, 4, 5, 1);
        assert_close(&matmul(&a, &v, &[2, 4]), &want);
        let bad = rng.tensor(&[2, 4, 3]);
        let err = run("MatMul", 17, &[], &[&a, &bad], &[(DtypeF32, vec![2, 4, 3])]).unwrap_err();
        assert_eq!(err.to_string(), "MatMul: input B: inner dimension 4 differs from A's 5");
    }

    #[test]
    fn f64_matmul_and_determinism() {
        let a = tensor(&[2, 2], vec![1.0f64, 2.0, 3.0, 4.0]);
        let b = tensor(&[2, 1], vec![0.5f64, -1.0]);
        let y = run1("MatMul", &[], &[&a, &b], DtypeF64, &[2, 1]);
        assert_eq!(y.view::<f64>("y").unwrap(), &[-1.5, -2.5]);
        let mut rng = Rng::new(12);
        let (a, b) = (rng.tensor(&[3, 37, 61]), rng.tensor(&[3, 61, 29]));
        let bits = |t: &HostTensor| f32s(t).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
        let first = run1("MatMul", &[], &[&a, &b], DtypeF32, &[3, 37, 29]);
        let second = run1("MatMul", &[], &[&a, &b], DtypeF32, &[3, 37, 29]);
        assert_eq!(bits(&first), bits(&second));
    }

    #[test]
    fn gemm_transposes_scales_and_broadcasts_c() {
        let mut rng = Rng::new(4);
        let (a, b) = (rng.tensor(&[5, 3]), rng.tensor(&[4, 5]));
        // Y = 0.5 · Aᵀ · Bᵀ + 2 · C with C of shape [4] broadcast over rows.
        let c = rng.tensor(&[4]);
        let attrs = [int("transA", 1), int("transB", 1), float("alpha", 0.5), float("beta", 2.0)];
        let got = f32s(&run1("Gemm", &attrs, &[&a, &b, &c], DtypeF32, &[3, 4]));
        let (av, bv, cv) = (f32s(&a), f32s(&b), f32s(&c));
        let mut want = Vec::new();
        for i in 0..3 {
            for j in 0..4 {
                let dot: f64 = (0..5).map(|p| av[p * 3 + i] as f64 * bv[j * 5 + p] as f64).sum();
                want.push((0.5 * dot + 2.0 * cv[j] as f64) as f32);
            }
        }
        assert_close(&got, &want);
        // Without C, and with C of shape [3, 1].
        let at = rng.tensor(&[3, 5]);
        let got = f32s(&run1("Gemm", &[], &[&at, &rng.tensor(&[5, 4])], DtypeF32, &[3, 4]));
        assert_eq!(got.len(), 12);
        let c = tensor(&[3, 1], vec![1.0f32, 2.0, 3.0]);
        let z = tensor(&[5, 4], vec![0.0f32; 20]);
        let got = f32s(&run1("Gemm", &[], &[&at, &z, &c], DtypeF32, &[3, 4]));
        assert_eq!(got, vec![1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 2.0, 3.0, 3.0, 3.0, 3.0]);
    }
}
