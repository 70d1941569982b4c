//! Gradient rules, one module per op family, each listing its rules by op name
//! (`RULES`); [`rule`] finds a node's by its [`OpId`] in one table built from
//! them. A rule gets the forward node, the gradient of each output (`None`
//! where nothing downstream needs it, and for the loss, whose gradient is 1) and
//! which inputs need a gradient; it adds backward ops and returns a gradient for
//! each input that needs one. An op whose definition states its gradient
//! (`OpDef::gradient`, a [`GradientForm`]) gets the rule of that form; an op without a
//! rule says why in its definition (`OpDef::no_gradient`).

mod elementwise;
mod linalg;
mod nn;
mod shape_ops;

use super::builder::Builder;
use crate::error::{Error, Result};
use crate::ir::{Attr, Attrs, Node, TensorId, TensorType};
use crate::shape::registry::{self, GradientForm, OpId};
use lms_proto::contract::LMS_DOMAIN;
use std::sync::OnceLock;

/// What a rule sees.
pub struct Ctx<'a> {
    pub node: &'a Node,
    /// Gradient of each output.
    pub dys: &'a [Option<TensorId>],
    /// Which inputs need a gradient.
    pub needs: &'a [bool],
}

impl Ctx<'_> {
    /// Input `i`, which the op requires.
    pub fn input(&self, i: usize) -> Result<TensorId> {
        self.node.inputs.get(i).copied().flatten().ok_or_else(|| self.fail(format!("input {i} is missing")))
    }

    /// The gradient of output `i`; errors when no gradient reached it.
    pub fn dy(&self, i: usize) -> Result<TensorId> {
        self.dys.get(i).copied().flatten().ok_or_else(|| self.fail(format!("no gradient reached output {i}")))
    }

    /// Whether input `i` needs a gradient.
    pub fn needs(&self, i: usize) -> bool {
        self.needs.get(i).copied().unwrap_or(false)
    }

    /// A name for a backward op of this node.
    pub fn name(&self, what: &str) -> String {
        format!("{}/grad/{what}", self.node.name)
    }

    /// An error about this node.
    pub fn fail(&self, reason: String) -> Error {
        Error::Node { node: self.node.name.clone(), op: self.node.op.clone(), reason }
    }
}

/// A gradient rule: the gradients of the node's inputs (one entry per input slot).
pub type GradFn = fn(&mut Builder, &Ctx<'_>) -> Result<Vec<Option<TensorId>>>;

/// Every family's rules, by op name.
const FAMILIES: &[&[(&str, GradFn)]] = &[elementwise::RULES, linalg::RULES, nn::RULES, shape_ops::RULES];

/// The gradient rule of each op, indexed by [`OpId`], built once: the families' rules and
/// the rules of the forms definitions state.
fn rules() -> &'static [Option<GradFn>] {
    static RULES: OnceLock<Vec<Option<GradFn>>> = OnceLock::new();
    RULES.get_or_init(|| {
        let mut table: Vec<Option<GradFn>> = registry::all()
            .map(|id| {
                id.def().gradient.map(|form| match form {
                    GradientForm::SelfAdjoint => self_adjoint as GradFn,
                    GradientForm::Unary { .. } => unary as GradFn,
                })
            })
            .collect();
        for &(name, rule) in FAMILIES.iter().copied().flatten() {
            if let Some(id) = registry::by_name(name) {
                table[id.index()] = Some(rule);
            }
        }
        table
    })
}

/// [`GradientForm::SelfAdjoint`]: dX = the op applied to dY, with the node's attributes
/// and other inputs (which take no gradient).
fn self_adjoint(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    if let Some(i) = (1..ctx.node.inputs.len()).find(|&i| ctx.needs(i)) {
        return Err(ctx.fail(format!("input {i} takes no gradient (only the data input does)")));
    }
    let mut inputs = ctx.node.inputs.clone();
    inputs[0] = Some(ctx.dy(0)?);
    let dx = b.onnx(&ctx.name(&ctx.node.op), &ctx.node.op, ctx.node.attrs.clone(), &inputs, 1)?[0];
    Ok(vec![Some(dx)])
}

