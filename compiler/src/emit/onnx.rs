//! ONNX export of an lms graph, to open in graph viewers (Netron and the
//! like): ONNX ops keep their domain; lms's own ops (swaps, gradients,
//! optimizer steps) are in the custom domain `lms`; variables with known
//! values become initializers, the others and the inputs graph inputs;
//! every tensor gets its type in `value_info`. Control edges, which ONNX has
//! no notion of, are recorded on the later node as the strings attribute
//! `lms_after` (the names of the nodes it waits for); update edges as
//! `lms_updates` (the variables the node writes); phase and device as
//! `lms_phase` and `lms_device`.

use crate::analysis::order;
use crate::error::Result;
use crate::ir::{Action, Attr, Graph, TensorData, TensorId, TensorType, INPUT_OP, VARIABLE_OP};
use lms_proto::onnx::{self as onnx, attribute_proto::AttributeType, tensor_shape_proto, type_proto};

/// The graph as an ONNX model, nodes in schedule order.
pub fn to_onnx(g: &Graph) -> Result<onnx::ModelProto> {
    let schedule = order::schedule(g)?;
    let mut graph = onnx::GraphProto { name: g.name.clone(), ..Default::default() };
    for &id in &schedule {
        let node = g.node(id);
        let t = node.outputs.first().copied();
        match (node.op.as_str(), t) {
            (VARIABLE_OP, Some(t)) if g.tensor(t).data.is_some() => {
                graph.initializer.push(tensor_proto(&g.tensor(t).name, g.tensor(t).data.as_ref().expect("checked")));
            }
            (VARIABLE_OP | INPUT_OP, Some(t)) => graph.input.push(value_info(&g.tensor(t).name, &g.tensor(t).ty)),
            _ => {
                let mut attribute: Vec<onnx::AttributeProto> =
                    node.attrs.iter().map(|(k, v)| attribute_of(k, v)).collect();
                let mut after: Vec<String> = g
                    .in_edges(id)
                    .filter(|(_, e)| e.action == Action::Control)
                    .map(|(src, _)| g.node(src).name.clone())
                    .collect();
                let mut updates: Vec<String> = g
                    .out_edges(id)
                    .filter(|(_, e)| e.action == Action::Update)
                    .map(|(dst, _)| g.node(dst).name.clone())
                    .collect();
                after.sort();
                updates.sort();
                for (name, values) in [("lms_after", after), ("lms_updates", updates)] {
                    if !values.is_empty() {
                        attribute.push(attribute_of(name, &Attr::Strings(values)));
                    }
                }
                attribute.push(attribute_of("lms_phase", &Attr::String(node.phase.name().into())));
                attribute.push(attribute_of("lms_device", &Attr::String(node.device.name().into())));
                graph.node.push(onnx::NodeProto {
                    name: node.name.clone(),
                    op_type: node.op.clone(),
                    domain: node.domain.clone(),
                    input: node
                        .inputs
                        .iter()
                        .map(|t| t.map_or_else(String::new, |t| g.tensor(t).name.clone()))
                        .collect(),
                    output: node.outputs.iter().map(|&t| g.tensor(t).name.clone()).collect(),
                    attribute,
                    ..Default::default()
                });
                graph.value_info.extend(node.outputs.iter().map(|&t| value_info(&g.tensor(t).name, &g.tensor(t).ty)));
            }
        }
    }
    graph.output = g.outputs.iter().map(|&t: &TensorId| value_info(&g.tensor(t).name, &g.tensor(t).ty)).collect();
    let mut opset_import = vec![onnx::OperatorSetIdProto { domain: String::new(), version: g.opset }];
    if graph.node.iter().any(|n| n.domain == crate::train::LMS_DOMAIN) {
        opset_import.push(onnx::OperatorSetIdProto { domain: crate::train::LMS_DOMAIN.into(), version: 1 });
    }
    Ok(onnx::ModelProto {
        ir_version: 8,
        producer_name: "lms".into(),
        producer_version: env!("CARGO_PKG_VERSION").into(),
        opset_import,
        graph: Some(graph),
        ..Default::default()
    })
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
            a.t = Some(tensor_proto("", t));
            AttributeType::Tensor
        }
    };
    a.r#type = kind as i32;
    a
}
