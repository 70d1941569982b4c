//! Execution ordering: the topological ordering γ of TFLMS Definition 2,
//! and the default schedule (a deterministic topological order).
//!
//! Both follow read and control edges; update edges into variables are
//! ignored, as Definition 2 prescribes ("incoming update edges do not move a
//! variable").

use crate::ir::{Action, CycleError, Graph, NodeId};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// True for edges that order execution: reads and control edges.
fn orders(action: Action) -> bool {
    action != Action::Update
}

/// A topological order that, among the nodes ready to run, always picks the
/// one earliest in the graph's stored schedule ([`Graph::schedule`]). It is
/// the stored schedule itself whenever that respects every read and control
/// edge, so it only reorders graphs whose builders added a node before one it
/// depends on. For a graph read from ONNX it is the file's node order
/// whenever that order is valid.
pub fn schedule(g: &Graph) -> Result<Vec<NodeId>, CycleError> {
    let mut rank = vec![u32::MAX; g.node_bound()];
    for (i, id) in g.schedule().iter().enumerate() {
        rank[id.index()] = i as u32;
    }
    let mut indegree = vec![0usize; g.node_bound()];
    for (_, dst, e) in g.edges() {
        if orders(e.action) {
            indegree[dst.index()] += 1;
        }
    }
    let ready_entry = |n: NodeId| Reverse((rank[n.index()], n.index() as u32));
    let mut ready: BinaryHeap<Reverse<(u32, u32)>> =
        g.schedule().iter().filter(|n| indegree[n.index()] == 0).map(|&n| ready_entry(n)).collect();
    let mut order = Vec::with_capacity(g.node_count());
    while let Some(Reverse((_, i))) = ready.pop() {
        let id = NodeId::new(i as usize);
        order.push(id);
        for (dst, e) in g.out_edges(id) {
            if orders(e.action) {
                let d = &mut indegree[dst.index()];
                *d -= 1;
                if *d == 0 {
                    ready.push(ready_entry(dst));
                }
            }
        }
    }
    if order.len() != g.node_count() {
        let stuck = g.schedule().iter().find(|n| indegree[n.index()] > 0).expect("a node is left on a cycle");
        return Err(CycleError { node: g.node(*stuck).name.clone() });
    }
    Ok(order)
}

/// Makes the stored schedule a topological order ([`schedule`]); for graphs
/// built op by op (import, training-graph construction).
pub fn settle(g: &mut Graph) -> Result<(), CycleError> {
    let order = schedule(g)?;
    g.set_schedule(order);
    Ok(())
}

/// Where the stored schedule runs a node before one it depends on (through a
/// read or control edge): (the node, the one it needs), or `None` when it
/// respects every edge (nodes missing from it count as never run).
pub fn schedule_violation(g: &Graph) -> Option<(NodeId, NodeId)> {
    let mut position = vec![usize::MAX; g.node_bound()];
    for (i, &id) in g.schedule().iter().enumerate() {
        position[id.index()] = i;
    }
    g.schedule().iter().find_map(|&id| {
        g.in_edges(id)
            .find(|(src, e)| orders(e.action) && position[src.index()] >= position[id.index()])
            .map(|(src, _)| (id, src))
    })
}

/// γ for every node, indexed by `NodeId::index()`: 0 for parameterized
/// vertices, otherwise one more than the largest γ among the sources of its
/// read and control edges (0 when it has none). Ops with equal γ may run in
/// parallel.
pub fn gamma(g: &Graph, schedule: &[NodeId]) -> Vec<u32> {
    let mut gamma = vec![0u32; g.node_bound()];
    for &id in schedule {
        if g.node(id).parameterized {
            continue;
        }
        gamma[id.index()] =
            g.in_edges(id).filter(|(_, e)| orders(e.action)).map(|(src, _)| gamma[src.index()] + 1).max().unwrap_or(0);
    }
    gamma
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{Attrs, DType, Device, Node, Phase, TensorType};

    fn node(name: &str, op: &str, parameterized: bool, inputs: Vec<Option<crate::ir::TensorId>>) -> Node {
        Node {
            name: name.into(),
            op: op.into(),
            domain: String::new(),
            attrs: Attrs::new(),
            parameterized,
            phase: Phase::Forward,
            device: Device::Gpu,
            inputs,
            outputs: vec![],
        }
    }

    fn ty() -> TensorType {
        TensorType::new(DType::F32, vec![4])
    }

    /// Figure 2a of TFLMS: x -> h -> f -> (update) x.
    #[test]
    fn update_edges_do_not_move_variables() {
        let mut g = Graph::new("fig2a", 13);
        let x = g.add_node(node("x", "Variable", true, vec![]), vec![("x".into(), ty())]);
        let xt = g.node(x).outputs[0];
        let h = g.add_node(node("h", "Relu", false, vec![Some(xt)]), vec![("h".into(), ty())]);
        let ht = g.node(h).outputs[0];
        let f = g.add_node(node("f", "Neg", false, vec![Some(ht)]), vec![("f".into(), ty())]);
        g.add_update_edge(g.node(f).outputs[0], x);
        g.verify().unwrap();
        let s = schedule(&g).unwrap();
        assert_eq!(s, vec![x, h, f]);
        let gm = gamma(&g, &s);
        assert_eq!((gm[x.index()], gm[h.index()], gm[f.index()]), (0, 1, 2));
    }

    #[test]
    fn control_edges_order_and_cycles_are_reported() {
        let mut g = Graph::new("ctl", 13);
        let a = g.add_node(node("a", "Constant", false, vec![]), vec![("a".into(), ty())]);
        let b = g.add_node(node("b", "Constant", false, vec![]), vec![("b".into(), ty())]);
        g.add_control_edge(b, a);
        let s = schedule(&g).unwrap();
        assert_eq!(s, vec![b, a]);
        assert_eq!(gamma(&g, &s)[a.index()], 1);
        g.add_control_edge(a, b);
        let err = schedule(&g).unwrap_err();
        assert!(err.node == "a" || err.node == "b");
    }
}
