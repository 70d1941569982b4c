//! The graph G = (V, E, λ, τ) of TFLMS Definition 1, on petgraph.
//!
//! Vertices are [`Node`]s: an operation λ(v) with its attributes, whether it is
//! parameterized (a variable or an input), its training [`Phase`] and its
//! [`Device`]. Edges carry τ(e) = (tensor, [`Action`]): `Read` edges carry a
//! tensor from a producer's output slot to a consumer's input slot, `Update`
//! edges write a variable, `Control` edges only order execution.
//!
//! Tensors live in a side table indexed by [`TensorId`]; a node lists the
//! tensor of each input slot (an omitted optional input is `None`) and of
//! each output slot. The edges mirror those lists; [`Graph::verify`] checks
//! that they agree.

use super::{Attrs, Plan, TensorData, TensorType};
use petgraph::stable_graph::{EdgeIndex, NodeIndex, StableDiGraph};
use petgraph::visit::{EdgeRef, IntoEdgeReferences, NodeIndexable};
use petgraph::Direction;
use std::fmt;
use std::sync::Arc;

/// Identifies a vertex of a [`Graph`]; stable across removals.
pub type NodeId = NodeIndex<u32>;

/// Identifies a tensor of a [`Graph`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorId(pub u32);

impl TensorId {
    /// Index into the graph's tensor table.
    pub fn index(self) -> usize {
        self.0 as usize
    }
}

/// The training phase a vertex belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    Forward,
    Backward,
    Update,
}

impl Phase {
    /// Short name used in the text form.
    pub fn name(self) -> &'static str {
        match self {
            Phase::Forward => "fwd",
            Phase::Backward => "bwd",
            Phase::Update => "upd",
        }
    }
}

/// Where a vertex runs. Swap-out and swap-in are identity ops on the CPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Device {
    Gpu,
    Cpu,
}

impl Device {
    /// Short name used in the text form.
    pub fn name(self) -> &'static str {
        match self {
            Device::Gpu => "gpu",
            Device::Cpu => "cpu",
        }
    }
}

/// What an edge does: τ(e)'s action.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// The consumer reads the tensor.
    Read,
    /// The producer writes a new value into the variable it points at.
    Update,
    /// No data: the producer must finish before the consumer starts.
    Control,
}

pub use lms_proto::contract::{
    INPUT_OP, OVERLAP_ADD_OP, SPLIT_PART_OP, SPLIT_WINDOW_OP, SWAP_IN_OP, SWAP_OUT_OP, VARIABLE_OP,
};

/// A vertex: λ(v) plus phase, device and the tensors of its slots.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    /// Unique name within the graph.
    pub name: String,
    /// Operation type (ONNX op type, or an lms op such as `SwapOut`).
    pub op: String,
    /// Operator domain; empty for the ONNX default domain.
    pub domain: String,
    pub attrs: Attrs,
    /// True for variables and inputs (γ = 0 by Definition 2).
    pub parameterized: bool,
    pub phase: Phase,
    pub device: Device,
    /// Tensor of each input slot; `None` for an omitted optional input.
    pub inputs: Vec<Option<TensorId>>,
    /// Tensor of each output slot.
    pub outputs: Vec<TensorId>,
}

/// A tensor: its name, type, producer and (when known) its constant value.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub ty: TensorType,
    /// Node and output slot that produce it.
    pub producer: (NodeId, usize),
    /// Value known at compile time: initializers and folded constants.
    pub data: Option<TensorData>,
}

/// An edge's payload: τ(e) and the slots it connects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Edge {
    pub action: Action,
    /// Tensor carried; `None` on control edges.
    pub tensor: Option<TensorId>,
    /// Producer's output slot (0 for control edges).
    pub src_slot: usize,
    /// Consumer's input slot (0 for control and update edges).
    pub dst_slot: usize,
}

/// The graph has a cycle through the named node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("graph has a cycle through node '{node}'")]
pub struct CycleError {
    pub node: String,
}

