//! Patches: what a pass changes in a graph, as data.
//!
//! A pass reads the graph and returns a [`Patch`]: nodes to add (with their
//! output tensors; a copy of an existing node keeps its outputs' known
//! values) at schedule positions before or after anchor nodes, input slots
//! to rewire, control edges to add, nodes to remove, and the plan decisions
//! (swaps, recomputes) they carry out. [`apply`]
//! performs all of it or, on a bad reference, none of it (the pass manager
//! applies to a copy and keeps it only once the invariants hold).

use crate::error::{Error, Result};
use crate::ir::{
    Graph, Node, NodeId, RecomputeDecision, SwapDecision, SwapInDecision, TensorData, TensorId, TensorType,
};
use crate::shape::{self, Value};

/// A node the patch adds: its index in [`Patch`]'s list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NewNode(pub usize);

/// A node of the graph or one the patch adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NodeRef {
    Existing(NodeId),
    New(NewNode),
}

/// A tensor of the graph, or an output slot of a node the patch adds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorRef {
    Existing(TensorId),
    New(NewNode, usize),
}

/// Where an added node goes in the schedule, next to a node of the graph.
/// Several nodes at one anchor keep the patch's order: `After(a)` nodes run
/// right after `a`, `Before(a)` nodes right before it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Position {
    Before(NodeId),
    After(NodeId),
}

/// A node to add. `node.inputs` and `node.outputs` are ignored: the inputs
/// come from `inputs`, the outputs are created from `outputs`.
#[derive(Clone, Debug)]
struct Addition {
    node: Node,
    inputs: Vec<Option<TensorRef>>,
    outputs: Vec<(String, TensorType)>,
    /// Known value of each output (empty: none known).
    values: Vec<Option<TensorData>>,
    position: Position,
}

/// A swap decision for the plan, naming nodes the patch adds.
#[derive(Clone, Debug)]
struct SwapRecord {
    tensor: TensorRef,
    swap_out: NewNode,
    swap_ins: Vec<(NewNode, Option<NodeId>)>,
}

/// The changes one pass makes to a graph, and the plan decisions they carry
/// out.
#[derive(Clone, Debug)]
pub struct Patch {
    /// The pass that made it (named in errors).
    pub pass: String,
    additions: Vec<Addition>,
    rewires: Vec<(NodeId, usize, TensorRef)>,
    control_edges: Vec<(NodeRef, NodeRef)>,
    kept_values: Vec<(TensorRef, Kept)>,
    removals: Vec<NodeId>,
    swaps: Vec<SwapRecord>,
    recomputes: Vec<RecomputeRecord>,
}

/// Where a value the patch adds is kept besides its readers.
#[derive(Clone, Copy, Debug)]
enum Kept {
    /// The new value of a variable (an update edge).
    Update(NodeId),
    /// The graph output it replaces.
    Output(TensorId),
}

/// A recompute decision for the plan, naming nodes the patch adds.
#[derive(Clone, Debug)]
struct RecomputeRecord {
    tensor: TensorId,
    chain: Vec<NewNode>,
    before: NodeId,
}

/// What [`apply`] created.
#[derive(Clone, Debug, Default)]
pub struct Applied {
    /// The graph id of each added node, in the patch's order.
    pub nodes: Vec<NodeId>,
}

impl Applied {
    /// The graph id of an added node.
    pub fn node(&self, n: NewNode) -> NodeId {
        self.nodes[n.0]
    }
}

impl Patch {
    /// An empty patch made by `pass`.
    pub fn new(pass: impl Into<String>) -> Patch {
        Patch {
            pass: pass.into(),
            additions: Vec::new(),
            rewires: Vec::new(),
            control_edges: Vec::new(),
            kept_values: Vec::new(),
            removals: Vec::new(),
            swaps: Vec::new(),
            recomputes: Vec::new(),
        }
    }

