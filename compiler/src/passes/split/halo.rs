//! Spatial (halo) splits of one windowed op (Split-CNN §3): the op runs as
//! micro-ops on the output ranges of `shape::split::halo_parts`, each with
//! its own pads. A forward op (Conv, MaxPool, AveragePool) reads an
//! overlapping window of its input through lms `SplitWindow` and its parts
//! are concatenated; a gradient op reads `SplitPart` ranges of its output
//! gradient and windows of its forward input, and its parts' input-gradient
//! windows are added into place by lms `OverlapAdd` (ConvGradData,
//! MaxPoolGrad, AveragePoolGrad) or its partial weight gradients summed by
//! ONNX `Sum` (ConvGradWeight). `egraph::rules::halo` proves exactly these
//! forms.

use super::emit::{node_error, unsplittable};
use super::{SplitReport, SplitRequest};
use crate::error::Result;
use crate::ir::{Action, Attr, Attrs, Graph, Node, NodeId, TensorType, OVERLAP_ADD_OP, SPLIT_PART_OP, SPLIT_WINDOW_OP};
use crate::pipeline::{NewNode, NodeRef, Patch, Position, TensorRef};
use crate::shape::cost::CostNode;
use crate::shape::split::{self, AxisWindow, HaloOutput, HaloPart};
use lms_proto::contract::LMS_DOMAIN;
use std::collections::HashSet;

/// A planned halo split of one op.
pub(super) struct Halo {
    /// The spatial axis.
    pub axis: usize,
    /// How the parts make the op's output.
    pub output: HaloOutput,
    /// For each input slot, whether the parts slice it (along `axis`).
    pub sliced: Vec<bool>,
    /// The parts' ranges, windows and pads.
    pub parts: Vec<HaloPart>,
}

impl Halo {
    /// Plans the halo split of `node` along `axis` in `parts` parts, from
    /// its rule's sliced inputs; fails naming the op when its window does
    /// not allow it.
    pub fn plan(
        g: &Graph,
        node: NodeId,
        axis: usize,
        output: HaloOutput,
        inputs: &[Option<usize>],
        parts: usize,
    ) -> Result<Halo> {
        let fail = |reason: String| node_error(g, node, reason);
        let n = g.node(node);
        let in_types: Vec<Option<&TensorType>> = n.inputs.iter().map(|t| t.map(|t| &g.tensor(t).ty)).collect();
        let out_types: Vec<&TensorType> = n.outputs.iter().map(|&t| &g.tensor(t).ty).collect();
        let cost = CostNode { op: &n.op, attrs: &n.attrs, inputs: &in_types, outputs: &out_types };
        let window: AxisWindow = split::axis_window(&cost, axis)
            .ok_or_else(|| fail(format!("its window along axis {axis} does not fit its shapes")))?;
        if window.output < parts {
            return Err(fail(format!(
                "its window makes {} positions along axis {axis}, fewer than {parts} parts",
                window.output
            )));
        }
        let halo_parts = split::halo_parts(&window, parts);
        if let Some(empty) = halo_parts.iter().position(|p| p.input.is_empty()) {
            return Err(fail(format!("part {empty} of its split along axis {axis} reads only padding")));
        }
        if n.outputs.len() != 1 {
            return Err(fail("has more than one output".into()));
        }
        if let Some(reason) = unsplittable(g, node) {
            return Err(fail(reason));
        }
        Ok(Halo { axis, output, sliced: inputs.iter().map(Option::is_some).collect(), parts: halo_parts })
    }

