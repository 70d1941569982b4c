//! ONNX export of an lms graph, to open in graph viewers (Netron and the
//! like) and to pass `onnx.checker`: ONNX ops keep their domain and only
//! their own attributes; lms's own ops (swaps, gradients, optimizer steps)
//! are in the custom domain `lms`; variables with known values become
//! initializers, the others and the inputs graph inputs; every tensor gets
//! its type in `value_info`. lms facts are node `metadata_props`, never
//! attributes: `lms.phase`, `lms.device`, `lms.updates` (the variables the
//! node writes) and `lms.after` (the nodes it waits for).
//!
//! Control edges, which ONNX has no notion of, are also drawn: for an edge
//! into an `lms` node, a `lms::Control` marker node reads the earlier node's
//! first output and makes a marker tensor (`<node>:control`) that the later
//! node takes as an extra, trailing input, so viewers draw the edge.

use crate::analysis::order;
use crate::error::Result;
use crate::ir::{Action, Attr, DType, Graph, NodeId, TensorData, TensorId, TensorType, INPUT_OP, VARIABLE_OP};
use lms_proto::contract::LMS_DOMAIN;
use lms_proto::onnx::{self as onnx, attribute_proto::AttributeType, tensor_shape_proto, type_proto};
use std::collections::HashSet;

/// The graph as an ONNX model, nodes in schedule order.
pub fn to_onnx(g: &Graph) -> Result<onnx::ModelProto> {
    let schedule = order::schedule(g)?;
    let mut graph = onnx::GraphProto { name: g.name.clone(), ..Default::default() };
    let mut markers = HashSet::new();
    for &id in &schedule {
        let node = g.node(id);
        let t = node.outputs.first().copied();
        match (node.op.as_str(), t) {
            (VARIABLE_OP, Some(t)) if g.tensor(t).data.is_some() => {
                graph.initializer.push(tensor_proto(&g.tensor(t).name, g.tensor(t).data.as_ref().expect("checked")));
            }
            (VARIABLE_OP | INPUT_OP, Some(t)) => graph.input.push(value_info(&g.tensor(t).name, &g.tensor(t).ty)),
            _ => {
                let mut after: Vec<NodeId> =
                    g.in_edges(id).filter(|(_, e)| e.action == Action::Control).map(|(src, _)| src).collect();
                after.sort_by(|&a, &b| g.node(a).name.cmp(&g.node(b).name));
                after.dedup();
                let mut updates: Vec<String> = g
                    .out_edges(id)
                    .filter(|(_, e)| e.action == Action::Update)
                    .map(|(dst, _)| g.node(dst).name.clone())
                    .collect();
                updates.sort();
                let mut input: Vec<String> =
                    node.inputs.iter().map(|t| t.map_or_else(String::new, |t| g.tensor(t).name.clone())).collect();
                if node.domain == LMS_DOMAIN {
                    for &src in &after {
                        if let Some(marker) = control_marker(g, src, &mut graph, &mut markers) {
                            input.push(marker);
                        }
                    }
                }
                let after: Vec<String> = after.iter().map(|&src| g.node(src).name.clone()).collect();
                let mut metadata_props =
                    vec![fact("lms.phase", node.phase.name()), fact("lms.device", node.device.name())];
                for (key, names) in [("lms.after", after), ("lms.updates", updates)] {
                    if !names.is_empty() {
                        metadata_props.push(fact(key, &names.join(",")));
                    }
                }
                graph.node.push(onnx::NodeProto {
                    name: node.name.clone(),
                    op_type: node.op.clone(),
                    domain: node.domain.clone(),
                    input,
                    output: node.outputs.iter().map(|&t| g.tensor(t).name.clone()).collect(),
                    attribute: node.attrs.iter().map(|(k, v)| attribute_of(k, v)).collect(),
                    metadata_props,
                    ..Default::default()
                });
                graph.value_info.extend(node.outputs.iter().map(|&t| value_info(&g.tensor(t).name, &g.tensor(t).ty)));
            }
        }
    }
    graph.output = g.outputs.iter().map(|&t: &TensorId| value_info(&g.tensor(t).name, &g.tensor(t).ty)).collect();
    let mut opset_import = vec![onnx::OperatorSetIdProto { domain: String::new(), version: g.opset }];
    if graph.node.iter().any(|n| n.domain == LMS_DOMAIN) {
        opset_import.push(onnx::OperatorSetIdProto { domain: LMS_DOMAIN.into(), version: 1 });
    }
    Ok(onnx::ModelProto {
        // Version 10 is the first with node metadata_props.
        ir_version: 10,
        producer_name: "lms".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        opset_import,
        graph: Some(graph),
        ..Default::default()
    })
}

/// The op of the marker nodes that draw control edges.
pub const CONTROL_OP: &str = "Control";

/// Adds (once per node) the `lms::Control` marker of `src` to `graph` and
/// returns its marker tensor; `None` for a node without outputs.
fn control_marker(
    g: &Graph,
    src: NodeId,
    graph: &mut onnx::GraphProto,
    markers: &mut HashSet<NodeId>,
) -> Option<String> {
    let node = g.node(src);
    let first = g.tensor(*node.outputs.first()?);
    let marker = format!("{}:control", node.name);
    if markers.insert(src) {
        graph.node.push(onnx::NodeProto {
            name: marker.clone(),
            op_type: CONTROL_OP.into(),
            domain: LMS_DOMAIN.into(),
            input: vec![first.name.clone()],
            output: vec![marker.clone()],
            ..Default::default()
        });
        graph.value_info.push(value_info(&marker, &TensorType::new(DType::Bool, vec![])));
    }
    Some(marker)
}

fn fact(key: &str, value: &str) -> onnx::StringStringEntryProto {
    onnx::StringStringEntryProto { key: key.into(), value: value.into() }
}

fn tensor_proto(name: &str, data: &TensorData) -> onnx::TensorProto {
    onnx::TensorProto {
        name: name.into(),
        dims: data.ty.shape.iter().map(|&d| d as i64).collect(),
        data_type: data.ty.dtype.code(),
        raw_data: data.bytes.to_vec(),
        ..Default::default()
    }
}

/// A graph input, output or value_info entry: `name` with a concrete tensor type.
pub fn value_info(name: &str, ty: &TensorType) -> onnx::ValueInfoProto {
    let dim = ty
        .shape
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d as i64)),
            ..Default::default()
        })
        .collect();
    onnx::ValueInfoProto {
        name: name.into(),
        r#type: Some(onnx::TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: ty.dtype.code(),
                shape: Some(onnx::TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn attribute_of(name: &str, value: &Attr) -> onnx::AttributeProto {
    let mut a = onnx::AttributeProto { name: name.into(), ..Default::default() };
    let kind = match value {
        Attr::Int(v) => {
            a.i = *v;
            AttributeType::Int
        }
        Attr::Float(v) => {
            a.f = *v;
            AttributeType::Float
        }
        Attr::String(v) => {
            a.s = v.as_bytes().to_vec();
            AttributeType::String
        }
        Attr::Ints(v) => {
            a.ints = v.clone();
            AttributeType::Ints
        }
        Attr::Floats(v) => {
            a.floats = v.clone();
            AttributeType::Floats
        }
        Attr::Strings(v) => {
            a.strings = v.iter().map(|s| s.as_bytes().to_vec()).collect();
            AttributeType::Strings
        }
        Attr::Tensor(t) => {
            a.t = Some(Box::new(tensor_proto("", t)));
            AttributeType::Tensor
        }
    };
    a.r#type = kind as i32;
    a
}