/// A graph that is not well formed; found by [`Graph::verify`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("graph is malformed at node '{node}': {problem}")]
pub struct VerifyError {
    pub node: String,
    pub problem: String,
}

/// The lms IR: a directed multigraph of nodes and typed edges plus a tensor
/// table, the execution order and the memory plan.
///
/// The schedule is data: one explicit order holding every node once.
/// [`Graph::add_node`] appends to it and [`Graph::remove_node`] takes the node
/// out; a patch places its nodes before or after anchors. Node indices are
/// reused after removals, so no order is ever derived from them.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    /// Graph name (from the model).
    pub name: String,
    /// Opset version of the ONNX default domain the graph was written against.
    pub opset: i64,
    /// Nodes and tensors are shared between clones and copied on their first
    /// write ([`Graph::node_mut`], [`Graph::tensor_mut`]), so a clone costs a
    /// pointer per node and tensor, not their names, attributes and data.
    graph: StableDiGraph<Arc<Node>, Edge, u32>,
    tensors: Vec<Arc<Tensor>>,
    /// Tensors fed from outside, in declaration order.
    pub inputs: Vec<TensorId>,
    /// Tensors returned to the caller, in declaration order.
    pub outputs: Vec<TensorId>,
    schedule: Vec<NodeId>,
    /// What the memory passes decided and the budgets they planned for.
    pub plan: Plan,
}

impl Graph {
    /// How `other`'s data inputs differ from this graph's (a name missing,
    /// or another element type or shape), in words that call the two graphs
    /// `names`; `None` when they are the same. Two graphs of one model at
    /// different batches differ here, and the words say so.
    pub fn input_difference(&self, other: &Graph, names: [&str; 2]) -> Option<String> {
        let inputs = |g: &Graph| -> Vec<(String, TensorType)> {
            g.inputs.iter().map(|&t| (g.tensor(t).name.clone(), g.tensor(t).ty.clone())).collect()
        };
        let (ours, theirs) = (inputs(self), inputs(other));
        let [this, that] = names;
        for (name, ty) in &ours {
            let shown = lms_proto::escape::Escaped(name);
            match theirs.iter().find(|(n, _)| n == name) {
                None => return Some(format!("input '{shown}' of {this} is not an input of {that}")),
                Some((_, other_ty)) if other_ty != ty => {
                    let batch = match (ty.shape.split_first(), other_ty.shape.split_first()) {
                        (Some((a, rest)), Some((b, other_rest))) if a != b && rest == other_rest => {
                            format!(": they were compiled at batch {a} and {b}")
                        }
                        _ => String::new(),
                    };
                    return Some(format!("input '{shown}' is {ty} in {this} and {other_ty} in {that}{batch}"));
                }
                Some(_) => {}
            }
        }
        let extra = theirs.iter().find(|(n, _)| !ours.iter().any(|(m, _)| m == n))?;
        Some(format!("input '{}' of {that} is not an input of {this}", lms_proto::escape::Escaped(&extra.0)))
    }

    /// An empty graph.
    pub fn new(name: impl Into<String>, opset: i64) -> Graph {
        Graph { name: name.into(), opset, ..Graph::default() }
    }

    /// Adds a node whose output tensors are created with the given names and
    /// types, and a read edge from the producer of each present input.
    pub fn add_node(&mut self, mut node: Node, outputs: Vec<(String, TensorType)>) -> NodeId {
        node.outputs.clear();
        let inputs = node.inputs.clone();
        let id = self.graph.add_node(Arc::new(node));
        self.schedule.push(id);
        for (slot, (name, ty)) in outputs.into_iter().enumerate() {
            let t = TensorId(self.tensors.len() as u32);
            self.tensors.push(Arc::new(Tensor { name, ty, producer: (id, slot), data: None }));
            Arc::make_mut(&mut self.graph[id]).outputs.push(t);
        }
        for (dst_slot, input) in inputs.into_iter().enumerate() {
            if let Some(t) = input {
                let (src, src_slot) = self.tensors[t.index()].producer;
                self.graph.add_edge(src, id, Edge { action: Action::Read, tensor: Some(t), src_slot, dst_slot });
            }
        }
        id
    }