/// [`GradientForm::Unary`]: dX = `UnaryGrad(dY, X)`, with the op's name and the node's
/// attributes the form names.
fn unary(b: &mut Builder, ctx: &Ctx<'_>) -> Result<Vec<Option<TensorId>>> {
    let form = registry::resolve(&ctx.node.domain, &ctx.node.op).and_then(|id| id.def().gradient);
    let Some(GradientForm::Unary { attrs: attr_names, .. }) = form else {
        return Err(ctx.fail("its definition states no unary gradient".into()));
    };
    let (dy, x) = (ctx.dy(0)?, ctx.input(0)?);
    let mut attrs = Attrs::new().with("op", Attr::String(ctx.node.op.clone()));
    for &a in attr_names {
        if let Some(v) = ctx.node.attrs.get(a) {
            attrs.set(a, v.clone());
        }
    }
    let ty = b.ty(x);
    Ok(vec![Some(b.lms1(&ctx.name("unary"), "UnaryGrad", attrs, &[dy, x], ty))])
}

/// The gradient rule of `op`, where lms has one.
pub fn rule_of(op: OpId) -> Option<GradFn> {
    rules()[op.index()]
}

/// Gradients of the node's inputs (one entry per input slot).
pub fn rule(b: &mut Builder, node: &Node, dys: &[Option<TensorId>], needs: &[bool]) -> Result<Vec<Option<TensorId>>> {
    let ctx = Ctx { node, dys, needs };
    let op = node.op.as_str();
    let id = registry::resolve(&node.domain, op);
    if let Some(rule) = id.and_then(rule_of) {
        return Ok(only_needed(&ctx, rule(b, &ctx)?));
    }
    if node.domain == LMS_DOMAIN {
        return Err(ctx.fail(format!("lms has no gradient for op 'lms::{op}'")));
    }
    let why = id.and_then(|id| id.def().no_gradient).unwrap_or("lms has no gradient rule for it");
    Err(ctx.fail(format!("cannot train through '{op}': {why}")))
}

/// Why lms cannot differentiate the ONNX op `op`, when it cannot.
pub fn no_gradient(op: &str) -> Option<&'static str> {
    registry::resolve("", op).and_then(|id| id.def().no_gradient)
}

/// `dy` summed down to `shape` (numpy unbroadcast); `dy` itself when the
/// shapes already agree.
pub fn sum_to(b: &mut Builder, ctx: &Ctx<'_>, dy: TensorId, like: TensorId) -> TensorId {
    let target = b.ty(like);
    if b.ty(dy).shape == target.shape {
        return dy;
    }
    let ty = TensorType::new(b.ty(dy).dtype, target.shape);
    b.lms1(&ctx.name("sum_to"), "SumTo", Attrs::new(), &[dy], ty)
}

/// Only the gradients of the inputs that need one.
fn only_needed(ctx: &Ctx<'_>, dxs: Vec<Option<TensorId>>) -> Vec<Option<TensorId>> {
    dxs.into_iter().enumerate().map(|(i, dx)| dx.filter(|_| ctx.needs(i))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every rule names an op of the registry, once, and no op both has a rule and says
    /// why it has none.
    #[test]
    fn gradient_rules_are_keyed_by_registry_ops() {
        let names: Vec<&str> = FAMILIES.iter().copied().flatten().map(|r| r.0).collect();
        for (i, name) in names.iter().enumerate() {
            let id = registry::by_name(name).unwrap_or_else(|| panic!("{name} has a gradient rule but is no op"));
            assert!(!names[..i].contains(name), "{name} has two gradient rules");
            assert_eq!(id.def().no_gradient, None, "{name} has a gradient rule and a reason it has none");
            assert_eq!(id.def().gradient, None, "{name} has a gradient rule and a stated gradient");
        }
        for id in registry::all().filter(|id| id.def().gradient.is_some()) {
            assert_eq!(id.def().no_gradient, None, "{} states its gradient and a reason it has none", id.name());
            assert!(rule_of(id).is_some());
        }
        assert!(rule_of(registry::by_name("Relu").unwrap()).is_some());
        assert!(rule_of(registry::by_name("BatchNormTrain").unwrap()).is_some());
        assert!(rule_of(registry::by_name("Tile").unwrap()).is_none());
    }
}
