//! Training what the user means: the loss's class axis comes from the model,
//! weights in parameter positions are trained and buffers keep their values,
//! `--trainable`/`--frozen` override, and ReLU6 (Clip) trains.

use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::train::{self, Optimizer, TrainOptions};
use lms_proto::lms::attribute::Value;
use lms_runtime::HostTensor;
use lms_tests::onnx_builder::{ModelBuilder, A};
use lms_tests::training::{compile, session, updated_variables};
use lms_tests::{fixture, onnx_data};
use std::collections::BTreeMap;

fn adam(lr: f32) -> TrainOptions {
    TrainOptions { optimizer: Optimizer::Adam { lr, beta1: 0.9, beta2: 0.999, epsilon: 1e-8 }, ..Default::default() }
}

fn model(path: &std::path::Path) -> lms_proto::onnx::ModelProto {
    frontend::read_model(path).unwrap()
}

/// SqueezeNet's output is [N,1000,1,1] with its Softmax over axis 1: the loss
/// is over those 1000 classes (not the last axis, of size 1) and falls.
#[test]
fn squeezenet_light_trains_over_its_class_axis() {
    let graph = compile(&model(&onnx_data("light/light_squeezenet.onnx")), Some(2), &TrainOptions::default());
    let labels = graph.nodes.iter().find(|n| n.name == "labels").expect("a labels input");
    let range = labels.attributes.iter().find(|a| a.name == "range").expect("labels have a range");
    assert_eq!(range.value, Some(Value::Int(1000)));
    let mut s = session(&graph, 0, &BTreeMap::new());
    let losses: Vec<f32> = (0..5).map(|_| s.step().unwrap().loss.unwrap()).collect();
    println!("squeezenet losses {losses:?}");
    assert!(losses.iter().all(|l| l.is_finite() && *l > 0.1), "{losses:?}");
    assert!(losses[4] < losses[0] / 2.0, "the loss does not fall: {losses:?}");
}

/// A loss over a class axis of size 1 cannot vary: an error naming the tensor.
#[test]
fn a_class_axis_of_size_one_is_an_error() {
    let mut m = ModelBuilder::new("one_class", 13);
    m.input("x", 1, &[4, 6]).weight("w", &[6, 1], -1.0, 1.0).node("MatMul", &["x", "w"], &["y"], vec![]).output("y");
    let forward = frontend::import(&m.build(), None, &FrontendOptions::default()).unwrap();
    let err = train::build(&forward.graph, &TrainOptions::default()).unwrap_err().to_string();
    assert!(err.starts_with("tensor 'y': its class axis (axis 1 of the model's output) has size 1"), "{err}");
}

/// "No normalisation left" is said of a CNN built around it (a residual
/// addition), never of a plain stack of convolutions, which trains without.
#[test]
fn a_residual_cnn_without_normalisation_is_warned_about_and_a_plain_stack_is_not() {
    let warnings = |residual: bool| {
        let mut m = ModelBuilder::new("cnn", 13);
        m.input("x", 1, &[2, 3, 8, 8]).weight("w1", &[3, 3, 3, 3], -1.0, 1.0).weight("w2", &[3, 3, 3, 3], -1.0, 1.0);
        let pad = || vec![("pads", A::Is(vec![1, 1, 1, 1]))];
        m.node("Conv", &["x", "w1"], &["c1"], pad()).node("Conv", &["c1", "w2"], &["c2"], pad());
        let last = if residual {
            m.node("Add", &["c1", "c2"], &["sum"], vec![]);
            "sum"
        } else {
            "c2"
        };
        m.node("GlobalAveragePool", &[last], &["pooled"], vec![]).output("pooled");
        let forward = frontend::import(&m.build(), None, &FrontendOptions::default()).unwrap();
        train::summary(&forward.graph, &TrainOptions::default()).unwrap().warnings
    };
    let residual = warnings(true);
    assert!(residual.len() == 1 && residual[0].contains("CNN (2 Conv) but has no normalisation"), "{residual:?}");
    assert!(warnings(false).is_empty());
}

/// The GPT-shaped fixture keeps its causal-mask initializer and its
/// ConstantOfShape key mask as they are, trains every weight, and trains
/// through its ReLU6.
#[test]
fn gpt_buffers_keep_their_values_and_relu6_trains() {
    let onnx = model(&fixture("models/gpt_buffers.onnx"));
    let mask = onnx.graph.as_ref().unwrap().initializer.iter().find(|t| t.name == "attn.causal_mask").unwrap();
    let mask = HostTensor::from_le_bytes(lms_proto::lms::DType::DtypeF32, &[8, 8], &mask.raw_data).unwrap();

    let forward = frontend::import(&onnx, None, &FrontendOptions { batch: Some(4), ..Default::default() }).unwrap();
    let summary = train::summary(&forward.graph, &adam(0.01)).unwrap();
    assert_eq!(summary.frozen, ["attn.causal_mask"]);
    assert_eq!(summary.trained.len(), 9, "{:?}", summary.trained);

    let graph = compile(&onnx, Some(4), &adam(0.01));
    let trained = updated_variables(&graph, "AdamUpdate");
    assert!(!trained.iter().any(|n| n.contains("mask")), "{trained:?}");
    let key_mask = graph.nodes.iter().find(|n| n.name == "attn.key_mask").expect("the key mask node is kept");
    assert_eq!(key_mask.op, "ConstantOfShape");
    let clip_grads = graph
        .nodes
        .iter()
        .filter(|n| n.op == "UnaryGrad" && n.attributes.iter().any(|a| a.value == Some(Value::String("Clip".into()))))
        .count();
    assert_eq!(clip_grads, 1);

    let mut s = session(&graph, 0, &BTreeMap::new());
    let losses: Vec<f32> = (0..30).map(|_| s.step().unwrap().loss.unwrap()).collect();
    assert!(losses[29] < losses[0] * 0.8, "{losses:?}");
    let variables: BTreeMap<_, _> = s.variables().unwrap().into_iter().collect();
    assert_eq!(variables["attn.causal_mask"], mask);
    assert!(!variables.contains_key("attn.key_mask"));
}

#[test]
fn frozen_globs_remove_from_the_trained_set() {
    let mlp = model(&fixture("models/mlp.onnx"));
    let options = TrainOptions { frozen: vec!["fc1.*".into()], ..Default::default() };
    let graph = compile(&mlp, Some(4), &options);
    assert_eq!(updated_variables(&graph, "SgdUpdate"), ["fc2.bias", "fc2.weight", "fc3.bias", "fc3.weight"]);
    let forward = frontend::import(&mlp, None, &FrontendOptions { batch: Some(4), ..Default::default() }).unwrap();
    let unmatched = TrainOptions { frozen: vec!["conv*".into()], ..Default::default() };
    let err = train::build(&forward.graph, &unmatched).unwrap_err().to_string();
    assert_eq!(err, "--frozen 'conv*' matches no weight or buffer of the model");
}
