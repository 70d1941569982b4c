//! Benchmark: `lms inspect` (decode, import with shape inference, and the
//! inspect analyses) on a synthetic 100,000-node ONNX graph.
//!
//! Run with `cargo bench -p lms-compiler --bench inspect`. Target: under 1 s
//! in release.

use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::inspect::InspectReport;
use lms_proto::onnx::{self as onnx, type_proto, ModelProto};
use lms_proto::Message;
use std::time::Instant;

/// Nodes in the synthetic graph: residual blocks of MatMul, Add, Relu, Add.
const NODES: usize = 100_000;
const WIDTH: i64 = 64;

fn tensor_input(name: &str, dims: &[i64]) -> onnx::ValueInfoProto {
    use onnx::tensor_shape_proto::{dimension, Dimension};
    let dim = dims.iter().map(|&d| Dimension { value: Some(dimension::Value::DimValue(d)), ..Default::default() }).collect();
    onnx::ValueInfoProto {
        name: name.into(),
        r#type: Some(onnx::TypeProto {
            value: Some(type_proto::Value::TensorType(type_proto::Tensor {
                elem_type: 1,
                shape: Some(onnx::TensorShapeProto { dim }),
            })),
            ..Default::default()
        }),
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

/// A chain of NODES / 4 residual blocks `h' = relu(h @ W + b) + h`.
fn synthetic_model() -> ModelProto {
    let weight = onnx::TensorProto {
        name: "W".into(),
        dims: vec![WIDTH, WIDTH],
        data_type: 1,
        float_data: vec![0.01; (WIDTH * WIDTH) as usize],
        ..Default::default()
    };
    let bias = onnx::TensorProto { name: "b".into(), dims: vec![WIDTH], data_type: 1, float_data: vec![0.0; WIDTH as usize], ..Default::default() };
    let mut nodes = Vec::with_capacity(NODES);
    let mut h = "x".to_string();
    for i in 0..NODES / 4 {
        let (m, a, r, out) = (format!("mm{i}"), format!("add{i}"), format!("relu{i}"), format!("h{i}"));
        nodes.push(node("MatMul", &[&h, "W"], &m));
        nodes.push(node("Add", &[&m, "b"], &a));
        nodes.push(node("Relu", &[&a], &r));
        nodes.push(node("Add", &[&r, &h], &out));
        h = out;
    }
    ModelProto {
        ir_version: 8,
        opset_import: vec![onnx::OperatorSetIdProto { domain: String::new(), version: 13 }],
        graph: Some(onnx::GraphProto {
            name: "synthetic".into(),
            node: nodes,
            initializer: vec![weight, bias],
            input: vec![tensor_input("x", &[32, WIDTH])],
            output: vec![tensor_input(&h, &[32, WIDTH])],
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn main() {
    let bytes = synthetic_model().encode_to_vec();
    let mut best = f64::INFINITY;
    for run in 0..3 {
        let start = Instant::now();
        let proto = frontend::decode_model(&bytes).expect("decodes");
        let decoded = start.elapsed();
        let model = frontend::import(&proto, None, &FrontendOptions::default()).expect("imports");
        let imported = start.elapsed();
        let report = InspectReport::new(&model).expect("analyses");
        let total = start.elapsed();
        assert_eq!(report.nodes, NODES);
        println!(
            "run {run}: {NODES} nodes, {:.1} MiB: decode {:.3} s, import {:.3} s, inspect {:.3} s, total {:.3} s",
            bytes.len() as f64 / (1 << 20) as f64,
            decoded.as_secs_f64(),
            (imported - decoded).as_secs_f64(),
            (total - imported).as_secs_f64(),
            total.as_secs_f64()
        );
        best = best.min(total.as_secs_f64());
    }
    println!("inspect, 100,000-node graph: best {best:.3} s (target < 1 s)");
}
