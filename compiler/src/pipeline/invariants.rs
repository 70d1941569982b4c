//! The invariants every pass must keep, checked by the pass manager after
//! each one: no dangling ids, edges that mirror the slots, a schedule that
//! holds every node once and runs each after everything it reads or is
//! ordered after (which also proves the graph acyclic, control edges
//! included), and consistent types where one tensor stands for another.

use crate::analysis::order;
use crate::ir::{Action, Graph, NodeId, TensorId, SWAP_IN_OP, SWAP_OUT_OP};
use lms_proto::contract::LMS_DOMAIN;

/// Checks `g`; the problem found first, in words naming the node or tensor.
pub fn check(g: &Graph) -> Result<(), String> {
    let live = |t: TensorId| t.index() < g.tensor_count() && g.contains_node(g.tensor(t).producer.0);
    let live_node = |id: NodeId| g.contains_node(id);
    for &id in g.schedule() {
        if !live_node(id) {
            return Err(format!("the schedule names node {} which is not in the graph", id.index()));
        }
        let node = g.node(id);
        if let Some(slot) = node.inputs.iter().position(|t| t.is_some_and(|t| !live(t))) {
            return Err(format!("node '{}' input {slot} reads a tensor whose producer was removed", node.name));
        }
    }
    for (what, list) in [("input", &g.inputs), ("output", &g.outputs)] {
        if list.iter().any(|&t| !live(t)) {
            return Err(format!("a graph {what} is a tensor whose producer was removed"));
        }
    }
    for swap in &g.plan.swaps {
        let nodes = std::iter::once(swap.swap_out)
            .chain(swap.swap_ins.iter().flat_map(|s| std::iter::once(s.node).chain(s.trigger)));
        if !live(swap.tensor) || !nodes.into_iter().all(live_node) {
            return Err("the plan names a node or tensor that is not in the graph".into());
        }
    }
    for r in &g.plan.recomputes {
        if !live(r.tensor) || !r.chain.iter().copied().chain([r.before]).all(live_node) {
            return Err("the plan names a node or tensor that is not in the graph".into());
        }
    }
    g.verify().map_err(|e| e.to_string())?;
    let mut seen = vec![false; g.node_bound()];
    for &id in g.schedule() {
        if std::mem::replace(&mut seen[id.index()], true) {
            return Err(format!("the schedule runs node '{}' twice", g.node(id).name));
        }
    }
    if let Some(id) = g.node_ids().find(|id| !seen[id.index()]) {
        return Err(format!("the schedule never runs node '{}'", g.node(id).name));
    }
    if let Some((node, needs)) = order::schedule_violation(g) {
        return Err(format!(
            "the schedule runs node '{}' before '{}', which it depends on",
            g.node(node).name,
            g.node(needs).name
        ));
    }
    check_types(g)
}

/// A value written into a variable has the variable's type; a swap op's
/// output has its input's type.
fn check_types(g: &Graph) -> Result<(), String> {
    for (_, dst, e) in g.edges() {
        if let (Action::Update, Some(t)) = (e.action, e.tensor) {
            let var = g.node(dst).outputs.first().map(|&v| &g.tensor(v).ty);
            if var != Some(&g.tensor(t).ty) {
                return Err(format!(
                    "tensor '{}' updates variable '{}' of another type",
                    g.tensor(t).name,
                    g.node(dst).name
                ));
            }
        }
    }
    for &id in g.schedule() {
        let node = g.node(id);
        if node.domain == LMS_DOMAIN && (node.op == SWAP_IN_OP || node.op == SWAP_OUT_OP) {
            let same = match (node.inputs.as_slice(), node.outputs.as_slice()) {
                ([Some(i)], [o]) => g.tensor(*i).ty == g.tensor(*o).ty,
                _ => false,
            };
            if !same {
                return Err(format!("swap op '{}' does not copy one tensor to one of the same type", node.name));
            }
        }
    }
    Ok(())
}