    /// Removes a node, its edges and its place in the schedule. Its output
    /// tensors stay in the table without a producer: [`Graph::tensors`] skips
    /// them, and a node still reading one is a dangling read.
    pub fn remove_node(&mut self, id: NodeId) -> Option<Node> {
        self.schedule.retain(|&n| n != id);
        self.graph.remove_node(id).map(Arc::unwrap_or_clone)
    }

    /// [`Graph::remove_node`] for each of `ids`, the schedule filtered once.
    pub fn remove_nodes(&mut self, ids: &[NodeId]) {
        let gone: std::collections::HashSet<NodeId> = ids.iter().copied().collect();
        self.schedule.retain(|n| !gone.contains(n));
        for &id in ids {
            self.graph.remove_node(id);
        }
    }

    /// Whether `id` names a node of the graph.
    pub fn contains_node(&self, id: NodeId) -> bool {
        self.graph.contains_node(id)
    }

    /// Points input `slot` of `node` at `tensor` (or at nothing), replacing
    /// its read edge.
    pub fn set_input(&mut self, node: NodeId, slot: usize, tensor: Option<TensorId>) {
        let old = self
            .graph
            .edges_directed(node, Direction::Incoming)
            .find(|e| e.weight().action == Action::Read && e.weight().dst_slot == slot)
            .map(|e| e.id());
        if let Some(edge) = old {
            self.graph.remove_edge(edge);
        }
        Arc::make_mut(&mut self.graph[node]).inputs[slot] = tensor;
        if let Some(t) = tensor {
            let (src, src_slot) = self.tensors[t.index()].producer;
            self.graph.add_edge(src, node, Edge { action: Action::Read, tensor: Some(t), src_slot, dst_slot: slot });
        }
    }

    /// The execution order: every node once.
    pub fn schedule(&self) -> &[NodeId] {
        &self.schedule
    }

    /// Replaces the execution order; `order` must hold every node once (the
    /// pass manager checks that it respects every read and control edge).
    pub fn set_schedule(&mut self, order: Vec<NodeId>) {
        debug_assert_eq!(order.len(), self.graph.node_count());
        self.schedule = order;
    }

    /// Adds a control edge: `before` must finish before `after` starts.
    pub fn add_control_edge(&mut self, before: NodeId, after: NodeId) -> EdgeIndex<u32> {
        self.graph.add_edge(before, after, Edge { action: Action::Control, tensor: None, src_slot: 0, dst_slot: 0 })
    }

    /// Adds an update edge: `writer` writes its output `value` into `variable`.
    pub fn add_update_edge(&mut self, value: TensorId, variable: NodeId) -> EdgeIndex<u32> {
        let (writer, src_slot) = self.tensors[value.index()].producer;
        self.graph.add_edge(
            writer,
            variable,
            Edge { action: Action::Update, tensor: Some(value), src_slot, dst_slot: 0 },
        )
    }

    /// The node with this id. Panics on a removed id (a bug, not bad input).
    pub fn node(&self, id: NodeId) -> &Node {
        &self.graph[id]
    }