    /// True when the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.additions.is_empty()
            && self.rewires.is_empty()
            && self.control_edges.is_empty()
            && self.kept_values.is_empty()
            && self.removals.is_empty()
            && self.swaps.is_empty()
            && self.recomputes.is_empty()
    }

    /// Adds `node` at `position`, reading `inputs` (tensors of the graph or
    /// outputs of nodes added earlier in this patch) and making one tensor
    /// per entry of `outputs`.
    pub fn add_node(
        &mut self,
        node: Node,
        inputs: Vec<Option<TensorRef>>,
        outputs: Vec<(String, TensorType)>,
        position: Position,
    ) -> NewNode {
        self.additions.push(Addition { node, inputs, outputs, values: Vec::new(), position });
        NewNode(self.additions.len() - 1)
    }

    /// Adds `node`, a copy of `g`'s node `original` (a recompute clone), at
    /// `position`, reading `inputs`: one output per output of the original,
    /// named `names`, of the same type and known value.
    pub fn add_copy(
        &mut self,
        g: &Graph,
        original: NodeId,
        node: Node,
        inputs: Vec<Option<TensorRef>>,
        names: Vec<String>,
        position: Position,
    ) -> NewNode {
        let outputs = &g.node(original).outputs;
        let types = outputs.iter().zip(names).map(|(&t, name)| (name, g.tensor(t).ty.clone())).collect();
        let values = outputs.iter().map(|&t| g.tensor(t).data.clone()).collect();
        self.additions.push(Addition { node, inputs, outputs: types, values, position });
        NewNode(self.additions.len() - 1)
    }

    /// Makes input `slot` of `node` read `tensor`, whose type must be the
    /// one it read before.
    pub fn rewire(&mut self, node: NodeId, slot: usize, tensor: TensorRef) {
        self.rewires.push((node, slot, tensor));
    }

    /// Orders `before` ahead of `after` without data.
    pub fn add_control_edge(&mut self, before: NodeRef, after: NodeRef) {
        self.control_edges.push((before, after));
    }

    /// Makes `value` the new value of `variable` (an update edge), in place of
    /// the update by a node the patch removes.
    pub fn add_update_edge(&mut self, value: TensorRef, variable: NodeId) {
        self.kept_values.push((value, Kept::Update(variable)));
    }

    /// Makes `value` the graph output in place of `output` (made by a node
    /// the patch removes), at the same position; its type must be the same.
    pub fn replace_output(&mut self, output: TensorId, value: TensorRef) {
        self.kept_values.push((value, Kept::Output(output)));
    }

    /// Removes a node; nothing left in the graph may read its outputs.
    pub fn remove_node(&mut self, node: NodeId) {
        self.removals.push(node);
    }

    /// Records in the plan that `tensor` (the copy the swap-out reads: an
    /// existing tensor, or one added, as a swap-in of an earlier swap) is
    /// swapped out by `swap_out` and in by each of `swap_ins`, started after
    /// its trigger (none: by its first consumer).
    pub fn record_swap(&mut self, tensor: TensorRef, swap_out: NewNode, swap_ins: Vec<(NewNode, Option<NodeId>)>) {
        self.swaps.push(SwapRecord { tensor, swap_out, swap_ins });
    }

    /// Records in the plan that `tensor` is re-made by the added nodes
    /// `chain` (in the order they run) right before its reader `before`.
    pub fn record_recompute(&mut self, tensor: TensorId, chain: Vec<NewNode>, before: NodeId) {
        self.recomputes.push(RecomputeRecord { tensor, chain, before });
    }

    /// Number of nodes added.
    pub fn added_nodes(&self) -> usize {
        self.additions.len()
    }

    fn error(&self, problem: String) -> Error {
        Error::Patch { pass: self.pass.clone(), problem }
    }
}

