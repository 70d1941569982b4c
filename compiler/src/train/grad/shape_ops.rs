//! Gradients of ops that move or select elements: reshapes, Transpose,
//! Concat, Split, Slice, Expand and the reductions.

use super::{sum_to, Ctx, GradFn};
use crate::error::Result;
use crate::ir::{Attr, Attrs, TensorId};
use crate::train::builder::Builder;

/// The rules of the ops that move or select elements, and of the reductions.
pub(super) const RULES: &[(&str, GradFn)] = &[
    ("Reshape", reshape),
    ("Flatten", reshape),
    ("Squeeze", reshape),
    ("Unsqueeze", reshape),
    ("Expand", |b, c| Ok(vec![Some(sum_to(b, c, c.dy(0)?, c.input(0)?))])),
    ("Transpose", transpose),
    ("Concat", concat),
    ("Split", split),
    ("Slice", slice),
    ("ReduceMean", |b, c| reduce(b, c, true)),
    ("ReduceSum", |b, c| reduce(b, c, false)),
];

/// Reshape, Flatten, Squeeze, Unsqueeze: `ReshapeTo` the input's shape.
fn reshape(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let ty = b.ty(ctx.input(0)?);
    Ok(vec![Some(b.lms1(&ctx.name("reshape"), "ReshapeTo", Attrs::new(), &[ctx.dy(0)?], ty))])
}

fn transpose(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let rank = b.ty(ctx.input(0)?).rank();
    let perm = ctx.node.attrs.ints("perm", (0..rank as i64).rev().collect()).map_err(|e| ctx.fail(e.to_string()))?;
    let mut inverse = vec![0i64; perm.len()];
    for (i, &p) in perm.iter().enumerate() {
        let slot = usize::try_from(p)
            .ok()
            .and_then(|p| inverse.get_mut(p))
            .ok_or_else(|| ctx.fail(format!("bad perm {perm:?}")))?;
        *slot = i as i64;
    }
    let attrs = Attrs::new().with("perm", Attr::Ints(inverse));
    Ok(vec![Some(b.onnx1(&ctx.name("transpose"), "Transpose", attrs, &[ctx.dy(0)?])?)])
}

fn concat(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let rank = b.ty(ctx.node.outputs[0]).rank() as i64;
    let axis = normalize(ctx, ctx.node.attrs.req_int("axis").map_err(|e| ctx.fail(e.to_string()))?, rank)?;
    let types = ctx
        .node
        .inputs
        .iter()
        .map(|t| t.map(|t| b.ty(t)).ok_or_else(|| ctx.fail("missing input".into())))
        .collect::<Result<Vec<_>>>()?;
    let attrs = Attrs::new().with("axis", Attr::Int(axis));
    let outs = b.lms(&ctx.name("concat"), "ConcatGrad", attrs, &[Some(ctx.dy(0)?)], types);
    Ok(outs.into_iter().map(Some).collect())
}

fn split(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let rank = b.ty(ctx.input(0)?).rank() as i64;
    let axis = normalize(ctx, ctx.node.attrs.int("axis", 0).map_err(|e| ctx.fail(e.to_string()))?, rank)?;
    let mut parts = Vec::with_capacity(ctx.node.outputs.len());
    for (i, &out) in ctx.node.outputs.iter().enumerate() {
        parts.push(match ctx.dys[i] {
            Some(dy) => dy,
            None => {
                let ty = b.ty(out);
                b.lms1(&ctx.name("zeros"), "Zeros", Attrs::new(), &[], ty)
            }
        });
    }
    let dx = b.onnx1(&ctx.name("split"), "Concat", Attrs::new().with("axis", Attr::Int(axis)), &parts)?;
    let mut dxs = vec![Some(dx)];
    dxs.resize(ctx.node.inputs.len(), None);
    Ok(dxs)
}

fn normalize(ctx: &Ctx<'_>, axis: i64, rank: i64) -> Result<i64> {
    let a = if axis < 0 { axis + rank } else { axis };
    if (0..rank.max(1)).contains(&a) {
        Ok(a)
    } else {
        Err(ctx.fail(format!("axis {axis} is out of range for rank {rank}")))
    }
}

/// The values of a constant input, or of an attribute in older opsets.
fn ints_from(b: &Builder, ctx: &Ctx<'_>, attr: &str, input: usize) -> Result<Option<Vec<i64>>> {
    if let Some(t) = ctx.node.inputs.get(input).copied().flatten() {
        let data = b
            .graph
            .tensor(t)
            .data
            .as_ref()
            .ok_or_else(|| ctx.fail(format!("input {input} must be a constant to differentiate")))?;
        return Ok(Some(data.to_i64().ok_or_else(|| ctx.fail(format!("input {input} must hold integers")))?));
    }
    ctx.node.attrs.ints_opt(attr).map_err(|e| ctx.fail(e.to_string()))
}

fn slice(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let x = ctx.input(0)?;
    let rank = b.ty(x).rank() as i64;
    let starts = ints_from(b, ctx, "starts", 1)?.ok_or_else(|| ctx.fail("starts are required".into()))?;
    let ends = ints_from(b, ctx, "ends", 2)?.ok_or_else(|| ctx.fail("ends are required".into()))?;
    let axes = ints_from(b, ctx, "axes", 3)?.unwrap_or_else(|| (0..starts.len() as i64).collect());
    let steps = ints_from(b, ctx, "steps", 4)?.unwrap_or_else(|| vec![1; starts.len()]);
    let axes = axes.iter().map(|&a| normalize(ctx, a, rank)).collect::<Result<Vec<_>>>()?;
    let attrs = Attrs::new()
        .with("starts", Attr::Ints(starts))
        .with("ends", Attr::Ints(ends))
        .with("axes", Attr::Ints(axes))
        .with("steps", Attr::Ints(steps));
    let ty = b.ty(x);
    let mut dxs = vec![Some(b.lms1(&ctx.name("slice"), "SliceGrad", attrs, &[ctx.dy(0)?], ty))];
    dxs.resize(ctx.node.inputs.len(), None);
    Ok(dxs)
}

fn reduce(b: &mut Builder, ctx: &Ctx<'_>, mean: bool) -> Result<Vec<Option<TensorId>>> {
    let x = ctx.input(0)?;
    let rank = b.ty(x).rank() as i64;
    let keepdims = ctx.node.attrs.int("keepdims", 1).map_err(|e| ctx.fail(e.to_string()))?;
    let noop = ctx.node.attrs.int("noop_with_empty_axes", 0).map_err(|e| ctx.fail(e.to_string()))? != 0;
    let axes = ints_from(b, ctx, "axes", 1)?.unwrap_or_default();
    let axes: Vec<i64> = if axes.is_empty() {
        if noop {
            return Ok(vec![Some(ctx.dy(0)?), None]);
        }
        (0..rank).collect()
    } else {
        axes.iter().map(|&a| normalize(ctx, a, rank)).collect::<Result<_>>()?
    };
    let attrs = Attrs::new()
        .with("axes", Attr::Ints(axes))
        .with("keepdims", Attr::Int(keepdims))
        .with("mean", Attr::Int(mean as i64));
    let ty = b.ty(x);
    let mut dxs = vec![Some(b.lms1(&ctx.name("reduce"), "ReduceGrad", attrs, &[ctx.dy(0)?], ty))];
    dxs.resize(ctx.node.inputs.len(), None);
    Ok(dxs)
}
