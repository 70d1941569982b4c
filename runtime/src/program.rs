//! A validated lms program: a `.lms` file decoded, checked against the rules of
//! `lms.proto` and `proto/OPS.md`, and given the order in which its nodes run.
//!
//! After [`Program::new`] succeeds every id is in range, every tensor's byte count matches
//! its type, node slots and edges agree, every tensor lives in the pool its readers
//! expect, and [`Program::order`] is a topological order of the read and control edges.

use crate::error::RuntimeError;
use crate::memory::Pool;
use lms_proto::lms::{slot, Action, DType, Device, Graph, Node};
use lms_proto::{Message, LMS_FORMAT_VERSION};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::path::Path;

/// Op type of a variable: a parameterized vertex written only through update edges.
pub const VARIABLE_OP: &str = "Variable";
/// Op type of an input: a parameterized vertex fed from outside.
pub const INPUT_OP: &str = "Input";
/// Op type of the device → host copy (domain [`LMS_DOMAIN`]).
pub const SWAP_OUT_OP: &str = "SwapOut";
/// Op type of the host → device copy (domain [`LMS_DOMAIN`]).
pub const SWAP_IN_OP: &str = "SwapIn";
/// Domain of the ops that `proto/OPS.md` defines.
pub const LMS_DOMAIN: &str = "lms";
/// The version of the `lms` domain that its ops are run at.
pub const LMS_DOMAIN_VERSION: i64 = 1;

/// What the executor does with a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    /// A variable or an input: its tensor is resident from the start; running it does nothing.
    Parameter,
    /// `SwapOut`: a copy from device to host memory on the device-to-host queue.
    SwapOut,
    /// `SwapIn`: a copy from host to device memory on the host-to-device queue.
    SwapIn,
    /// Any other op: a kernel on the compute queue.
    Kernel,
}

/// The element type, shape and size of a tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorType {
    /// Element type.
    pub dtype: DType,
    /// Dimensions, outermost first.
    pub shape: Vec<usize>,
    /// Size in bytes: elements × element size.
    pub bytes: u64,
}

/// An update edge: once its producer has run, `tensor` becomes the storage of the variable
/// node `variable`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Update {
    /// The tensor carried (an output of the optimizer op).
    pub tensor: usize,
    /// The variable node it writes.
    pub variable: usize,
}

/// A checked lms graph with its execution order.
#[derive(Clone, Debug)]
pub struct Program {
    source: String,
    graph: Graph,
    opset: Option<i64>,
    types: Vec<TensorType>,
    pools: Vec<Pool>,
    kinds: Vec<NodeKind>,
    inputs: Vec<Vec<Option<usize>>>,
    outputs: Vec<Vec<usize>>,
    control: Vec<Vec<usize>>,
    updates: Vec<Update>,
    graph_outputs: Vec<usize>,
    order: Vec<usize>,
}

/// Bytes per element of any lms dtype; `None` for `DTYPE_UNDEFINED`.
pub fn dtype_bytes(dtype: DType) -> Option<u64> {
    match dtype {
        DType::DtypeUndefined => None,
        DType::DtypeBool | DType::DtypeU8 | DType::DtypeI8 => Some(1),
        DType::DtypeU16 | DType::DtypeI16 | DType::DtypeF16 | DType::DtypeBf16 => Some(2),
        DType::DtypeF32 | DType::DtypeI32 | DType::DtypeU32 => Some(4),
        DType::DtypeF64 | DType::DtypeI64 | DType::DtypeU64 => Some(8),
    }
}

/// The pool a node's outputs live in: `SwapOut` writes host memory and `SwapIn` device
/// memory; any other node writes the memory of its device.
fn output_pool(node: &Node, kind: NodeKind) -> Pool {
    match (kind, node.device) {
        (NodeKind::SwapOut, _) => Pool::Host,
        (NodeKind::SwapIn, _) => Pool::Device,
        (_, d) if d == Device::Cpu as i32 => Pool::Host,
        _ => Pool::Device,
    }
}