/// Applies `patch` to `g`. Checks every reference first (anchors, rewired
/// nodes and removed nodes exist, tensors exist, new nodes read only
/// earlier new nodes, slots are in range, a rewire keeps the slot's type,
/// an added ONNX op's outputs have the types shape inference gives and a
/// swap op's output the type of its input), so on error `g` is unchanged.
pub fn apply(g: &mut Graph, patch: &Patch) -> Result<Applied> {
    check_references(g, patch)?;
    let mut applied = Applied::default();
    let mut resolved: Vec<Vec<TensorId>> = Vec::with_capacity(patch.additions.len());
    let tensor = |resolved: &[Vec<TensorId>], t: TensorRef| match t {
        TensorRef::Existing(t) => t,
        TensorRef::New(n, slot) => resolved[n.0][slot],
    };
    for a in &patch.additions {
        let inputs = a.inputs.iter().map(|t| t.map(|t| tensor(&resolved, t))).collect();
        let id = g.add_node(Node { inputs, outputs: Vec::new(), ..a.node.clone() }, a.outputs.clone());
        for (&t, value) in g.node(id).outputs.clone().iter().zip(&a.values) {
            g.tensor_mut(t).data = value.clone();
        }
        resolved.push(g.node(id).outputs.clone());
        applied.nodes.push(id);
    }
    for &(node, slot, t) in &patch.rewires {
        g.set_input(node, slot, Some(tensor(&resolved, t)));
    }
    let node = |n: NodeRef| match n {
        NodeRef::Existing(id) => id,
        NodeRef::New(n) => applied.node(n),
    };
    for &(before, after) in &patch.control_edges {
        g.add_control_edge(node(before), node(after));
    }
    for &(value, kept) in &patch.kept_values {
        let value = tensor(&resolved, value);
        match kept {
            Kept::Update(variable) => {
                g.add_update_edge(value, variable);
            }
            Kept::Output(output) => g.outputs.iter_mut().filter(|t| **t == output).for_each(|t| *t = value),
        }
    }
    // The new order: each old node with its additions around it.
    let mut before: Vec<Vec<NodeId>> = vec![Vec::new(); g.node_bound()];
    let mut after: Vec<Vec<NodeId>> = vec![Vec::new(); g.node_bound()];
    for (a, &id) in patch.additions.iter().zip(&applied.nodes) {
        match a.position {
            Position::Before(anchor) => before[anchor.index()].push(id),
            Position::After(anchor) => after[anchor.index()].push(id),
        }
    }
    let added: std::collections::HashSet<NodeId> = applied.nodes.iter().copied().collect();
    let mut order = Vec::with_capacity(g.node_count());
    for &id in g.schedule().iter().filter(|id| !added.contains(id)) {
        order.append(&mut before[id.index()]);
        order.push(id);
        order.append(&mut after[id.index()]);
    }
    g.set_schedule(order);
    g.remove_nodes(&patch.removals);
    for swap in &patch.swaps {
        g.plan.swaps.push(SwapDecision {
            tensor: tensor(&resolved, swap.tensor),
            swap_out: applied.node(swap.swap_out),
            swap_ins: swap
                .swap_ins
                .iter()
                .map(|&(node, trigger)| SwapInDecision { node: applied.node(node), trigger })
                .collect(),
        });
    }
    for r in &patch.recomputes {
        g.plan.recomputes.push(RecomputeDecision {
            tensor: r.tensor,
            chain: r.chain.iter().map(|&n| applied.node(n)).collect(),
            before: r.before,
        });
    }
    Ok(applied)
}

