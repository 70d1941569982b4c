//! Gradients of MatMul and Gemm, written with MatMul, Gemm and Transpose.

use super::{sum_to, Ctx, GradFn};
use crate::error::Result;
use crate::ir::{Attr, Attrs, TensorData, TensorId, VARIABLE_OP};
use crate::train::builder::Builder;

/// The rules of MatMul and Gemm.
pub(super) const RULES: &[(&str, GradFn)] = &[("MatMul", matmul), ("Gemm", gemm)];

/// X with its last two axes swapped.
fn swap_last(b: &mut Builder, ctx: &Ctx<'_>, x: TensorId) -> Result<TensorId> {
    let rank = b.ty(x).rank() as i64;
    let mut perm: Vec<i64> = (0..rank).collect();
    perm.swap(rank as usize - 2, rank as usize - 1);
    b.onnx1(&ctx.name("transpose"), "Transpose", Attrs::new().with("perm", Attr::Ints(perm)), &[x])
}

/// Y = A·B (ranks ≥ 2, batch axes broadcast): dA = dY·Bᵀ, dB = Aᵀ·dY, each
/// summed over the batch axes it was broadcast along.
fn matmul(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let (dy, a, m) = (ctx.dy(0)?, ctx.input(0)?, ctx.input(1)?);
    if b.ty(a).rank() < 2 || b.ty(m).rank() < 2 {
        return Err(ctx.fail("lms differentiates MatMul of rank 2 or more only".into()));
    }
    let da = if ctx.needs(0) {
        let mt = swap_last(b, ctx, m)?;
        let p = b.onnx1(&ctx.name("matmul"), "MatMul", Attrs::new(), &[dy, mt])?;
        Some(sum_to(b, ctx, p, a))
    } else {
        None
    };
    let dm = if ctx.needs(1) {
        let at = swap_last(b, ctx, a)?;
        let p = b.onnx1(&ctx.name("matmul"), "MatMul", Attrs::new(), &[at, dy])?;
        Some(sum_to(b, ctx, p, m))
    } else {
        None
    };
    Ok(vec![da, dm])
}

fn gemm_attrs(b: &Builder, trans_a: bool, trans_b: bool, alpha: f32) -> Attrs {
    let attrs = Attrs::new()
        .with("transA", Attr::Int(trans_a as i64))
        .with("transB", Attr::Int(trans_b as i64))
        .with("alpha", Attr::Float(alpha))
        .with("beta", Attr::Float(0.0));
    // Before opset 7, C broadcasts only when asked to.
    if b.graph.opset < 7 {
        attrs.with("broadcast", Attr::Int(1))
    } else {
        attrs
    }
}

/// A constant float as a one-element tensor.
fn scalar(b: &mut Builder, ctx: &Ctx<'_>, what: &str, value: f32) -> TensorId {
    let data = TensorData::from_f32(vec![1], &[value]);
    let k = b.add_leaf(
        &ctx.name(what),
        VARIABLE_OP,
        Attrs::new().with("init", Attr::String("data".into())),
        data.ty.clone(),
    );
    b.graph.tensor_mut(k).data = Some(data);
    k
}

/// Y = α·op(A)·op(B) + β·C.
fn gemm(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let attrs = &ctx.node.attrs;
    let err = |e: crate::ir::AttrError| ctx.fail(e.to_string());
    let ta = attrs.int("transA", 0).map_err(err)? != 0;
    let tb = attrs.int("transB", 0).map_err(err)? != 0;
    let alpha = attrs.float("alpha", 1.0).map_err(err)?;
    let beta = attrs.float("beta", 1.0).map_err(err)?;
    let (dy, a, m) = (ctx.dy(0)?, ctx.input(0)?, ctx.input(1)?);
    // Before opset 11 Gemm requires C: a zero scalar.
    let c = if b.graph.opset < 11 && (ctx.needs(0) || ctx.needs(1)) { Some(scalar(b, ctx, "zero", 0.0)) } else { None };
    let gemm = |b: &mut Builder, attrs: Attrs, x: TensorId, y: TensorId| -> Result<TensorId> {
        let inputs: Vec<TensorId> = [x, y].into_iter().chain(c).collect();
        b.onnx1(&ctx.name("gemm"), "Gemm", attrs, &inputs)
    };
    // op(A) = A: dA = α·dY·op(B)ᵀ; op(A) = Aᵀ: dA = α·op(B)·dYᵀ.
    let da = if ctx.needs(0) {
        Some(if ta {
            gemm(b, gemm_attrs(b, tb, true, alpha), m, dy)?
        } else {
            gemm(b, gemm_attrs(b, false, !tb, alpha), dy, m)?
        })
    } else {
        None
    };
    // op(B) = B: dB = α·op(A)ᵀ·dY; op(B) = Bᵀ: dB = α·dYᵀ·op(A).
    let dm = if ctx.needs(1) {
        Some(if tb {
            gemm(b, gemm_attrs(b, true, ta, alpha), dy, a)?
        } else {
            gemm(b, gemm_attrs(b, !ta, false, alpha), a, dy)?
        })
    } else {
        None
    };
    let dc = if ctx.needs(2) {
        let c = ctx.input(2)?;
        let scaled = if beta == 1.0 {
            dy
        } else {
            let k = scalar(b, ctx, "beta", beta);
            b.onnx1(&ctx.name("mul"), "Mul", Attrs::new(), &[dy, k])?
        };
        Some(sum_to(b, ctx, scaled, c))
    } else {
        None
    };
    Ok(vec![da, dm, dc])
}
