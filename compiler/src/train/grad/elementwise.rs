//! Gradients of elementwise ops: unary activations and math, broadcasting
//! arithmetic, Sum, Pow, Identity and Cast.

use super::{only_needed, sum_to, Ctx};
use crate::error::Result;
use crate::ir::TensorId;
use crate::ir::{Attr, Attrs};
use crate::train::builder::Builder;

/// Unary ops whose gradient is `UnaryGrad(dY, X)`, and the attributes it needs.
const UNARY: &[(&str, &[&str])] = &[
    ("Relu", &[]),
    ("LeakyRelu", &["alpha"]),
    ("Sigmoid", &[]),
    ("Tanh", &[]),
    ("Elu", &["alpha"]),
    ("Selu", &["alpha", "gamma"]),
    ("Softplus", &[]),
    ("Softsign", &[]),
    ("Exp", &[]),
    ("Log", &[]),
    ("Sqrt", &[]),
    ("Erf", &[]),
    ("Abs", &[]),
    ("Neg", &[]),
    ("Reciprocal", &[]),
];

/// The rule for `op` when it is elementwise; `None` otherwise.
pub fn rule(b: &mut Builder, ctx: &Ctx<'_>, op: &str) -> Result<Option<Vec<Option<TensorId>>>> {
    if let Some((_, attr_names)) = UNARY.iter().find(|(name, _)| *name == op) {
        let (dy, x) = (ctx.dy(0)?, ctx.input(0)?);
        let mut attrs = Attrs::new().with("op", Attr::String(op.to_string()));
        for &a in attr_names.iter() {
            if let Some(v) = ctx.node.attrs.get(a) {
                attrs.set(a, v.clone());
            }
        }
        let ty = b.ty(x);
        return Ok(Some(vec![Some(b.lms1(&ctx.name("unary"), "UnaryGrad", attrs, &[dy, x], ty))]));
    }
    let dxs = match op {
        "Identity" => vec![Some(ctx.dy(0)?)],
        "Cast" => {
            let x = ctx.input(0)?;
            let to = Attrs::new().with("to", Attr::Int(b.ty(x).dtype.code() as i64));
            vec![Some(b.onnx1(&ctx.name("cast"), "Cast", to, &[ctx.dy(0)?])?)]
        }
        "Add" | "Sum" => {
            let dy = ctx.dy(0)?;
            let mut dxs = Vec::new();
            for i in 0..ctx.node.inputs.len() {
                dxs.push(if ctx.needs(i) { Some(sum_to(b, ctx, dy, ctx.input(i)?)) } else { None });
            }
            dxs
        }
        "Sub" => {
            let dy = ctx.dy(0)?;
            let da = if ctx.needs(0) { Some(sum_to(b, ctx, dy, ctx.input(0)?)) } else { None };
            let db = if ctx.needs(1) {
                let neg = b.onnx1(&ctx.name("neg"), "Neg", Attrs::new(), &[dy])?;
                Some(sum_to(b, ctx, neg, ctx.input(1)?))
            } else {
                None
            };
            vec![da, db]
        }
        "Mul" => {
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
            vec![da, dc]
        }
        "Div" => {
            // y = a / c: da = dy / c, dc = −dy·y / c.
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
            vec![da, dc]
        }
        "Pow" => {
            if ctx.needs(1) {
                return Err(ctx.fail("lms has no gradient of Pow with respect to its exponent".into()));
            }
            let (dy, x, p) = (ctx.dy(0)?, ctx.input(0)?, ctx.input(1)?);
            let ty = b.ty(x);
            vec![Some(b.lms1(&ctx.name("pow"), "PowGrad", Attrs::new(), &[dy, x, p], ty)), None]
        }
        _ => return Ok(None),
    };
    Ok(Some(only_needed(ctx, dxs)))
}
