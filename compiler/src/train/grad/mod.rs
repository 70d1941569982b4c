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
    Err(ctx.fail(format!("lms has no gradient for op '{op}'")))
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
