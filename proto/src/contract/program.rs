//! [`Program`]: a `.lms` file decoded and checked against every rule of the contract, with
//! typed access to what the runtime executes and the simulator walks.

use super::edges::{check_edges, check_lists, Update};
use super::error::ContractError;
use super::nodes::{check_pools, node_slots, opset};
use super::ops::{NodeKind, LMS_DOMAIN, LMS_DOMAIN_VERSION};
use super::outputs::check_output_types;
use super::plan::check_plan;
use super::release::{output_pool, Pool};
use super::schedule::{check_schedule, check_update_order};
use super::tensors::{tensor_types, TensorType};
use crate::lms::{Device, Graph, Node};
use crate::ops::{registry, OpId};
use crate::LMS_FORMAT_VERSION;
use std::path::Path;

/// A checked lms graph. After [`Program::new`] succeeds: the format version is known,
/// every enum value is known, every id is in range, every tensor's byte count matches its
/// type and is at most 2^48, node slots and edges agree, every tensor lives in the pool
/// its readers expect, the schedule is a permutation of the nodes that respects every read
/// and control edge and runs updates last, the plan names what it says, and every ONNX
/// node declares the output types its op's shape rule gives.
#[derive(Clone, Debug)]
pub struct Program {
    source: String,
    graph: Graph,
    opset: Option<i64>,
    types: Vec<TensorType>,
    pools: Vec<Pool>,
    kinds: Vec<NodeKind>,
    op_ids: Vec<Option<OpId>>,
    inputs: Vec<Vec<Option<usize>>>,
    outputs: Vec<Vec<usize>>,
    control: Vec<Vec<usize>>,
    updates: Vec<Update>,
    graph_outputs: Vec<usize>,
    order: Vec<usize>,
    position: Vec<usize>,
}

impl Program {
    /// Reads and checks the `.lms` file at `path` (a regular file of at most
    /// [`MAX_PROTO_FILE_BYTES`](crate::input::MAX_PROTO_FILE_BYTES)); errors name the file.
    pub fn load(path: &Path) -> Result<Program, ContractError> {
        let file = path.display().to_string();
        let bytes = crate::input::read_regular(path, crate::input::MAX_PROTO_FILE_BYTES)
            .map_err(|e| ContractError { file: file.clone(), message: e.to_string() })?;
        Program::decode(&bytes, &file)
    }

    /// Decodes serialized `lms.proto` bytes and checks them; `source` names them in errors.
    pub fn decode(bytes: &[u8], source: &str) -> Result<Program, ContractError> {
        if bytes.is_empty() {
            return Err(ContractError { file: source.to_string(), message: "file is empty".into() });
        }
        let graph = crate::bounded::decode::<Graph>(bytes, crate::bounded::LMS_EXPANSION)
            .map_err(|e| ContractError { file: source.to_string(), message: format!("not an lms graph: {e}") })?;
        Program::new(graph, source)
    }

    /// Checks a decoded graph; `source` names it in errors.
    pub fn new(graph: Graph, source: &str) -> Result<Program, ContractError> {
        Program::check(graph, source).map_err(|message| ContractError { file: source.to_string(), message })
    }

    fn check(graph: Graph, source: &str) -> Result<Program, String> {
        if graph.format_version != LMS_FORMAT_VERSION {
            return Err(format!(
                "format version {} is not supported (this lms reads version {LMS_FORMAT_VERSION})",
                graph.format_version
            ));
        }
        let types = tensor_types(&graph)?;
        let slots = node_slots(&graph)?;
        let opset = opset(&graph, &slots.kinds)?;
        let pools: Vec<Pool> = graph
            .tensors
            .iter()
            .map(|t| {
                let node = &graph.nodes[t.producer as usize];
                output_pool(&node.domain, &node.op, node.device == Device::Cpu as i32)
            })
            .collect();
        check_pools(&graph, &slots, &pools)?;
        let edges = check_edges(&graph, &slots, &types)?;
        let graph_outputs = check_lists(&graph, &slots.kinds)?;
        let predecessors: Vec<Vec<usize>> = (0..graph.nodes.len())
            .map(|n| {
                let mut p: Vec<usize> =
                    slots.inputs[n].iter().flatten().map(|&t| graph.tensors[t].producer as usize).collect();
                p.extend_from_slice(&edges.control[n]);
                p.sort_unstable();
                p.dedup();
                p
            })
            .collect();
        let (order, position) = check_schedule(&graph, &predecessors)?;
        let program = Program {
            source: source.to_string(),
            opset,
            types,
            pools,
            kinds: slots.kinds,
            op_ids: graph.nodes.iter().map(|n| registry::resolve(&n.domain, &n.op)).collect(),
            inputs: slots.inputs,
            outputs: slots.outputs,
            control: edges.control,
            updates: edges.updates,
            graph_outputs,
            order,
            position,
            graph,
        };
        check_update_order(&program)?;
        check_plan(&program)?;
        check_output_types(&program)?;
        Ok(program)
    }

