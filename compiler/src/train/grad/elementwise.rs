//! Gradients of elementwise ops (the unary maps state theirs in their definitions): Clip,
//! broadcasting arithmetic, Sum, Mean, Where, Pow, Identity and Cast.

use super::{sum_to, Ctx, GradFn};
use crate::error::Result;
use crate::ir::{Attr, Attrs};
use crate::ir::{TensorId, TensorType};
use crate::train::builder::Builder;

/// The rules of the elementwise ops (the unary maps state theirs in their definitions:
/// `GradientForm::Unary`).
pub(super) const RULES: &[(&str, GradFn)] = &[
    ("Clip", clip),
    ("Mean", mean),
    ("Where", where_),
    ("Identity", |_, c| Ok(vec![Some(c.dy(0)?)])),
    ("Cast", cast),
    ("Add", add),
    ("Sum", add),
    ("Sub", sub),
    ("Mul", mul),
    ("Div", div),
    ("Pow", pow),
    ("PRelu", prelu),
];

fn clip(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let (dy, x) = (ctx.dy(0)?, ctx.input(0)?);
    let mut attrs = Attrs::new().with("op", Attr::String("Clip".into()));
    for (slot, name) in [(1, "min"), (2, "max")] {
        if let Some(bound) = clip_bound(b, ctx, slot, name)? {
            attrs.set(name, Attr::Float(bound));
        }
    }
    let ty = b.ty(x);
    Ok(vec![Some(b.lms1(&ctx.name("clip"), "UnaryGrad", attrs, &[dy, x], ty))])
}

fn mean(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let n = ctx.node.inputs.len();
    let weight = scalar(b, ctx, 1.0 / n as f32)?;
    let share = b.onnx1(&ctx.name("mean"), "Mul", Attrs::new(), &[ctx.dy(0)?, weight])?;
    let mut dxs = Vec::with_capacity(n);
    for i in 0..n {
        dxs.push(if ctx.needs(i) { Some(sum_to(b, ctx, share, ctx.input(i)?)) } else { None });
    }
    Ok(dxs)
}

/// y = cond ? a : c: da = dy where cond, dc = dy elsewhere.
fn where_(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let (cond, dy) = (ctx.input(0)?, ctx.dy(0)?);
    let zero = scalar(b, ctx, 0.0)?;
    let mut dxs = vec![None];
    for (slot, picked) in [(1, [dy, zero]), (2, [zero, dy])] {
        dxs.push(if ctx.needs(slot) {
            let g = b.onnx1(&ctx.name("where"), "Where", Attrs::new(), &[cond, picked[0], picked[1]])?;
            Some(sum_to(b, ctx, g, ctx.input(slot)?))
        } else {
            None
        });
    }
    Ok(dxs)
}

fn cast(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let x = ctx.input(0)?;
    let to = Attrs::new().with("to", Attr::Int(b.ty(x).dtype.code() as i64));
    Ok(vec![Some(b.onnx1(&ctx.name("cast"), "Cast", to, &[ctx.dy(0)?])?)])
}

/// Add and Sum: every input gets dY, summed to its shape.
fn add(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let dy = ctx.dy(0)?;
    let mut dxs = Vec::new();
    for i in 0..ctx.node.inputs.len() {
        dxs.push(if ctx.needs(i) { Some(sum_to(b, ctx, dy, ctx.input(i)?)) } else { None });
    }
    Ok(dxs)
}

fn sub(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let dy = ctx.dy(0)?;
    let da = if ctx.needs(0) { Some(sum_to(b, ctx, dy, ctx.input(0)?)) } else { None };
    let db = if ctx.needs(1) {
        let neg = b.onnx1(&ctx.name("neg"), "Neg", Attrs::new(), &[dy])?;
        Some(sum_to(b, ctx, neg, ctx.input(1)?))
    } else {
        None
    };
    Ok(vec![da, db])
}

fn mul(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let (dy, a, c) = (ctx.dy(0)?, ctx.input(0)?, ctx.input(1)?);
    let da = if ctx.needs(0) {
        let p = b.onnx1(&ctx.name("mul"), "Mul", Attrs::new(), &[dy, c])?;
        Some(sum_to(b, ctx, p, a))
    } else {
        None
    };
    let dc = if ctx.needs(1) {
        let p = b.onnx1(&ctx.name("mul"), "Mul", Attrs::new(), &[dy, a])?;
        Some(sum_to(b, ctx, p, c))
    } else {
        None
    };
    Ok(vec![da, dc])
}

