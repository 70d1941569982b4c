//! The budget planner's split (TSPLIT §III-B, sample dimension): every op
//! whose sliced tensors reach a size runs in parts along the batch, as far as
//! the e-graph's independence conditions allow, and ops that reduce over the
//! batch (weight gradients) add up their parts' partial results when those
//! stay small. Consecutive such ops run depth-first (`blocks`), so a large
//! activation exists only as micro-tensors that the planner can then swap or
//! recompute one by one.

use super::batch_norm;
use super::blocks;
use super::emit::{part_axis, remove_dead_shapes, unsplittable_outputs, writes_variable, Covered, MergeKind};
use super::PASS;
use crate::egraph::lang::TermAnalysis;
use crate::ir::{Graph, NodeId};
use crate::pipeline::Patch;
use crate::shape::cost::CostNode;
use crate::shape::split::{self, Combine, Dim};
use serde::Serialize;
use std::collections::HashMap;

/// A batch split of the whole graph: which ops and in how many parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct BatchSplit {
    /// Parts each op runs in.
    pub parts: usize,
    /// Only ops whose sliced inputs and outputs add up to at least this
    /// many bytes run in parts.
    pub min_bytes: u64,
}

/// What a batch split did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct BatchSplitReport {
    /// The split.
    pub split: BatchSplit,
    /// Ops run in parts.
    pub ops: usize,
    /// Of those, ops whose parts' partial results are added up.
    pub summed: usize,
    /// Tensors split by `SplitPart`s.
    pub splits: usize,
    /// Tensors merged from their parts.
    pub merges: usize,
}

/// A reducing op runs in parts only when its running sum and one partial
/// result (each of the whole output's size) take at most this share of the
/// bytes its parts slice.
const MAX_PARTIAL_SHARE: u64 = 4;

/// The patch running `g` under `split`, and what it did; `None` when no op
/// qualifies.
pub fn batch_patch(g: &Graph, split: &BatchSplit) -> Option<(Patch, BatchSplitReport)> {
    let covered = covered(g, split);
    if covered.is_empty() {
        return None;
    }
    let mut patch = Patch::new(PASS);
    let mut removed = covered.iter().map(|c| c.node).collect();
    remove_dead_shapes(g, &covered, &mut removed, &mut patch);
    let emitted = blocks::emit(g, &covered, &removed, &mut patch);
    let report = BatchSplitReport {
        split: *split,
        ops: covered.len(),
        summed: covered.iter().filter(|c| c.merge == MergeKind::Sum).count(),
        splits: emitted.splits.len(),
        merges: emitted.merges.len(),
    };
    Some((patch, report))
}

/// The ops `split` runs in parts, in schedule order.
fn covered(g: &Graph, split: &BatchSplit) -> Vec<Covered> {
    let mut analysis = TermAnalysis::new(g.opset);
    let none = HashMap::new();
    let mut covered = Vec::new();
    for &m in g.schedule() {
        let node = g.node(m);
        if node.parameterized || node.outputs.is_empty() {
            continue;
        }
        if let Ok(form) = batch_norm::check(g, m) {
            if unsplittable_outputs(g, m).is_some() {
                continue;
            }
            // Batch normalization: statistics per part, merged across them.
            let x = g.tensor(node.inputs[0].expect("checked"));
            let sliced = form.sliced();
            let inputs = (0..node.inputs.len()).map(|slot| sliced.contains(&slot).then_some(0)).collect();
            let made = g.tensor(node.outputs[0]).ty.bytes();
            if x.ty.shape[0] >= split.parts && x.ty.bytes() + made >= split.min_bytes {
                covered.push(Covered { node: m, merge: MergeKind::Statistics, inputs, parts: split.parts });
            }
            continue;
        }
        if writes_variable(g, m).is_some() {
            continue;
        }
        let bytes = |slots: &[Option<usize>], with_outputs: bool| -> u64 {
            let sliced: u64 = node
                .inputs
                .iter()
                .zip(slots)
                .filter_map(|(t, axis)| t.filter(|_| axis.is_some()).map(|t| g.tensor(t).ty.bytes()))
                .sum();
            let made: u64 = if with_outputs { node.outputs.iter().map(|&t| g.tensor(t).ty.bytes()).sum() } else { 0 };
            sliced + made
        };
        let long_enough = |slots: &[Option<usize>]| {
            node.inputs.iter().zip(slots).all(|(t, axis)| match (t, axis) {
                (Some(t), Some(a)) => g.tensor(*t).ty.shape.get(*a).is_some_and(|&len| len >= split.parts),
                _ => true,
            })
        };
        if let Some((0, inputs)) = part_axis(g, &mut analysis, m, &none, Some(0)) {
            let rows = g.tensor(node.outputs[0]).ty.shape.first().copied().unwrap_or(0);
            if rows >= split.parts && long_enough(&inputs) && bytes(&inputs, true) >= split.min_bytes {
                covered.push(Covered { node: m, merge: MergeKind::Concat(0), inputs, parts: split.parts });
            }
            continue;
        }
        if let Some(inputs) = batch_sum(g, m) {
            let partials: u64 = node.outputs.iter().map(|&t| g.tensor(t).ty.bytes()).sum::<u64>() * 2;
            let sliced = bytes(&inputs, false);
            if long_enough(&inputs) && sliced >= split.min_bytes && partials * MAX_PARTIAL_SHARE <= sliced {
                covered.push(Covered { node: m, merge: MergeKind::Sum, inputs, parts: split.parts });
            }
        }
    }
    covered
}

/// How op `m`'s inputs are sliced when it sums partial results over the
/// batch (its family's Sum rule along the batch), if it has one.
fn batch_sum(g: &Graph, m: NodeId) -> Option<Vec<Option<usize>>> {
    let node = g.node(m);
    let inputs: Vec<_> = node.inputs.iter().map(|t| t.map(|t| &g.tensor(t).ty)).collect();
    let outputs: Vec<_> = node.outputs.iter().map(|&t| &g.tensor(t).ty).collect();
    let cost = CostNode { op: &node.op, attrs: &node.attrs, inputs: &inputs, outputs: &outputs };
    split::rules(&cost).into_iter().find(|r| r.dim == Dim::Batch && r.combine == Combine::Sum).map(|r| r.inputs)
}
