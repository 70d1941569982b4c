//! Benchmark: the TFLMS rewrite with default knobs on a synthetic training
//! graph of about 100,000 nodes (a chain of residual blocks
//! `h' = relu(h @ W_i + b_i) + h`, with SGD and softmax cross-entropy).
//!
//! Run with `cargo bench -p lms-compiler --bench tflms`. Target: under 2 s
//! in release.

use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::passes::tflms::{self, TflmsConfig};
use lms_compiler::train::{self, Loss, Optimizer, TrainOptions};
use lms_proto::onnx::{self as onnx, tensor_shape_proto, type_proto, ModelProto};
use std::time::Instant;

/// Residual blocks: each is 4 forward ops and 15 training-graph nodes in all
/// (with its gradients and the updates of its own weights).
const BLOCKS: usize = 6_666;
const WIDTH: i64 = 16;
const BATCH: i64 = 8;
const CLASSES: i64 = 10;

fn value_info(name: &str, elem_type: i32, dims: &[i64]) -> onnx::ValueInfoProto {
    let dim = dims
        .iter()
        .map(|&d| tensor_shape_proto::Dimension {
            value: Some(tensor_shape_proto::dimension::Value::DimValue(d)),
            ..Default::default()
        })
        .collect();
    onnx::ValueInfoProto {
        name: name.into(),
        r#type: Some(onnx::TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type,
                shape: Some(onnx::TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
        ..Default::default()
    }
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

/// BLOCKS residual blocks with their own weights, then a classifier.
fn synthetic_model() -> ModelProto {
    let mut nodes = Vec::with_capacity(BLOCKS * 4 + 1);
    let mut initializers = Vec::with_capacity(BLOCKS * 2 + 1);
    let mut h = "x".to_string();
    for i in 0..BLOCKS {
        let (w, b) = (format!("w{i}"), format!("b{i}"));
        initializers.push(weight(&w, &[WIDTH, WIDTH]));
        initializers.push(weight(&b, &[WIDTH]));
        let (m, a, r, out) = (
            format!("mm{i}"),
            format!("add{i}"),
            format!("relu{i}"),
            format!("h{i}"),
        );
        nodes.push(node("MatMul", &[&h, &w], &m));
        nodes.push(node("Add", &[&m, &b], &a));
        nodes.push(node("Relu", &[&a], &r));
        nodes.push(node("Add", &[&r, &h], &out));
        h = out;
    }
    initializers.push(weight("head", &[WIDTH, CLASSES]));
    nodes.push(node("MatMul", &[&h, "head"], "logits"));
    ModelProto {
        ir_version: 8,
        opset_import: vec![onnx::OperatorSetIdProto {
            domain: String::new(),
            version: 13,
        }],
        graph: Some(onnx::GraphProto {
            name: "synthetic".into(),
            node: nodes,
            initializer: initializers,
            input: vec![value_info("x", 1, &[BATCH, WIDTH])],
            output: vec![value_info("logits", 1, &[BATCH, CLASSES])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn main() {
    let model =
        frontend::import(&synthetic_model(), None, &FrontendOptions::default()).expect("imports");
    let options = TrainOptions {
        loss: Loss::SoftmaxCrossEntropy,
        optimizer: Optimizer::Sgd { lr: 0.01 },
        trainable: vec![],
    };
    let graph = train::build(&model.graph, &options).expect("training graph builds");
    let mut best = f64::INFINITY;
    for run in 0..3 {
        let start = Instant::now();
        let (rewritten, report) =
            tflms::rewrite(&graph, &TflmsConfig::default()).expect("rewrites");
        let seconds = start.elapsed().as_secs_f64();
        println!(
            "run {run}: {} nodes -> {} nodes, {} tensors swapped, {} swap-ins without a control op: {seconds:.3} s",
            graph.node_count(),
            rewritten.node_count(),
            report.tensors.len(),
            report.swap_ins_without_control
        );
        best = best.min(seconds);
    }
    println!(
        "tflms rewrite, {}-node training graph: best {best:.3} s (target < 2 s)",
        graph.node_count()
    );
}