/// The checks of [`apply`] that need no change to the graph.
fn check_references(g: &Graph, patch: &Patch) -> Result<()> {
    let fail = |problem: String| Err(patch.error(problem));
    let removed: std::collections::HashSet<NodeId> = patch.removals.iter().copied().collect();
    let exists = |id: NodeId| g.contains_node(id) && !removed.contains(&id);
    // The value a reference names, for a reader added at `before` (new
    // tensors have no known contents).
    let value_of = |t: TensorRef, before: usize| -> Option<Value> {
        match t {
            TensorRef::Existing(t) => {
                let ok = t.index() < g.tensor_count() && g.contains_node(g.tensor(t).producer.0);
                ok.then(|| Value { ty: g.tensor(t).ty.clone(), data: g.tensor(t).data.clone() })
            }
            TensorRef::New(n, slot) if n.0 < before => {
                let a = &patch.additions[n.0];
                let data = a.values.get(slot).cloned().flatten();
                a.outputs.get(slot).map(|(_, ty)| Value { ty: ty.clone(), data })
            }
            TensorRef::New(..) => None,
        }
    };
    for (i, a) in patch.additions.iter().enumerate() {
        let name = &a.node.name;
        let anchor = match a.position {
            Position::Before(n) | Position::After(n) => n,
        };
        if !exists(anchor) {
            return fail(format!("node '{name}' is placed next to a node that is not in the graph"));
        }
        let mut values = Vec::with_capacity(a.inputs.len());
        for (slot, t) in a.inputs.iter().enumerate() {
            match t.map(|t| value_of(t, i)) {
                Some(None) => return fail(format!("node '{name}' input {slot} names no tensor it can read")),
                Some(Some(v)) => values.push(Some(v)),
                None => values.push(None),
            }
        }
        shape::declared::check(&a.node, &values, &a.outputs, g.opset)
            .map_err(|problem| patch.error(format!("node '{name}' ({}): {problem}", a.node.op)))?;
    }
    for &(node, slot, t) in &patch.rewires {
        if !exists(node) || slot >= g.node(node).inputs.len() {
            return fail(format!("a rewire names input {slot} of a node that is not in the graph"));
        }
        let n = g.node(node);
        let Some(Value { ty, .. }) = value_of(t, patch.additions.len()) else {
            return fail(format!("node '{}' input {slot} is rewired to no tensor", n.name));
        };
        let old = n.inputs[slot].map(|t| &g.tensor(t).ty);
        if old != Some(&ty) {
            return fail(format!(
                "node '{}' input {slot} is rewired to a {ty} tensor, not its {}",
                n.name,
                old.map_or("absent".into(), |t| t.to_string())
            ));
        }
    }
    for &(before, after) in &patch.control_edges {
        for n in [before, after] {
            let ok = match n {
                NodeRef::Existing(id) => exists(id),
                NodeRef::New(n) => n.0 < patch.additions.len(),
            };
            if !ok {
                return fail("a control edge names a node that is not in the graph".into());
            }
        }
    }
    for &(value, kept) in &patch.kept_values {
        let known = value_of(value, patch.additions.len());
        match kept {
            Kept::Update(variable) => {
                let is_variable = exists(variable) && g.node(variable).op == crate::ir::VARIABLE_OP;
                if !is_variable || known.is_none() {
                    return fail("an update edge names a value or variable that is not in the graph".into());
                }
            }
            Kept::Output(output) => {
                if !g.outputs.contains(&output) || known.is_none_or(|v| v.ty != g.tensor(output).ty) {
                    let name = &g.tensor(output).name;
                    return fail(format!("an output replacement of '{name}' is no graph output of the same type"));
                }
            }
        }
    }
    if let Some(id) = patch.removals.iter().find(|&&id| !g.contains_node(id)) {
        return fail(format!("removes node {} which is not in the graph", id.index()));
    }
    for swap in &patch.swaps {
        let new_ok = std::iter::once(swap.swap_out)
            .chain(swap.swap_ins.iter().map(|s| s.0))
            .all(|n| n.0 < patch.additions.len());
        let triggers_ok = swap.swap_ins.iter().filter_map(|s| s.1).all(exists);
        if !new_ok || !triggers_ok || value_of(swap.tensor, patch.additions.len()).is_none() {
            return fail("a swap decision names a node or tensor that is not in the graph".into());
        }
    }
    for r in &patch.recomputes {
        let new_ok = r.chain.iter().all(|n| n.0 < patch.additions.len());
        if !new_ok || !exists(r.before) || value_of(TensorRef::Existing(r.tensor), 0).is_none() {
            return fail("a recompute decision names a node or tensor that is not in the graph".into());
        }
    }
    Ok(())
}
