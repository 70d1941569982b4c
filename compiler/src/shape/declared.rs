//! Whether nodes declare the output types their inputs give. A pass's added
//! nodes are checked when its patch is applied; a whole graph read from a
//! file is checked before `verify` proves it, so a node whose attributes no
//! longer fit its tensors (a `Concat` given another axis) is not proven even
//! where the terms would not see it (a shape computation whose value the
//! e-graph already knows).

use super::Value;
use crate::ir::{Graph, Node, NodeId, TensorType, SWAP_IN_OP, SWAP_OUT_OP};
use lms_proto::contract::LMS_DOMAIN;

/// Whether a node's declared output types agree with its inputs:
/// swap ops copy their input's type; ONNX ops get the types shape inference
/// gives; other lms ops declare theirs.
pub fn check(
    node: &Node,
    inputs: &[Option<Value>],
    outputs: &[(String, TensorType)],
    opset: i64,
) -> std::result::Result<(), String> {
    let declared: Vec<&TensorType> = outputs.iter().map(|(_, ty)| ty).collect();
    if node.domain == LMS_DOMAIN && [SWAP_IN_OP, SWAP_OUT_OP].contains(&node.op.as_str()) {
        match inputs {
            [Some(v)] => super::compare_outputs(&declared, std::slice::from_ref(&v.ty)),
            _ => Err("a swap op reads exactly one tensor".into()),
        }
    } else if node.domain.is_empty() && !node.parameterized {
        let refs: Vec<Option<&Value>> = inputs.iter().map(Option::as_ref).collect();
        let request =
            super::Node { op: &node.op, opset, attrs: &node.attrs, inputs: &refs, num_outputs: outputs.len() };
        super::check_outputs(&request, &declared)
    } else {
        Ok(())
    }
}

/// The first node of `g`, in schedule order, whose declared output types
/// disagree with its inputs' types and known values ([`check`]), with why.
pub fn first_mismatch(g: &Graph) -> Option<(NodeId, String)> {
    g.schedule().iter().find_map(|&id| {
        let node = g.node(id);
        let inputs: Vec<Option<Value>> = node
            .inputs
            .iter()
            .map(|t| t.map(|t| Value { ty: g.tensor(t).ty.clone(), data: g.tensor(t).data.clone() }))
            .collect();
        let outputs: Vec<(String, TensorType)> =
            node.outputs.iter().map(|&t| (g.tensor(t).name.clone(), g.tensor(t).ty.clone())).collect();
        check(node, &inputs, &outputs, g.opset).err().map(|why| (id, why))
    })
}
