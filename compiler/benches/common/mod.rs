//! The synthetic model the benchmarks share: a chain of residual blocks
//! `h' = relu(h @ W_i + b_i) + h` and a classifier head, as an ONNX model.

use lms_compiler::ir::{DType, TensorType};
use lms_proto::onnx::{self as onnx, ModelProto};

/// An f32 graph input or output of a fixed shape.
fn value_info(name: &str, dims: &[i64]) -> onnx::ValueInfoProto {
    let shape = dims.iter().map(|&d| d as usize).collect();
    lms_compiler::emit::onnx::value_info(name, &TensorType::new(DType::F32, shape))
}

fn weight(name: &str, dims: &[i64]) -> onnx::TensorProto {
    let count = dims.iter().product::<i64>() as usize;
    onnx::TensorProto {
        name: name.into(),
        dims: dims.to_vec(),
        data_type: 1,
        float_data: vec![0.01; count],
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], output: &str) -> onnx::NodeProto {
    onnx::NodeProto {
        op_type: op.into(),
        name: output.into(),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: vec![output.into()],
        ..Default::default()
    }
}

/// `blocks` residual blocks of `width` features on a `[batch, width]` input,
/// then a `[width, classes]` head: 4 ops per block plus one.
pub fn residual_chain(blocks: usize, batch: i64, width: i64, classes: i64) -> ModelProto {
    let mut nodes = Vec::with_capacity(blocks * 4 + 1);
    let mut initializers = Vec::with_capacity(blocks * 2 + 1);
    let mut h = "x".to_string();
    for i in 0..blocks {
        let (w, b) = (format!("w{i}"), format!("b{i}"));
        initializers.push(weight(&w, &[width, width]));
        initializers.push(weight(&b, &[width]));
        let (m, a, r, out) = (format!("mm{i}"), format!("add{i}"), format!("relu{i}"), format!("h{i}"));
        nodes.push(node("MatMul", &[&h, &w], &m));
        nodes.push(node("Add", &[&m, &b], &a));
        nodes.push(node("Relu", &[&a], &r));
        nodes.push(node("Add", &[&r, &h], &out));
        h = out;
    }
    initializers.push(weight("head", &[width, classes]));
    nodes.push(node("MatMul", &[&h, "head"], "logits"));
    ModelProto {
        ir_version: 8,
        opset_import: vec![onnx::OperatorSetIdProto { domain: String::new(), version: 13 }],
        graph: Some(onnx::GraphProto {
            name: "synthetic".into(),
            node: nodes,
            initializer: initializers,
            input: vec![value_info("x", &[batch, width])],
            output: vec![value_info("logits", &[batch, classes])],
            ..Default::default()
        }),
        ..Default::default()
    }
}
