//! When an op is independent along an axis of its output, so that
//! `op(concat_d(a, b)) = concat_d(op(a), op(b))`: the conditions of the
//! distribution rules, one named function per family of ops.
//!
//! The elementwise, windowed and leading families are the ops whose definition
//! has an axes map of that kind (`shape::axes`), and their condition is the
//! map's; the other families still state their ops and condition here.
//!
//! A condition gets the op's head, its inputs' shapes (`None` for an omitted
//! input) and an axis of its outputs, and answers how a split of the outputs
//! along that axis splits the inputs: for each input, the axis along which it
//! is split into the same parts, or `None` where every part reads the whole
//! input. `None` overall means the parts would not be independent.
//!
//! Not independent, so never distributed: ops that reduce or couple along
//! the axis. BatchNormalization in training (`BatchNormTrain`) computes
//! statistics over the batch; Softmax along its own axis; ConvGradWeight,
//! ConvGradBias and a MatMul split along its reduction axis need a sum of the
//! parts, not a concatenation; losses divide by the total count (the softmax
//! cross-entropy gradient distributes only with its parts told that count,
//! `shape::split::whole_count_attrs`); dropout draws its mask by position. Windowed ops split along
//! a spatial axis need halos and per-part padding (Split-CNN §3); those
//! splits are the `distribute-halo` rule's (`halo.rs`), never distributed here.

use crate::egraph::lang::{axis as onnx_axis, Head};
use crate::ir::Shape;
use crate::shape::axes::{self, AxesMap, OutputAxis};
use crate::shape::SoftmaxAxis;

/// For each input: the axis along which it is split, or `None` when every
/// part reads it whole.
pub type InputSplits = Vec<Option<usize>>;

/// The condition of a family: head, input shapes, output axis, opset.
type Condition = fn(&Head, &[Option<&Shape>], usize, i64) -> Option<InputSplits>;

/// Ops that distribute over concatenation under one condition; each family
/// is one rule, `distribute-{name}`.
pub struct Family {
    /// The rule's name is `distribute-{name}`.
    pub name: &'static str,
    /// Its ops.
    members: Members,
    condition: Condition,
}

/// The ops of a family.
enum Members {
    /// Op types of the ONNX default domain or the lms domain.
    Ops(&'static [&'static str]),
    /// The ops whose axes map this says yes to.
    Axes(fn(&AxesMap) -> bool),
}

impl Family {
    /// Whether `head`'s op is in the family.
    pub fn has(&self, head: &Head) -> bool {
        match self.members {
            Members::Ops(ops) => ops.iter().any(|op| head.is(op)),
            Members::Axes(kind) => axes_of(head).is_some_and(|m| kind(&m)),
        }
    }

    /// How a split of `head`'s outputs along `axis` splits its inputs, or
    /// `None` when the op is not independent along it (or not in the family).
    pub fn split_inputs(&self, head: &Head, inputs: &[Option<&Shape>], axis: usize, opset: i64) -> Option<InputSplits> {
        if !self.has(head) {
            return None;
        }
        (self.condition)(head, inputs, axis, opset)
    }
}