    /// Adds the split of `node` to `patch` after the closest node before it
    /// in the schedule that no run removes: for each part, the windows and
    /// ranges it reads, then the micro-op; then the merge, which the op's
    /// readers are rewired to; the op is removed.
    pub fn emit(
        &self,
        g: &Graph,
        request: &SplitRequest,
        id: NodeId,
        removed: &HashSet<NodeId>,
        patch: &mut Patch,
    ) -> SplitReport {
        let node = g.node(id);
        let schedule = g.schedule();
        let position = schedule.iter().position(|&n| n == id).expect("the op is scheduled");
        let before = schedule[..position].iter().rev().find(|n| !removed.contains(n));
        let at = Position::After(*before.expect("an op runs after the nodes it reads"));
        let count = self.parts.len();
        let spatial = g.tensor(node.inputs[0].expect("a windowed op reads input 0")).ty.rank() - 2;
        let out = node.outputs[0];
        let whole = &g.tensor(out).ty;
        let mut sliced_names = Vec::new();
        let mut made = Vec::with_capacity(count);
        for (i, part) in self.parts.iter().enumerate() {
            let mut inputs = Vec::with_capacity(node.inputs.len());
            for (slot, &t) in node.inputs.iter().enumerate() {
                let Some(t) = t.filter(|_| self.sliced[slot]) else {
                    inputs.push(t.map(TensorRef::Existing));
                    continue;
                };
                let tensor = g.tensor(t);
                if i == 0 {
                    sliced_names.push(tensor.name.clone());
                }
                let (op, attrs, range) = if self.output.windows(slot) {
                    (SPLIT_WINDOW_OP, split::window_attrs(self.axis, &part.input), &part.input)
                } else {
                    let attrs = Attrs::new()
                        .with("axis", Attr::Int(self.axis as i64))
                        .with("index", Attr::Int(i as i64))
                        .with("parts", Attr::Int(count as i64));
                    (SPLIT_PART_OP, attrs, &part.output)
                };
                let name = format!("{}.part{i}.in{slot}", node.name);
                let piece = super::emit::lms_node(node, name.clone(), op, attrs);
                let ty = split::with_len(&tensor.ty, self.axis, range.len());
                let piece = patch.add_node(piece, vec![Some(TensorRef::Existing(t))], vec![(name, ty)], at);
                inputs.push(Some(TensorRef::New(piece, 0)));
            }
            let micro = Node {
                name: format!("{}.part{i}", node.name),
                attrs: split::part_attrs(&node.attrs, self.axis, spatial, part),
                inputs: vec![],
                outputs: vec![],
                ..node.clone()
            };
            let ty = split::with_len(whole, self.axis, self.output.part_len(part, whole.shape[self.axis]));
            let micro = patch.add_node(micro, inputs, vec![(format!("{}.part{i}", g.tensor(out).name), ty)], at);
            let control = |(n, e): &(NodeId, &crate::ir::Edge)| e.action == Action::Control && !removed.contains(n);
            for (before, _) in g.in_edges(id).filter(control) {
                patch.add_control_edge(NodeRef::Existing(before), NodeRef::New(micro));
            }
            for (after, _) in g.out_edges(id).filter(control) {
                patch.add_control_edge(NodeRef::New(micro), NodeRef::Existing(after));
            }
            made.push(micro);
        }
        let merged = self.merge(g, node, &made, at, patch);
        for (reader, input) in g.readers(out).collect::<Vec<_>>() {
            patch.rewire(reader, input, TensorRef::New(merged, 0));
        }
        patch.remove_node(id);
        SplitReport {
            request: request.clone(),
            merge: self.describe(),
            covered: vec![node.name.clone()],
            splits: sliced_names,
            merges: vec![g.tensor(out).name.clone()],
        }
    }

    /// Adds the merge of the parts' outputs `made`.
    fn merge(&self, g: &Graph, node: &Node, made: &[NewNode], at: Position, patch: &mut Patch) -> NewNode {
        let tensor = g.tensor(node.outputs[0]);
        let (op, domain, attrs) = match self.output {
            HaloOutput::Concat => ("Concat", "", Attrs::new().with("axis", Attr::Int(self.axis as i64))),
            HaloOutput::OverlapAdd => (OVERLAP_ADD_OP, LMS_DOMAIN, split::overlap_add_attrs(self.axis, &self.parts)),
            HaloOutput::Sum => ("Sum", "", Attrs::new()),
        };
        let merge = Node {
            name: format!("{}.merge", tensor.name),
            op: op.into(),
            domain: domain.into(),
            attrs,
            inputs: vec![],
            outputs: vec![],
            ..node.clone()
        };
        let pieces = made.iter().map(|&m| Some(TensorRef::New(m, 0))).collect();
        patch.add_node(merge, pieces, vec![(format!("{}.merged", tensor.name), tensor.ty.clone())], at)
    }

    /// How the parts are merged, for the report.
    fn describe(&self) -> String {
        let how = match self.output {
            HaloOutput::Concat => "concat",
            HaloOutput::OverlapAdd => "overlap-add",
            HaloOutput::Sum => "sum",
        };
        format!("{how} of halo parts along axis {}", self.axis)
    }
}
