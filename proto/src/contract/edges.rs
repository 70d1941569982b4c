//! Checks of `Graph.edges` against the nodes' slots (read edges), of update edges (they
//! write variables, with the variable's type, once each), and of the graph's input, output
//! and variable lists.

use super::describe;
use super::nodes::NodeSlots;
use super::ops::{NodeKind, INPUT_OP, VARIABLE_OP};
use super::tensors::TensorType;
use crate::lms::{Action, Graph};

/// An update edge: once its producer has run, `tensor` becomes the storage of the variable
/// node `variable`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Update {
    /// The tensor carried (an output of the optimizer op).
    pub tensor: usize,
    /// The variable node it writes.
    pub variable: usize,
}

/// Control predecessors of each node (sorted, without repeats) and the update edges.
pub struct CheckedEdges {
    /// The nodes that control edges order before each node.
    pub control: Vec<Vec<usize>>,
    /// The update edges, in edge order.
    pub updates: Vec<Update>,
}

/// Checks the edges against the nodes' slots; collects control and update edges.
pub fn check_edges(graph: &Graph, slots: &NodeSlots, types: &[TensorType]) -> Result<CheckedEdges, String> {
    let g = graph;
    let (nodes, tensors) = (g.nodes.len(), g.tensors.len());
    let mut control = vec![Vec::new(); nodes];
    let mut updates: Vec<Update> = Vec::new();
    let mut written = vec![false; nodes];
    let mut reads: Vec<(usize, usize, usize)> = Vec::new();
    for (i, e) in g.edges.iter().enumerate() {
        let (src, dst) = (e.producer as usize, e.consumer as usize);
        if src >= nodes || dst >= nodes {
            return Err(format!("edge {i} connects node ids {src} → {dst}, but the graph has {nodes} nodes"));
        }
        let action = Action::try_from(e.action).map_err(|_| {
            format!("edge {i} ({} → {}): unknown action {}", describe::node(g, src), describe::node(g, dst), e.action)
        })?;
        if action == Action::Control {
            control[dst].push(src);
            continue;
        }
        let t = match e.tensor {
            None => {
                return Err(format!(
                    "edge {i} ({} → {}) carries no tensor",
                    describe::node(g, src),
                    describe::node(g, dst)
                ))
            }
            Some(t) if t as usize >= tensors => {
                return Err(format!(
                    "edge {i} ({} → {}) carries tensor id {t}, but the graph has {tensors} tensors",
                    describe::node(g, src),
                    describe::node(g, dst)
                ));
            }
            Some(t) => t as usize,
        };
        let tensor = &g.tensors[t];
        if (tensor.producer, tensor.producer_output) != (e.producer, e.producer_output) {
            return Err(format!(
                "edge {i} carries {} from {} output {}, which does not produce it",
                describe::tensor(g, t),
                describe::node(g, src),
                e.producer_output
            ));
        }
        if action == Action::Read {
            reads.push((dst, e.consumer_input as usize, t));
            continue;
        }
        let variable = &g.nodes[dst];
        if variable.op != VARIABLE_OP || slots.kinds[dst] != NodeKind::Parameter {
            return Err(format!("update edge {i} writes {}, which is not a variable", describe::node(g, dst)));
        }
        if slots.kinds[src] == NodeKind::Parameter {
            return Err(format!("update edge {i} comes from {}, a parameterized vertex", describe::node(g, src)));
        }
        let stored = slots.outputs[dst][0];
        if (types[t].dtype, &types[t].shape) != (types[stored].dtype, &types[stored].shape) {
            return Err(format!(
                "update edge {i}: {} does not have the type of variable {}",
                describe::tensor(g, t),
                describe::node(g, dst)
            ));
        }
        if std::mem::replace(&mut written[dst], true) {
            return Err(format!("{} is written by more than one update edge", describe::node(g, dst)));
        }
        updates.push(Update { tensor: t, variable: dst });
    }
    let mut wanted: Vec<(usize, usize, usize)> = slots
        .inputs
        .iter()
        .enumerate()
        .flat_map(|(n, ins)| ins.iter().enumerate().filter_map(move |(s, t)| t.map(|t| (n, s, t))))
        .collect();
    reads.sort_unstable();
    wanted.sort_unstable();
    if let Some(n) = first_mismatch(&reads, &wanted) {
        return Err(format!("{}: read edges do not match its input slots", describe::node(g, n)));
    }
    for c in &mut control {
        c.sort_unstable();
        c.dedup();
    }
    Ok(CheckedEdges { control, updates })
}

/// The node of the first entry where two sorted (node, slot, tensor) lists differ.
fn first_mismatch(a: &[(usize, usize, usize)], b: &[(usize, usize, usize)]) -> Option<usize> {
    let differ = a.iter().zip(b).find(|(x, y)| x != y).map(|(x, y)| x.0.min(y.0));
    differ.or_else(|| a.get(b.len()).or_else(|| b.get(a.len())).map(|x| x.0))
}

/// Checks `Graph.inputs`, `Graph.outputs` and `Graph.variables`; returns the outputs.
pub fn check_lists(graph: &Graph, kinds: &[NodeKind]) -> Result<Vec<usize>, String> {
    let g = graph;
    let (nodes, tensors) = (g.nodes.len(), g.tensors.len());
    for &t in &g.inputs {
        let t = t as usize;
        if t >= tensors {
            return Err(format!("graph input names tensor id {t}, but the graph has {tensors} tensors"));
        }
        if g.nodes[g.tensors[t].producer as usize].op != INPUT_OP {
            return Err(format!("graph input {} is not produced by an Input node", describe::tensor(g, t)));
        }
    }
    for &n in &g.variables {
        let n = n as usize;
        if n >= nodes {
            return Err(format!("graph variable names node id {n}, but the graph has {nodes} nodes"));
        }
        if kinds[n] != NodeKind::Parameter {
            return Err(format!("graph variable {} is not parameterized", describe::node(g, n)));
        }
    }
    let mut outputs = Vec::with_capacity(g.outputs.len());
    let mut listed = vec![false; tensors];
    for &t in &g.outputs {
        let t = t as usize;
        if t >= tensors {
            return Err(format!("graph output names tensor id {t}, but the graph has {tensors} tensors"));
        }
        if std::mem::replace(&mut listed[t], true) {
            return Err(format!("graph output {} is listed twice", describe::tensor(g, t)));
        }
        outputs.push(t);
    }
    Ok(outputs)
}