/// Every family, in rule order.
pub const FAMILIES: &[Family] = &[
    Family { name: "elementwise", members: Members::Axes(|m| *m == AxesMap::Elementwise), condition: by_axes },
    Family {
        name: "windowed",
        members: Members::Axes(|m| matches!(m, AxesMap::Windowed(w) if w.data > 0)),
        condition: by_axes,
    },
    Family { name: "normalization", members: Members::Ops(NORMALIZATION), condition: outside_normalized_axes },
    Family { name: "matmul", members: Members::Ops(&["MatMul", "Gemm"]), condition: matmul },
    Family { name: "layout", members: Members::Ops(&["Transpose", "Flatten", "ReshapeTo"]), condition: layout },
    Family { name: "loss", members: Members::Ops(&["SoftmaxCrossEntropyGrad"]), condition: positions },
    Family { name: "chunks", members: Members::Ops(&["Split"]), condition: chunks },
    Family { name: "leading", members: Members::Axes(|m| matches!(m, AxesMap::Leading { .. })), condition: by_axes },
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
fn by_axes(head: &Head, inputs: &[Option<&Shape>], axis: usize, _: i64) -> Option<InputSplits> {
    let out = head.outputs.first()?;
    let shapes: Vec<Option<&[usize]>> = inputs.iter().map(|s| s.map(|s| &s[..])).collect();
    match axes_of(head)?.output_axis(&shapes, head.outputs.len(), &out.shape, axis) {
        OutputAxis::Independent(slots) => Some(slots),
        OutputAxis::Windowed | OutputAxis::Coupled => None,
    }
}

/// The axis of an input of rank `shape.len()` that lines up with output
/// axis `axis` under numpy broadcasting (shapes aligned on the right).
fn aligned(shape: &Shape, out_rank: usize, axis: usize) -> Option<usize> {
    (axis + shape.len()).checked_sub(out_rank)
}

/// Ops that normalise along some axes.
const NORMALIZATION: &[&str] = &["Softmax", "LogSoftmax", "SoftmaxGrad", "LogSoftmaxGrad", "LayerNormalization"];

/// Softmax and LogSoftmax (and their gradients) normalise along `axis`
/// (opset 13 and on) or, coerced to 2-D, along every axis from `axis` on;
/// LayerNormalization along every axis from `axis` on. Independent along
/// the other axes; scale and bias are read whole.
fn outside_normalized_axes(head: &Head, inputs: &[Option<&Shape>], axis: usize, opset: i64) -> Option<InputSplits> {
    let rank = head.outputs.first()?.rank();
    let (first, coerced) = normalized_axes(head, rank, opset)?;
    let independent = if coerced { axis < first } else { axis != first };
    if !independent {
        return None;
    }
    let split_inputs = if head.is("SoftmaxGrad") || head.is("LogSoftmaxGrad") { 2 } else { 1 };
    Some((0..inputs.len()).map(|slot| (slot < split_inputs).then_some(axis)).collect())
}

/// The first normalised axis, and whether every later axis is normalised too.
fn normalized_axes(head: &Head, rank: usize, opset: i64) -> Option<(usize, bool)> {
    if head.is("LayerNormalization") {
        return Some((onnx_axis(head.int("axis", -1), rank)?, true));
    }
    let form = if head.is("SoftmaxGrad") || head.is("LogSoftmaxGrad") {
        SoftmaxAxis::new(head.int("coerce", 0) == 1)
    } else {
        SoftmaxAxis::at_opset(opset)
    };
    Some((onnx_axis(head.int("axis", form.default), rank)?, form.coerced))
}

/// MatMul `[..., M, K] @ [..., K, N]`: independent along the batch axes
/// (broadcast like an elementwise op), the rows M of A (B whole) and the
/// columns N of B (A whole). The reduction axis K is no output axis, so a
/// split along it never distributes (its parts must be summed). Gemm:
/// along its rows (A split, B whole, C split or broadcast).
fn matmul(head: &Head, inputs: &[Option<&Shape>], axis: usize, _: i64) -> Option<InputSplits> {
    let [out] = &head.outputs[..] else {
        return None;
    };
    let (rank, len) = (out.rank(), *out.shape.get(axis)?);
    if head.is("Gemm") {
        let [Some(_), Some(_), c @ ..] = inputs else {
            return None;
        };
        if axis != 0 {
            return None;
        }
        let a_rows = if head.int("transA", 0) == 0 { 0 } else { 1 };
        let c_split = match c.first().copied().flatten() {
            Some(c) if c.len() == 2 && c[0] == len && len > 1 => Some(0),
            _ => None,
        };
        return Some([Some(a_rows), None].into_iter().chain(c.iter().map(|_| c_split)).collect());
    }
    let [Some(a), Some(b)] = inputs else {
        return None;
    };
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    if axis == rank - 2 {
        return Some(vec![Some(a.len() - 2), None]);
    }
    if axis == rank - 1 {
        return Some(vec![None, Some(b.len() - 1)]);
    }
    // A batch axis: each operand lacks it, broadcasts it, or is split along it.
    let batch = |s: &Shape| match aligned(s, rank, axis).filter(|&x| x + 2 < s.len()) {
        None => Some(None),
        Some(x) if s[x] == len => Some(Some(x)),
        Some(x) if s[x] == 1 => Some(None),
        Some(_) => None,
    };
    Some(vec![batch(a)?, batch(b)?])
}

/// The softmax cross-entropy gradient works on each position (every axis
/// of the logits but the last, the classes) with its labels; its parts
/// divide by the whole op's positions.
fn positions(head: &Head, inputs: &[Option<&Shape>], axis: usize, _: i64) -> Option<InputSplits> {
    let [Some(logits), Some(labels)] = inputs else {
        return None;
    };
    (axis + 1 < logits.len() && labels.len() + 1 == logits.len() && head.outputs.len() == 1)
        .then(|| vec![Some(axis), Some(axis)])
}

/// Split cuts its input into chunks along its own axis; along any other
/// axis every chunk is independent (input 0 split like the outputs, the
/// chunk sizes read whole).
fn chunks(head: &Head, inputs: &[Option<&Shape>], axis: usize, _: i64) -> Option<InputSplits> {
    let [Some(x), rest @ ..] = inputs else {
        return None;
    };
    let own = onnx_axis(head.int("axis", 0), x.len())?;
    (axis != own && axis < x.len()).then(|| std::iter::once(Some(axis)).chain(rest.iter().map(|_| None)).collect())
}

/// Transpose moves axis `perm[o]` of its input to output axis `o`; Flatten
/// at axis 1 and ReshapeTo keep axis 0 when its length is unchanged, so
/// each sample stays one contiguous block.
fn layout(head: &Head, inputs: &[Option<&Shape>], axis: usize, _: i64) -> Option<InputSplits> {
    let [out] = &head.outputs[..] else {
        return None;
    };
    let [Some(x), rest @ ..] = inputs else {
        return None;
    };
    let whole_rest = rest.iter().map(|_| None);
    if head.is("Transpose") {
        let perm = match head.attrs.ints_opt("perm") {
            Ok(Some(p)) => p,
            _ => (0..x.len() as i64).rev().collect(),
        };
        let from = onnx_axis(*perm.get(axis)?, x.len())?;
        return Some(std::iter::once(Some(from)).chain(whole_rest).collect());
    }
    let keeps_samples = axis == 0 && x.first() == out.shape.first();
    // Flatten's axis may equal the rank; negative values count from it.
    let flatten_at = head.int("axis", 1);
    let flatten_ok = !head.is("Flatten") || flatten_at == 1 || flatten_at + x.len() as i64 == 1;
    (keeps_samples && flatten_ok).then(|| std::iter::once(Some(0)).chain(whole_rest).collect())
}
