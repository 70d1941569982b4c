//! A Statistics run (`shape::split`): BatchNormTrain or BatchNormGrad split
//! along the batch as its [`Form`] states it (`egraph::rules::batch_norm`,
//! which proves it). Per part, the `SplitPart`s of its sliced inputs and its
//! statistics op; then the merge; then per part the apply op; the applied
//! parts are concatenated into output 0, and the op's other outputs, the
//! running statistics' update edges included, become the merge's.

use super::emit::{node_error, slice_type, split_part, Piece, Run};
use super::SplitReport;
use crate::egraph::rules::batch_norm::{Form, Source};
use crate::ir::{Action, Attr, Attrs, Graph, Node, NodeId, TensorId, TensorType};
use crate::pipeline::{NewNode, NodeRef, Patch, Position, TensorRef};
use std::collections::HashSet;

/// Whether the op of `node` splits by its statistics; the error says why not.
pub(super) fn check(g: &Graph, node: NodeId) -> crate::error::Result<&'static Form> {
    let n = g.node(node);
    let form = Form::of(&n.op).ok_or_else(|| node_error(g, node, "has no statistics split".into()))?;
    let ranked = n.inputs.first().copied().flatten().is_some_and(|x| g.tensor(x).ty.rank() >= 2);
    if !ranked || n.inputs.len() < form.slots() || n.inputs.iter().any(Option::is_none) || n.outputs.len() < 2 {
        return Err(node_error(
            g,
            node,
            "needs all its inputs and outputs, X of rank 2 or more, to be split by its statistics".into(),
        ));
    }
    Ok(form)
}

/// Adds the run of one BatchNormTrain or BatchNormGrad to `patch` (see the
/// module documentation); additions go after the op's closest predecessor
/// that no run removes.
pub(super) fn emit(run: &Run<'_>, g: &Graph, removed: &HashSet<NodeId>, patch: &mut Patch) -> SplitReport {
    let id = run.covered[0].node;
    let node = g.node(id);
    let form = Form::of(&node.op).expect("a Statistics run is planned only for ops with a Form");
    let parts = run.request.parts;
    let schedule = g.schedule();
    let position = schedule.iter().position(|&n| n == id).expect("the op is scheduled");
    let before = schedule[..position].iter().rev().find(|n| !removed.contains(n));
    let at = Position::After(*before.expect("an op runs after the nodes it reads"));
    let input = |slot: usize| node.inputs[slot].expect("checked when planned");
    let output_types: Vec<TensorType> = node.outputs.iter().map(|&t| g.tensor(t).ty.clone()).collect();
    let channels = g.tensor(input(0)).ty.shape[1];
    let (statistics_ty, merged_tys) = form.types(channels, &output_types);
    let sliced = form.sliced();
    let lms_node = |name: String, op: &str, attrs: Attrs| super::emit::lms_node(node, name, op, attrs);
    let refs = |sources: &[Source], pieces: &[NewNode], merged: Option<TensorRef>| -> Vec<Option<TensorRef>> {
        sources
            .iter()
            .map(|&s| match s {
                Source::Part(slot) => sliced.iter().position(|&k| k == slot).map(|k| TensorRef::New(pieces[k], 0)),
                Source::Whole(slot) => Some(TensorRef::Existing(input(slot))),
                Source::Merged => merged,
            })
            .collect()
    };
    let piece = |t: TensorId, i: usize| Piece {
        ty: &g.tensor(t).ty,
        whole: TensorRef::Existing(t),
        name: format!("{}.split{i}of{parts}", g.tensor(t).name),
        axis: 0,
        index: i,
        parts,
    };
    let mut added = Vec::new();
    let mut pieces = Vec::with_capacity(parts);
    let mut merge_inputs: Vec<Option<TensorRef>> =
        form.merge_inputs.iter().map(|&slot| Some(TensorRef::Existing(input(slot)))).collect();
    for i in 0..parts {
        let part: Vec<NewNode> =
            sliced.iter().map(|&slot| split_part(node, piece(input(slot), i), at, patch)).collect();
        let name = format!("{}.part{i}.statistics", node.name);
        let output = (name.clone(), statistics_ty.clone());
        let statistics = patch.add_node(
            lms_node(name, form.statistics, Attrs::new()),
            refs(form.statistics_inputs, &part, None),
            vec![output],
            at,
        );
        merge_inputs.push(Some(TensorRef::New(statistics, 0)));
        added.push(statistics);
        pieces.push(part);
    }
    let merge_name = format!("{}.merge", node.name);
    let names = node.outputs[1..].iter().map(|&t| format!("{}.merged", g.tensor(t).name));
    let names = names.chain([format!("{merge_name}.statistics")]);
    let merge_outputs: Vec<(String, TensorType)> = names.zip(merged_tys).collect();
    let last = merge_outputs.len() - 1;
    let merge = patch.add_node(
        lms_node(merge_name, form.merge, form.merge_attrs(&node.attrs)),
        merge_inputs,
        merge_outputs,
        at,
    );
    added.push(merge);
    let y = g.tensor(node.outputs[0]);
    let mut applied = Vec::with_capacity(parts);
    for (i, part) in pieces.iter().enumerate() {
        let name = format!("{}.part{i}", node.name);
        let output = (format!("{}.part{i}", y.name), slice_type(&y.ty, 0, i, parts));
        let inputs = refs(form.apply_inputs, part, Some(TensorRef::New(merge, last)));
        let apply = patch.add_node(lms_node(name, form.apply, Attrs::new()), inputs, vec![output], at);
        added.push(apply);
        applied.push(Some(TensorRef::New(apply, 0)));
    }
    let concat = Node {
        name: format!("{}.merge", y.name),
        op: "Concat".into(),
        domain: String::new(),
        attrs: Attrs::new().with("axis", Attr::Int(0)),
        inputs: vec![],
        outputs: vec![],
        ..node.clone()
    };
    let concat = patch.add_node(concat, applied, vec![(format!("{}.merged", y.name), y.ty.clone())], at);
    let whole = |slot: usize| if slot == 0 { TensorRef::New(concat, 0) } else { TensorRef::New(merge, slot - 1) };
    for (slot, &t) in node.outputs.iter().enumerate() {
        for (reader, input) in g.readers(t) {
            patch.rewire(reader, input, whole(slot));
        }
    }
    for (after, edge) in g.out_edges(id) {
        match edge.action {
            Action::Update => patch.add_update_edge(whole(edge.src_slot), after),
            Action::Control if !removed.contains(&after) => {
                for &n in &added {
                    patch.add_control_edge(NodeRef::New(n), NodeRef::Existing(after));
                }
            }
            _ => {}
        }
    }
    for (before, edge) in g.in_edges(id) {
        if edge.action == Action::Control && !removed.contains(&before) {
            for &n in &added {
                patch.add_control_edge(NodeRef::Existing(before), NodeRef::New(n));
            }
        }
    }
    patch.remove_node(id);
    SplitReport {
        request: run.request.clone(),
        merge: "statistics merged across parts".into(),
        covered: vec![node.name.clone()],
        splits: sliced.iter().map(|&slot| g.tensor(input(slot)).name.clone()).collect(),
        merges: vec![y.name.clone()],
    }
}
