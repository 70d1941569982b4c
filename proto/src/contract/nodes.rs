//! Checks of `Graph.nodes`: known enum values (phase, device), known domains and kinds,
//! attributes, slot ids in range and naming the tensors that name them back, the arity of
//! parameters and swaps, where each input lives, and the ONNX opset.

use super::describe;
use super::ops::NodeKind;
use super::release::Pool;
use super::tensors::check_attributes;
use crate::lms::{slot, Device, Graph, Phase};

/// Kind, input slots (`None`: an omitted optional input) and output tensors of every node.
pub struct NodeSlots {
    /// What the executor does with each node.
    pub kinds: Vec<NodeKind>,
    /// The tensor of each input slot of each node.
    pub inputs: Vec<Vec<Option<usize>>>,
    /// The tensor of each output slot of each node.
    pub outputs: Vec<Vec<usize>>,
}

/// Checks each node's enums, domain, kind-specific arity, attributes and slot ids.
pub fn node_slots(graph: &Graph) -> Result<NodeSlots, String> {
    let tensors = graph.tensors.len();
    let mut slots = NodeSlots { kinds: Vec::new(), inputs: Vec::new(), outputs: Vec::new() };
    for (n, node) in graph.nodes.iter().enumerate() {
        let what = describe::node(graph, n);
        Device::try_from(node.device).map_err(|_| format!("{what}: unknown device {}", node.device))?;
        Phase::try_from(node.phase).map_err(|_| format!("{what}: unknown phase {}", node.phase))?;
        let kind = NodeKind::of(&node.domain, &node.op, node.parameterized).map_err(|e| format!("{what}: {e}"))?;
        check_attributes(node).map_err(|e| format!("{what}: {e}"))?;
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
                    describe::tensor(graph, t)
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
        slots.kinds.push(kind);
        slots.inputs.push(ins);
        slots.outputs.push(outs);
    }
    Ok(slots)
}

/// Checks that every input of a node lives where the node reads it: kernels and `SwapOut`
/// read device memory, `SwapIn` reads host memory; kernels run on the GPU.
pub fn check_pools(graph: &Graph, slots: &NodeSlots, pools: &[Pool]) -> Result<(), String> {
    for (n, node) in graph.nodes.iter().enumerate() {
        let wanted = match slots.kinds[n] {
            NodeKind::Parameter => continue,
            NodeKind::SwapIn => Pool::Host,
            NodeKind::SwapOut => Pool::Device,
            NodeKind::Kernel if node.device == Device::Cpu as i32 => {
                return Err(format!("{}: only SwapOut and SwapIn run on the CPU device", describe::node(graph, n)));
            }
            NodeKind::Kernel => Pool::Device,
        };
        for &t in slots.inputs[n].iter().flatten() {
            if pools[t] != wanted {
                return Err(format!(
                    "{} reads {} from {wanted} memory, but it lives in {} memory",
                    describe::node(graph, n),
                    describe::tensor(graph, t),
                    pools[t]
                ));
            }
        }
    }
    Ok(())
}

/// The graph's ONNX opset (`Graph.opset`, 0 when unset); required when a node of the ONNX
/// domain runs.
pub fn opset(graph: &Graph, kinds: &[NodeKind]) -> Result<Option<i64>, String> {
    let onnx_node =
        graph.nodes.iter().zip(kinds).position(|(n, &k)| k == NodeKind::Kernel && n.domain != super::ops::LMS_DOMAIN);
    match (graph.opset, onnx_node) {
        (opset, _) if opset > 0 => Ok(Some(opset)),
        (_, Some(n)) => {
            Err(format!("{} is an ONNX op, but the graph's opset is {}", describe::node(graph, n), graph.opset))
        }
        (_, None) => Ok(None),
    }
}
