//! When an op is independent along an axis of its output, so that
//! `op(concat_d(a, b)) = concat_d(op(a), op(b))`: the conditions of the
//! distribution rules, one rule per family of ops.
//!
//! Every condition is the op's axes map (`shape::axes`, in the op's
//! definition): a family is the ops whose map is of its kinds. Nothing is
//! left hand-written here; an op without an axes map is in no family.
//!
//! A condition gets the op's head, its inputs' shapes (`None` for an omitted
//! input) and an axis of its outputs, and answers how a split of the outputs
//! along that axis splits the inputs: for each input, the axis along which it
//! is split into the same parts, or `None` where every part reads the whole
//! input. `None` overall means the parts would not be independent.
//!
//! Not independent, so never distributed: ops that reduce or couple along
//! the axis. BatchNormalization in training (`BatchNormTrain`) computes
//! statistics over the batch; Softmax along its own axis; ConvGradWeight and
//! ConvGradBias split along the batch and a MatMul split along its reduction
//! axis need a sum of the parts, not a concatenation (their maps' extensions,
//! `shape::split`, and the `distribute-sum` rule); losses divide by the total count (the softmax
//! cross-entropy gradient distributes only with its parts told that count,
//! `shape::split::whole_count_attrs`); dropout draws its mask by position. Windowed ops split along
//! a spatial axis need halos and per-part padding (Split-CNN §3); those
//! splits are the `distribute-halo` rule's (`halo.rs`), never distributed here.

use crate::egraph::lang::Head;
use crate::ir::Shape;
use crate::shape::axes::{self, AxesMap, OutputAxis};

/// For each input: the axis along which it is split, or `None` when every
/// part reads it whole.
pub type InputSplits = Vec<Option<usize>>;

/// Ops that distribute over concatenation under their axes map; each family
/// is one rule, `distribute-{name}`.
pub struct Family {
    /// The rule's name is `distribute-{name}`.
    pub name: &'static str,
    /// Whether an op with this axes map is in the family.
    members: fn(&AxesMap) -> bool,
}

impl Family {
    /// Whether `head`'s op is in the family.
    pub fn has(&self, head: &Head) -> bool {
        axes_of(head).is_some_and(|m| (self.members)(&m))
    }

    /// How a split of `head`'s outputs along `axis` splits its inputs, or
    /// `None` when the op is not independent along it (or not in the family).
    pub fn split_inputs(&self, head: &Head, inputs: &[Option<&Shape>], axis: usize, opset: i64) -> Option<InputSplits> {
        if !self.has(head) {
            return None;
        }
        by_axes(head, inputs, axis, opset)
    }
}

/// Every family, in rule order.
pub const FAMILIES: &[Family] = &[
    Family { name: "elementwise", members: |m| *m == AxesMap::Elementwise },
    Family { name: "windowed", members: |m| matches!(m, AxesMap::Windowed(_)) },
    Family { name: "normalization", members: |m| matches!(m, AxesMap::Normalized { .. } | AxesMap::Channels { .. }) },
    Family { name: "matmul", members: |m| matches!(m, AxesMap::MatMul | AxesMap::Gemm) },
    Family {
        name: "layout",
        members: |m| {
            matches!(
                m,
                AxesMap::Transpose
                    | AxesMap::Samples { .. }
                    | AxesMap::UnitAxes
                    | AxesMap::Expand
                    | AxesMap::Acting(_)
                    | AxesMap::Gathered { .. }
            )
        },
    },
    Family { name: "reduction", members: |m| matches!(m, AxesMap::Reduced { .. }) },
    Family { name: "loss", members: |m| *m == AxesMap::Positions },
    Family { name: "chunks", members: |m| *m == AxesMap::Chunks },
    Family { name: "leading", members: |m| matches!(m, AxesMap::Leading { .. }) },
];

/// The family `head`'s op belongs to.
pub fn family_of(head: &Head) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.has(head))
}

/// The axes map of `head`'s op (of the ONNX default domain or the lms domain).
pub fn axes_of(head: &Head) -> Option<AxesMap> {
    (head.domain.is_empty() || head.domain == lms_proto::contract::LMS_DOMAIN).then(|| axes::of(&head.op)).flatten()
}

/// The op's axes map along `axis`: its inputs split where the map says it is
/// independent there. A windowed op's spatial axes need halos and per-part
/// padding (Split-CNN §3.1), and a convolution mixes channels: never
/// distributed over a concatenation.
fn by_axes(head: &Head, inputs: &[Option<&Shape>], axis: usize, opset: i64) -> Option<InputSplits> {
    let out = head.outputs.first()?;
    let shapes: Vec<Option<&[usize]>> = inputs.iter().map(|s| s.map(|s| &s[..])).collect();
    let node = axes::Node { inputs: &shapes, outputs: head.outputs.len(), out: &out.shape, attrs: &head.attrs, opset };
    match axes_of(head)?.output_axis(&node, axis) {
        OutputAxis::Independent(slots) => Some(slots),
        OutputAxis::Windowed | OutputAxis::Coupled => None,
    }
}