/// y = a / c: da = dy / c, dc = −dy·y / c.
fn div(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let (dy, a, c) = (ctx.dy(0)?, ctx.input(0)?, ctx.input(1)?);
    let da = if ctx.needs(0) {
        let q = b.onnx1(&ctx.name("div"), "Div", Attrs::new(), &[dy, c])?;
        Some(sum_to(b, ctx, q, a))
    } else {
        None
    };
    let dc = if ctx.needs(1) {
        let y = ctx.node.outputs[0];
        let y_over_c = b.onnx1(&ctx.name("div"), "Div", Attrs::new(), &[y, c])?;
        let p = b.onnx1(&ctx.name("mul"), "Mul", Attrs::new(), &[dy, y_over_c])?;
        let n = b.onnx1(&ctx.name("neg"), "Neg", Attrs::new(), &[p])?;
        Some(sum_to(b, ctx, n, c))
    } else {
        None
    };
    Ok(vec![da, dc])
}

fn pow(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    if ctx.needs(1) {
        return Err(ctx.fail("lms has no gradient of Pow with respect to its exponent".into()));
    }
    let (dy, x, p) = (ctx.dy(0)?, ctx.input(0)?, ctx.input(1)?);
    let ty = b.ty(x);
    Ok(vec![Some(b.lms1(&ctx.name("pow"), "PowGrad", Attrs::new(), &[dy, x, p], ty)), None])
}

/// PRelu: `PReluGrad(dY, X, slope)` gives dX and dSlope. Before opset 7 a slope of
/// fewer axes holds one value per channel: it is read (and its gradient written back)
/// as the numpy-broadcast shape that aligns it at axis 1.
fn prelu(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let (dy, x, slope) = (ctx.dy(0)?, ctx.input(0)?, ctx.input(1)?);
    let (tx, ts) = (b.ty(x), b.ty(slope));
    let per_channel =
        b.graph.opset < 7 && ts.rank() < tx.rank() && tx.shape.get(1..1 + ts.rank()) == Some(&ts.shape[..]);
    let aligned = if per_channel {
        let mut shape = ts.shape.clone();
        shape.resize(tx.rank() - 1, 1);
        b.lms1(&ctx.name("slope"), "ReshapeTo", Attrs::new(), &[slope], TensorType::new(ts.dtype, shape))
    } else {
        slope
    };
    let ta = b.ty(aligned);
    let outs = b.lms(&ctx.name("prelu"), "PReluGrad", Attrs::new(), &[Some(dy), Some(x), Some(aligned)], vec![tx, ta]);
    let dslope =
        if per_channel { b.lms1(&ctx.name("dslope"), "ReshapeTo", Attrs::new(), &[outs[1]], ts) } else { outs[1] };
    Ok(vec![ctx.needs(0).then_some(outs[0]), ctx.needs(1).then_some(dslope)])
}

/// Clip's bound `name`: the attribute (before opset 11) or the constant input
/// in `slot`, also when Cast or Identity nodes convert it from a constant
/// (PyTorch's `clamp` bounds: a double Constant cast to float); `None` when
/// absent (unbounded).
fn clip_bound(b: &Builder, ctx: &Ctx<'_>, slot: usize, name: &str) -> Result<Option<f32>> {
    if let Some(mut t) = ctx.node.inputs.get(slot).copied().flatten() {
        loop {
            let tensor = b.graph.tensor(t);
            let producer = b.graph.node(tensor.producer.0);
            match producer.inputs.first().copied().flatten() {
                Some(from) if tensor.data.is_none() && matches!(producer.op.as_str(), "Cast" | "Identity") => t = from,
                _ => break,
            }
        }
        let data = b.graph.tensor(t).data.as_ref().ok_or_else(|| {
            ctx.fail(format!("its {name} bound is computed at run time; lms differentiates Clip with constant bounds"))
        })?;
        return Ok(data.to_f64().first().map(|&v| v as f32));
    }
    ctx.node.attrs.get(name).map(|_| ctx.node.attrs.float(name, 0.0)).transpose().map_err(|e| ctx.fail(e.to_string()))
}

/// A constant f32 scalar for a backward op.
fn scalar(b: &mut Builder, ctx: &Ctx<'_>, value: f32) -> Result<TensorId> {
    b.onnx1(&ctx.name("scalar"), "Constant", Attrs::new().with("value_float", Attr::Float(value)), &[])
}