    /// Mutable access to a node's attributes, phase and device.
    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        Arc::make_mut(&mut self.graph[id])
    }

    /// The tensor with this id.
    pub fn tensor(&self, id: TensorId) -> &Tensor {
        &self.tensors[id.index()]
    }

    /// Mutable access to a tensor.
    pub fn tensor_mut(&mut self, id: TensorId) -> &mut Tensor {
        Arc::make_mut(&mut self.tensors[id.index()])
    }

    /// The tensors whose producer is in the graph, in [`TensorId`] order: a
    /// removed node's outputs are not, even once a new node reuses its index.
    pub fn tensors(&self) -> impl Iterator<Item = (TensorId, &Tensor)> {
        self.tensors.iter().enumerate().map(|(i, t)| (TensorId(i as u32), &**t)).filter(|&(id, t)| {
            let (node, slot) = t.producer;
            self.graph.node_weight(node).is_some_and(|n| n.outputs.get(slot) == Some(&id))
        })
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.graph.node_count()
    }

    /// Largest tensor index + 1: the size of a table indexed by
    /// `TensorId::index()` (it counts the outputs of removed nodes too).
    pub fn tensor_count(&self) -> usize {
        self.tensors.len()
    }

    /// Node ids in index order (not the schedule; indices are reused).
    pub fn node_ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.graph.node_indices()
    }

    /// Largest node index + 1: the size of a table indexed by `NodeId::index()`.
    pub fn node_bound(&self) -> usize {
        self.graph.node_bound()
    }

    /// Edges leaving a node: (consumer, edge).
    pub fn out_edges(&self, id: NodeId) -> impl Iterator<Item = (NodeId, &Edge)> {
        self.graph.edges_directed(id, Direction::Outgoing).map(|e| (e.target(), e.weight()))
    }

    /// Edges entering a node: (producer, edge).
    pub fn in_edges(&self, id: NodeId) -> impl Iterator<Item = (NodeId, &Edge)> {
        self.graph.edges_directed(id, Direction::Incoming).map(|e| (e.source(), e.weight()))
    }

    /// Nodes that read `tensor`, with the input slot, in edge order.
    pub fn readers(&self, tensor: TensorId) -> impl Iterator<Item = (NodeId, usize)> + '_ {
        let (producer, _) = self.tensor(tensor).producer;
        self.out_edges(producer)
            .filter(move |(_, e)| e.action == Action::Read && e.tensor == Some(tensor))
            .map(|(n, e)| (n, e.dst_slot))
    }

    /// All edges as (producer, consumer, edge).
    pub fn edges(&self) -> impl Iterator<Item = (NodeId, NodeId, &Edge)> {
        (&self.graph).edge_references().map(|e| (e.source(), e.target(), e.weight()))
    }

    /// Checks that the edges mirror the nodes' slot lists, that every tensor's
    /// producer lists it, and that update edges point at variables.
    pub fn verify(&self) -> Result<(), VerifyError> {
        let fail = |id: NodeId, problem: String| VerifyError { node: self.graph[id].name.clone(), problem };
        for id in self.graph.node_indices() {
            let node = &self.graph[id];
            for (slot, t) in node.outputs.iter().enumerate() {
                let tensor =
                    self.tensors.get(t.index()).ok_or_else(|| fail(id, format!("output {slot} is not a tensor")))?;
                if tensor.producer != (id, slot) {
                    return Err(fail(id, format!("tensor '{}' names another producer", tensor.name)));
                }
            }
            let mut reads: Vec<(usize, TensorId)> = Vec::new();
            for (src, edge) in self.in_edges(id) {
                match edge.action {
                    Action::Read => {
                        let t = edge.tensor.ok_or_else(|| fail(id, "read edge without a tensor".into()))?;
                        if self.tensor(t).producer != (src, edge.src_slot) {
                            return Err(fail(
                                id,
                                format!("edge carries '{}' from a node that does not produce it", self.tensor(t).name),
                            ));
                        }
                        reads.push((edge.dst_slot, t));
                    }
                    Action::Update if !node.parameterized => {
                        return Err(fail(id, "update edge into a vertex that is not a variable".into()));
                    }
                    Action::Update | Action::Control => {}
                }
            }
            reads.sort();
            let mut expected: Vec<(usize, TensorId)> =
                node.inputs.iter().enumerate().filter_map(|(slot, t)| t.map(|t| (slot, t))).collect();
            expected.sort();
            if reads != expected {
                return Err(fail(id, "read edges do not match the input slots".into()));
            }
        }
        Ok(())
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