/// `node 'name' (Op)`, or `node #id (Op)` for an unnamed node.
fn describe(graph: &Graph, id: usize) -> String {
    match graph.nodes.get(id) {
        Some(n) if n.name.is_empty() => format!("node #{id} ({})", n.op),
        Some(n) => format!("node '{}' ({})", n.name, n.op),
        None => format!("node #{id}"),
    }
}

/// `tensor 'name'`, or `tensor #id` for an unnamed tensor.
fn describe_tensor(graph: &Graph, id: usize) -> String {
    match graph.tensors.get(id) {
        Some(t) if !t.name.is_empty() => format!("tensor '{}'", t.name),
        _ => format!("tensor #{id}"),
    }
}

impl Program {
    /// Reads and checks the `.lms` file at `path`; errors name the file.
    pub fn load(path: &Path) -> Result<Program, RuntimeError> {
        let file = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|e| RuntimeError::Io { file: file.clone(), message: e.to_string() })?;
        Program::decode(&bytes, &file)
    }

    /// Decodes serialized `lms.proto` bytes and checks them; `source` names them in errors.
    pub fn decode(bytes: &[u8], source: &str) -> Result<Program, RuntimeError> {
        let graph = Graph::decode(bytes).map_err(|e| RuntimeError::Invalid {
            file: source.to_string(),
            message: format!("not an lms graph: {e}"),
        })?;
        Program::new(graph, source)
    }

    /// Checks a decoded graph and computes its order; `source` names it in errors.
    pub fn new(graph: Graph, source: &str) -> Result<Program, RuntimeError> {
        let invalid = |message: String| RuntimeError::Invalid { file: source.to_string(), message };
        check_version(&graph).map_err(invalid)?;
        let types = tensor_types(&graph).map_err(invalid)?;
        let (kinds, inputs, outputs) = node_slots(&graph).map_err(invalid)?;
        let opset = opset(&graph, &kinds).map_err(invalid)?;
        let pools = (0..graph.tensors.len())
            .map(|t| {
                let producer = graph.tensors[t].producer as usize;
                output_pool(&graph.nodes[producer], kinds[producer])
            })
            .collect();
        let mut program = Program {
            source: source.to_string(),
            opset,
            types,
            pools,
            kinds,
            inputs,
            outputs,
            control: Vec::new(),
            updates: Vec::new(),
            graph_outputs: Vec::new(),
            order: Vec::new(),
            graph,
        };
        program.check_pools().map_err(invalid)?;
        program.check_edges().map_err(invalid)?;
        program.check_lists().map_err(invalid)?;
        program.order = program.compute_order().map_err(invalid)?;
        program.check_update_order().map_err(invalid)?;
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

    /// Node ids in execution order: `Graph.schedule` when given, else a topological
    /// order that runs the lowest ready node id first.
    pub fn order(&self) -> &[usize] {
        &self.order
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

    /// The tensor of each input slot of `node` (`None`: an omitted optional input).
    pub fn node_inputs(&self, node: usize) -> &[Option<usize>] {
        &self.inputs[node]
    }

    /// The tensor of each output slot of `node`.
    pub fn node_outputs(&self, node: usize) -> &[usize] {
        &self.outputs[node]
    }

    /// The nodes that control edges order before `node`.
    pub fn control_predecessors(&self, node: usize) -> &[usize] {
        &self.control[node]
    }

    /// The dtype and shape of each output of `node`, as a kernel is told them.
    pub fn output_types(&self, node: usize) -> Vec<(DType, Vec<usize>)> {
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

    /// The pool tensor `tensor` lives in: host memory for the outputs of `SwapOut` and of
    /// other nodes on the CPU device, device memory otherwise.
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

    /// Checks that every input of a node lives where the node reads it: kernels and
    /// `SwapOut` read device memory, `SwapIn` reads host memory; kernels run on the GPU.
    fn check_pools(&self) -> Result<(), String> {
        for (n, node) in self.graph.nodes.iter().enumerate() {
            let wanted = match self.kinds[n] {
                NodeKind::Parameter => continue,
                NodeKind::SwapIn => Pool::Host,
                NodeKind::SwapOut => Pool::Device,
                NodeKind::Kernel if node.device == Device::Cpu as i32 => {
                    return Err(format!("{}: only SwapOut and SwapIn run on the CPU device", describe(&self.graph, n)));
                }
                NodeKind::Kernel => Pool::Device,
            };
            for &t in self.inputs[n].iter().flatten() {
                if self.pools[t] != wanted {
                    return Err(format!(
                        "{} reads {} from {} memory, but it lives in {} memory",
                        describe(&self.graph, n),
                        describe_tensor(&self.graph, t),
                        wanted,
                        self.pools[t]
                    ));
                }
            }
        }
        Ok(())
    }

    /// Checks the edges against the nodes' slots; collects control and update edges.
    fn check_edges(&mut self) -> Result<(), String> {
        let g = &self.graph;
        let (nodes, tensors) = (g.nodes.len(), g.tensors.len());
        let mut control = vec![Vec::new(); nodes];
        let mut updates: Vec<Update> = Vec::new();
        let mut reads: Vec<(usize, usize, usize)> = Vec::new();
        for (i, e) in g.edges.iter().enumerate() {
            let (src, dst) = (e.producer as usize, e.consumer as usize);
            if src >= nodes || dst >= nodes {
                return Err(format!("edge {i} connects node ids {src} → {dst}, but the graph has {nodes} nodes"));
            }
            let action = Action::try_from(e.action).map_err(|_| format!("edge {i}: unknown action {}", e.action))?;
            if action == Action::Control {
                control[dst].push(src);
                continue;
            }
            let t = match e.tensor {
                None => {
                    return Err(format!("edge {i} ({} → {}) carries no tensor", describe(g, src), describe(g, dst)))
                }
                Some(t) if t as usize >= tensors => {
                    return Err(format!("edge {i} carries tensor id {t}, but the graph has {tensors} tensors"));
                }
                Some(t) => t as usize,
            };
            let tensor = &g.tensors[t];
            if (tensor.producer, tensor.producer_output) != (e.producer, e.producer_output) {
                return Err(format!(
                    "edge {i} carries {} from {} output {}, which does not produce it",
                    describe_tensor(g, t),
                    describe(g, src),
                    e.producer_output
                ));
            }
            if action == Action::Read {
                reads.push((dst, e.consumer_input as usize, t));
                continue;
            }
            let variable = &g.nodes[dst];
            if variable.op != VARIABLE_OP || !variable.parameterized {
                return Err(format!("update edge {i} writes {}, which is not a variable", describe(g, dst)));
            }
            if self.kinds[src] == NodeKind::Parameter {
                return Err(format!("update edge {i} comes from {}, a parameterized vertex", describe(g, src)));
            }
            let stored = self.outputs[dst][0];
            if (self.types[t].dtype, &self.types[t].shape) != (self.types[stored].dtype, &self.types[stored].shape) {
                return Err(format!(
                    "update edge {i}: {} does not have the type of variable {}",
                    describe_tensor(g, t),
                    describe(g, dst)
                ));
            }
            if updates.iter().any(|u| u.variable == dst) {
                return Err(format!("{} is written by more than one update edge", describe(g, dst)));
            }
            updates.push(Update { tensor: t, variable: dst });
        }
        let mut slots: Vec<(usize, usize, usize)> = self
            .inputs
            .iter()
            .enumerate()
            .flat_map(|(n, ins)| ins.iter().enumerate().filter_map(move |(s, t)| t.map(|t| (n, s, t))))
            .collect();
        reads.sort_unstable();
        slots.sort_unstable();
        if let Some(n) = first_mismatch(&reads, &slots) {
            return Err(format!("{}: read edges do not match its input slots", describe(g, n)));
        }
        for c in &mut control {
            c.sort_unstable();
            c.dedup();
        }
        self.control = control;
        self.updates = updates;
        Ok(())
    }

    /// Checks `Graph.inputs`, `Graph.outputs` and `Graph.variables`.
    fn check_lists(&mut self) -> Result<(), String> {
        let g = &self.graph;
        let (nodes, tensors) = (g.nodes.len(), g.tensors.len());
        for &t in &g.inputs {
            let t = t as usize;
            if t >= tensors {
                return Err(format!("graph input names tensor id {t}, but the graph has {tensors} tensors"));
            }
            if g.nodes[self.producer(t)].op != INPUT_OP {
                return Err(format!("graph input {} is not produced by an Input node", describe_tensor(g, t)));
            }
        }
        for &n in &g.variables {
            let n = n as usize;
            if n >= nodes {
                return Err(format!("graph variable names node id {n}, but the graph has {nodes} nodes"));
            }
            if self.kinds[n] != NodeKind::Parameter {
                return Err(format!("graph variable {} is not parameterized", describe(g, n)));
            }
        }
        let mut outputs = Vec::with_capacity(g.outputs.len());
        for &t in &g.outputs {
            let t = t as usize;
            if t >= tensors {
                return Err(format!("graph output names tensor id {t}, but the graph has {tensors} tensors"));
            }
            if outputs.contains(&t) {
                return Err(format!("graph output {} is listed twice", describe_tensor(g, t)));
            }
            outputs.push(t);
        }
        self.graph_outputs = outputs;
        Ok(())
    }

    /// The nodes each node must run after: producers of its inputs and control predecessors.
    fn predecessors(&self) -> Vec<Vec<usize>> {
        (0..self.graph.nodes.len())
            .map(|n| {
                let mut p: Vec<usize> = self.inputs[n].iter().flatten().map(|&t| self.producer(t)).collect();
                p.extend_from_slice(&self.control[n]);
                p.sort_unstable();
                p.dedup();
                p
            })
            .collect()
    }

    /// `Graph.schedule` checked to be a permutation of the nodes that respects every read
    /// and control edge; without one, a topological order (lowest ready node id first).
    fn compute_order(&self) -> Result<Vec<usize>, String> {
        let g = &self.graph;
        let preds = self.predecessors();
        let n = g.nodes.len();
        if !g.schedule.is_empty() {
            if g.schedule.len() != n {
                return Err(format!("schedule has {} entries for {n} nodes", g.schedule.len()));
            }
            let mut position = vec![usize::MAX; n];
            for (i, &id) in g.schedule.iter().enumerate() {
                let id = id as usize;
                if id >= n {
                    return Err(format!("schedule names node id {id}, but the graph has {n} nodes"));
                }
                if position[id] != usize::MAX {
                    return Err(format!("schedule names {} twice", describe(g, id)));
                }
                position[id] = i;
            }
            for (v, ps) in preds.iter().enumerate() {
                if let Some(&u) = ps.iter().find(|&&u| position[u] >= position[v]) {
                    return Err(format!(
                        "schedule runs {} before {}, which it depends on",
                        describe(g, v),
                        describe(g, u)
                    ));
                }
            }
            return Ok(g.schedule.iter().map(|&id| id as usize).collect());
        }
        let mut waiting: Vec<usize> = preds.iter().map(Vec::len).collect();
        let mut successors = vec![Vec::new(); n];
        for (v, ps) in preds.iter().enumerate() {
            for &u in ps {
                successors[u].push(v);
            }
        }
        let mut ready: BinaryHeap<Reverse<usize>> = (0..n).filter(|&v| waiting[v] == 0).map(Reverse).collect();
        let mut order = Vec::with_capacity(n);
        while let Some(Reverse(u)) = ready.pop() {
            order.push(u);
            for &v in &successors[u] {
                waiting[v] -= 1;
                if waiting[v] == 0 {
                    ready.push(Reverse(v));
                }
            }
        }
        match (0..n).find(|&v| waiting[v] > 0) {
            Some(v) => Err(format!("the graph has a cycle through {}", describe(g, v))),
            None => Ok(order),
        }
    }

    /// Checks that every update runs after every other reader of the variable it writes.
    fn check_update_order(&self) -> Result<(), String> {
        let mut position = vec![0; self.graph.nodes.len()];
        for (i, &n) in self.order.iter().enumerate() {
            position[n] = i;
        }
        for u in &self.updates {
            let writer = self.producer(u.tensor);
            let stored = self.outputs[u.variable][0];
            for (reader, ins) in self.inputs.iter().enumerate() {
                if reader != writer && ins.contains(&Some(stored)) && position[reader] > position[writer] {
                    return Err(format!(
                        "{} reads variable {} after {} updates it",
                        describe(&self.graph, reader),
                        describe(&self.graph, u.variable),
                        describe(&self.graph, writer)
                    ));
                }
            }
        }
        Ok(())
    }
}

/// The node of the first entry where two sorted (node, slot, tensor) lists differ.
fn first_mismatch(a: &[(usize, usize, usize)], b: &[(usize, usize, usize)]) -> Option<usize> {
    let differ = a.iter().zip(b).find(|(x, y)| x != y).map(|(x, y)| x.0.min(y.0));
    differ.or_else(|| a.get(b.len()).or_else(|| b.get(a.len())).map(|x| x.0))
}

fn check_version(graph: &Graph) -> Result<(), String> {
    if graph.format_version == LMS_FORMAT_VERSION {
        Ok(())
    } else {
        Err(format!(
            "format version {} is not supported (this runtime reads version {LMS_FORMAT_VERSION})",
            graph.format_version
        ))
    }
}

/// Checks each tensor's dtype, byte count, initial data and producer; returns the types.
fn tensor_types(graph: &Graph) -> Result<Vec<TensorType>, String> {
    let nodes = graph.nodes.len();
    let mut types = Vec::with_capacity(graph.tensors.len());
    for (t, tensor) in graph.tensors.iter().enumerate() {
        let what = describe_tensor(graph, t);
        let dtype = DType::try_from(tensor.dtype).map_err(|_| format!("{what}: unknown dtype {}", tensor.dtype))?;
        let size = dtype_bytes(dtype).ok_or_else(|| format!("{what}: dtype is undefined"))?;
        let shape = tensor
            .shape
            .iter()
            .map(|&d| usize::try_from(d))
            .collect::<Result<Vec<usize>, _>>()
            .map_err(|_| format!("{what}: a dimension of {:?} does not fit in memory", tensor.shape))?;
        let bytes = tensor
            .shape
            .iter()
            .try_fold(size, |acc, &d| acc.checked_mul(d))
            .ok_or_else(|| format!("{what}: shape {:?} overflows a byte count", tensor.shape))?;
        if tensor.bytes != bytes {
            return Err(format!(
                "{what}: {} bytes declared, but {} {:?} takes {bytes}",
                tensor.bytes,
                crate::tensor::dtype_name(dtype),
                shape
            ));
        }
        if !tensor.data.is_empty() && tensor.data.len() as u64 != bytes {
            return Err(format!("{what}: data holds {} bytes, the type takes {bytes}", tensor.data.len()));
        }
        let producer = tensor.producer as usize;
        let Some(node) = graph.nodes.get(producer) else {
            return Err(format!("{what}: producer is node id {producer}, but the graph has {nodes} nodes"));
        };
        if node.outputs.get(tensor.producer_output as usize) != Some(&(t as u32)) {
            return Err(format!(
                "{what}: {} output {} is not this tensor",
                describe(graph, producer),
                tensor.producer_output
            ));
        }
        types.push(TensorType { dtype, shape, bytes });
    }
    Ok(types)
}

/// Kind, input slots and output tensors of every node.
type NodeSlots = (Vec<NodeKind>, Vec<Vec<Option<usize>>>, Vec<Vec<usize>>);

/// Checks each node's domain, device, kind-specific arity and slot ids.
fn node_slots(graph: &Graph) -> Result<NodeSlots, String> {
    let tensors = graph.tensors.len();
    let (mut kinds, mut inputs, mut outputs) = (Vec::new(), Vec::new(), Vec::new());
    for (n, node) in graph.nodes.iter().enumerate() {
        let what = describe(graph, n);
        Device::try_from(node.device).map_err(|_| format!("{what}: unknown device {}", node.device))?;
        let kind = match (node.domain.as_str(), node.op.as_str()) {
            (_, VARIABLE_OP | INPUT_OP) if !node.parameterized => {
                return Err(format!("{what}: a {} must be parameterized", node.op));
            }
            ("", VARIABLE_OP | INPUT_OP) => NodeKind::Parameter,
            (_, _) if node.parameterized => {
                return Err(format!("{what}: only Variable and Input nodes are parameterized"));
            }
            (LMS_DOMAIN, SWAP_OUT_OP) => NodeKind::SwapOut,
            (LMS_DOMAIN, SWAP_IN_OP) => NodeKind::SwapIn,
            ("" | "ai.onnx" | LMS_DOMAIN, _) => NodeKind::Kernel,
            (domain, _) => return Err(format!("{what}: unknown domain '{domain}'")),
        };
        let mut ins = Vec::with_capacity(node.inputs.len());
        for (s, input) in node.inputs.iter().enumerate() {
            ins.push(match input.value {
                None => return Err(format!("{what}: input slot {s} is empty (neither a tensor nor missing)")),
                Some(slot::Value::Missing(_)) => None,
                Some(slot::Value::Tensor(t)) if t as usize >= tensors => {
                    return Err(format!("{what}: input {s} names tensor id {t}, but the graph has {tensors} tensors"));
                }
                Some(slot::Value::Tensor(t)) => Some(t as usize),
            });
        }
        let mut outs = Vec::with_capacity(node.outputs.len());
        for (s, &t) in node.outputs.iter().enumerate() {
            let t = t as usize;
            let tensor = graph.tensors.get(t).ok_or_else(|| {
                format!("{what}: output {s} names tensor id {t}, but the graph has {tensors} tensors")
            })?;
            if (tensor.producer as usize, tensor.producer_output as usize) != (n, s) {
                return Err(format!(
                    "{what}: output {s} is {}, which names another producer",
                    describe_tensor(graph, t)
                ));
            }
            outs.push(t);
        }
        let arity = match kind {
            NodeKind::Parameter => Some((0, "no input and one output")),
            NodeKind::SwapOut | NodeKind::SwapIn => Some((1, "one input and one output")),
            NodeKind::Kernel => None,
        };
        if let Some((n_in, text)) = arity {
            if ins.len() != n_in || ins.iter().any(Option::is_none) || outs.len() != 1 {
                return Err(format!("{what}: a {} takes {text}", node.op));
            }
        }
        if let (NodeKind::SwapOut | NodeKind::SwapIn, Some(Some(x))) = (kind, ins.first()) {
            let (a, b) = (&graph.tensors[*x], &graph.tensors[outs[0]]);
            if (a.dtype, &a.shape) != (b.dtype, &b.shape) {
                return Err(format!("{what}: output type differs from its input's"));
            }
        }
        kinds.push(kind);
        inputs.push(ins);
        outputs.push(outs);
    }
    Ok((kinds, inputs, outputs))
}

/// The graph's ONNX opset (`Graph.opset`, 0 when unset); required when a node of the
/// ONNX domain runs.
fn opset(graph: &Graph, kinds: &[NodeKind]) -> Result<Option<i64>, String> {
    let onnx_node = graph.nodes.iter().zip(kinds).position(|(n, &k)| k == NodeKind::Kernel && n.domain != LMS_DOMAIN);
    match (graph.opset, onnx_node) {
        (opset, _) if opset > 0 => Ok(Some(opset)),
        (_, Some(n)) => Err(format!("{} is an ONNX op, but the graph's opset is {}", describe(graph, n), graph.opset)),
        (_, None) => Ok(None),
    }
}