    /// The file (or name) the program was read from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The decoded graph.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// The opset a node's kernel runs at: the graph's ONNX opset (`Graph.opset`) for the
    /// default domain, [`LMS_DOMAIN_VERSION`] for the lms domain (and for a graph without
    /// ONNX ops, whose opset may be unset).
    pub fn opset(&self, node: usize) -> i64 {
        match self.graph.nodes[node].domain.as_str() {
            LMS_DOMAIN => LMS_DOMAIN_VERSION,
            _ => self.opset.unwrap_or(LMS_DOMAIN_VERSION),
        }
    }

    /// Node ids in execution order: `Graph.schedule`, as written.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// Position of node `node` in [`Program::order`].
    pub fn position(&self, node: usize) -> usize {
        self.position[node]
    }

    /// Number of nodes.
    pub fn node_count(&self) -> usize {
        self.graph.nodes.len()
    }

    /// Number of tensors.
    pub fn tensor_count(&self) -> usize {
        self.graph.tensors.len()
    }

    /// The node with id `node`.
    pub fn node(&self, node: usize) -> &Node {
        &self.graph.nodes[node]
    }

    /// What the executor does with node `node`.
    pub fn kind(&self, node: usize) -> NodeKind {
        self.kinds[node]
    }

    /// The op node `node` runs, resolved once at load from its domain and op type; `None`
    /// for a parameterized node and for an op lms does not define (no backend runs it).
    pub fn op(&self, node: usize) -> Option<OpId> {
        self.op_ids[node]
    }

    /// The tensor of each input slot of `node` (`None`: an omitted optional input).
    pub fn node_inputs(&self, node: usize) -> &[Option<usize>] {
        &self.inputs[node]
    }

    /// The tensor of each output slot of `node`.
    pub fn node_outputs(&self, node: usize) -> &[usize] {
        &self.outputs[node]
    }

    /// The nodes that control edges order before `node` (sorted).
    pub fn control_predecessors(&self, node: usize) -> &[usize] {
        &self.control[node]
    }

    /// The dtype and shape of each output of `node`, as a kernel is told them.
    pub fn output_types(&self, node: usize) -> Vec<(crate::lms::DType, Vec<usize>)> {
        self.outputs[node].iter().map(|&t| (self.types[t].dtype, self.types[t].shape.clone())).collect()
    }

    /// The type of tensor `tensor`.
    pub fn tensor_type(&self, tensor: usize) -> &TensorType {
        &self.types[tensor]
    }

    /// The name of tensor `tensor`.
    pub fn tensor_name(&self, tensor: usize) -> &str {
        &self.graph.tensors[tensor].name
    }

    /// The node that produces tensor `tensor`.
    pub fn producer(&self, tensor: usize) -> usize {
        self.graph.tensors[tensor].producer as usize
    }

    /// The pool tensor `tensor` lives in ([`output_pool`] of its producer).
    pub fn pool(&self, tensor: usize) -> Pool {
        self.pools[tensor]
    }

    /// Whether tensor `tensor` belongs to a parameterized vertex (resident for the run).
    pub fn is_resident(&self, tensor: usize) -> bool {
        self.kinds[self.producer(tensor)] == NodeKind::Parameter
    }

    /// The update edges, in edge order.
    pub fn updates(&self) -> &[Update] {
        &self.updates
    }

    /// The graph outputs, in declaration order. By convention output 0 of a training
    /// graph is its scalar loss.
    pub fn outputs(&self) -> &[usize] {
        &self.graph_outputs
    }
}
