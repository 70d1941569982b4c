//! Gradient rules, one module per op family. A rule gets the forward node,
//! the gradient of each output (`None` where nothing downstream needs it, and
//! for the loss, whose gradient is 1) and which inputs need a gradient; it
//! adds backward ops and returns a gradient for each input that needs one.

mod elementwise;
mod linalg;
mod nn;
mod shape_ops;

use super::builder::{Builder, LMS_DOMAIN};
use crate::error::{Error, Result};
use crate::ir::{Attrs, Node, TensorId, TensorType};

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

/// Gradients of the node's inputs (one entry per input slot).
pub fn rule(b: &mut Builder, node: &Node, dys: &[Option<TensorId>], needs: &[bool]) -> Result<Vec<Option<TensorId>>> {
    let ctx = Ctx { node, dys, needs };
    let op = node.op.as_str();
    if node.domain == LMS_DOMAIN {
        return nn::lms_op(b, &ctx);
    }
    if let Some(dxs) = elementwise::rule(b, &ctx, op)? {
        return Ok(dxs);
    }
    if let Some(dxs) = linalg::rule(b, &ctx, op)? {
        return Ok(dxs);
    }
    if let Some(dxs) = nn::rule(b, &ctx, op)? {
        return Ok(dxs);
    }
    if let Some(dxs) = shape_ops::rule(b, &ctx, op)? {
        return Ok(dxs);
    }
    let why = no_gradient(op).unwrap_or("lms has no gradient rule for it");
    Err(ctx.fail(format!("cannot train through '{op}': {why}")))
}

/// Ops the frontend accepts that have no gradient rule, and why. Every other
/// accepted op has one (a test walks the op registry to keep it so).
const NO_GRADIENT: &[(&str, &str)] = &[
    ("Constant", "its output is a constant"),
    ("ConstantOfShape", "its output is a constant"),
    ("Shape", "its output is a shape (integers)"),
    ("Size", "its output is a count of elements (an integer)"),
    ("Range", "its output is a sequence of numbers fixed by its bounds"),
    ("Not", "its output is boolean"),
    ("Equal", "its output is boolean"),
    ("Less", "its output is boolean"),
    ("Greater", "its output is boolean"),
    ("GreaterOrEqual", "its output is boolean"),
    ("LessOrEqual", "its output is boolean"),
    ("And", "its output is boolean"),
    ("Or", "its output is boolean"),
    ("Xor", "its output is boolean"),
    ("Floor", "it is piecewise constant, so its gradient is zero wherever it is defined"),
    ("Ceil", "it is piecewise constant, so its gradient is zero wherever it is defined"),
    ("Max", "the gradient of an elementwise maximum is not implemented"),
    ("Min", "the gradient of an elementwise minimum is not implemented"),
    ("ReduceMax", "the gradient of a maximum reduction is not implemented"),
    ("ReduceMin", "the gradient of a minimum reduction is not implemented"),
    ("GlobalMaxPool", "the gradient of global max pooling is not implemented (MaxPool has one)"),
    ("PRelu", "the gradient of PRelu is not implemented (LeakyRelu has one)"),
    ("Pad", "the gradient of Pad is not implemented"),
    ("Tile", "the gradient of Tile is not implemented (Expand has one)"),
    ("ConvTranspose", "the gradient of ConvTranspose is not implemented"),
    ("InstanceNormalization", "the gradient of InstanceNormalization is not implemented"),
    ("Gelu", "the gradient of Gelu is not implemented"),
    ("HardSigmoid", "the gradient of HardSigmoid is not implemented"),
];

/// Why lms cannot differentiate `op`, when it cannot.
pub fn no_gradient(op: &str) -> Option<&'static str> {
    NO_GRADIENT.iter().find(|(name, _)| *name == op).map(|&(_, why)| why)
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
pub fn only_needed(ctx: &Ctx<'_>, dxs: Vec<Option<TensorId>>) -> Vec<Option<TensorId>> {
    dxs.into_iter().enumerate().map(|(i, dx)| dx.filter(|_| ctx.needs(i))).collect()
}
