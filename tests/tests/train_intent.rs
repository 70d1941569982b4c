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

/// Tables added to or concatenated with activations train: a ViT-style class
/// token (broadcast to the batch by an Expand whose shape comes from the
/// data, then concatenated with the patches), a learned position table added
/// to them, and BatchNorm scales and shifts stored as [C,1,1] initializers
/// after the normalisation (as in DenseNet's exports). Buffers keep their
/// values, each with its reason: an additive mask, a rotary-style cache
/// multiplying along two axes, a fill of one value, a float read only by a
/// shape op. A float table that reaches the loss in no weight
/// role is frozen with a warning.
#[test]
fn class_tokens_position_tables_and_stored_scales_train_and_buffers_stay() {
    let mut m = ModelBuilder::new("vit_like", 13);
    m.input("patches", 1, &[2, 4, 8])
        .weight("cls_token", &[1, 1, 8], -0.5, 0.5)
        .weight("position_table", &[1, 5, 8], -0.5, 0.5)
        .weight("mask", &[5, 8], -1e9, -1e8)
        .weight("rotary_cos", &[1, 5, 8], -1.0, 1.0)
        .weight("divisor", &[8], 1.0, 2.0)
        .weight("shape_only", &[3], 0.0, 1.0)
        .weight("head", &[8, 3], -0.5, 0.5)
        .ints("start", &[1], &[0])
        .ints("end", &[1], &[1])
        .ints("rest", &[2], &[1, 8])
        .weight("zeros", &[1, 5, 8], 0.0, 0.0);
    m.node("Shape", &["patches"], &["patches_shape"], vec![])
        .node("Slice", &["patches_shape", "start", "end"], &["batch"], vec![])
        .node("Concat", &["batch", "rest"], &["cls_shape"], vec![("axis", A::I(0))])
        .node("Expand", &["cls_token", "cls_shape"], &["cls"], vec![])
        .node("Concat", &["cls", "patches"], &["tokens"], vec![("axis", A::I(1))])
        .node("Add", &["tokens", "position_table"], &["embedded"], vec![])
        .node("Add", &["embedded", "mask"], &["masked"], vec![])
        .node("Mul", &["masked", "rotary_cos"], &["rotated"], vec![])
        .node("Add", &["rotated", "zeros"], &["filled"], vec![])
        .node("Div", &["filled", "divisor"], &["scaled"], vec![])
        .node("Shape", &["shape_only"], &["unused_shape"], vec![])
        .node("MatMul", &["scaled", "head"], &["logits"], vec![])
        .output("logits");
    let forward = frontend::import(&m.build(), None, &FrontendOptions::default()).unwrap();
    let summary = train::summary(&forward.graph, &adam(0.01)).unwrap();
    assert_eq!(summary.trained, ["cls_token", "position_table", "head"]);
    let frozen: Vec<(&str, &str)> =
        summary.frozen.iter().zip(&summary.frozen_why).map(|(n, w)| (n.as_str(), w.as_str())).collect();
    assert_eq!(
        frozen,
        [
            ("mask", "a mask"),
            ("rotary_cos", "a cache multiplying activations"),
            ("divisor", "no weight role"),
            ("shape_only", "no gradient path to the loss"),
            ("zeros", "one repeated value")
        ]
    );
    assert_eq!(summary.warnings.len(), 2, "{:?}", summary.warnings);
    assert!(summary.warnings[0].starts_with("'divisor' [8] reaches the loss but is frozen (no weight role)"));
    assert!(summary.warnings[1].starts_with("'zeros' [1, 5, 8] reaches the loss but is frozen (one repeated value)"));

    let graph = compile(&m.build(), None, &adam(0.01));
    let updated = updated_variables(&graph, "AdamUpdate");
    let weights: Vec<&str> = updated.iter().map(String::as_str).filter(|n| !n.contains(".adam_")).collect();
    assert_eq!(weights, ["cls_token", "head", "position_table"]);
    let mut s = session(&graph, 0, &BTreeMap::new());
    s.step().unwrap();
    let variables: BTreeMap<_, _> = s.variables().unwrap().into_iter().collect();
    let initial = |name: &str| {
        let t = m.build().graph.unwrap().initializer.into_iter().find(|t| t.name == name).unwrap();
        t.float_data
    };
    for name in ["cls_token", "position_table"] {
        assert_ne!(variables[name].as_f32(name).unwrap(), initial(name), "{name} kept its values");
    }
    assert_eq!(variables["rotary_cos"].as_f32("rotary_cos").unwrap(), initial("rotary_cos"));
}

/// A DenseNet-style block: BatchNormalization, then a per-channel scale and
/// shift stored as [C,1,1] initializers: both train, like the normalisation's
/// own scale and bias; the running statistics keep to BatchNormTrain's updates.
#[test]
fn batch_norm_scales_stored_as_initializers_train() {
    let mut m = ModelBuilder::new("densenet_like", 13);
    m.input("x", 1, &[2, 3, 4, 4])
        .weight("conv", &[4, 3, 3, 3], -0.5, 0.5)
        .weight("bn.scale", &[4], 0.5, 1.5)
        .weight("bn.bias", &[4], -0.5, 0.5)
        .weight("bn.mean", &[4], -0.1, 0.1)
        .weight("bn.var", &[4], 0.9, 1.1)
        .weight("stored_scale", &[4, 1, 1], 0.5, 1.5)
        .weight("stored_shift", &[4, 1, 1], -0.5, 0.5);
    m.node("Conv", &["x", "conv"], &["c"], vec![("pads", A::Is(vec![1, 1, 1, 1]))])
        .node("BatchNormalization", &["c", "bn.scale", "bn.bias", "bn.mean", "bn.var"], &["n"], vec![])
        .node("Mul", &["n", "stored_scale"], &["scaled"], vec![])
        .node("Add", &["scaled", "stored_shift"], &["shifted"], vec![])
        .node("Relu", &["shifted"], &["r"], vec![])
        .node("GlobalAveragePool", &["r"], &["pooled"], vec![])
        .output("pooled");
    let forward = frontend::import(&m.build(), None, &FrontendOptions::default()).unwrap();
    let summary = train::summary(&forward.graph, &adam(0.01)).unwrap();
    assert_eq!(summary.trained, ["conv", "bn.scale", "bn.bias", "stored_scale", "stored_shift"]);
    assert!(summary.frozen.is_empty() && summary.warnings.is_empty(), "{summary:?}");
}

/// BatchNorm's running variance follows ONNX (the biased batch variance) or,
/// when asked or when the model's producer is pytorch, PyTorch (unbiased):
/// on the same batch, the two updates' batch terms differ by n/(n − 1), n
/// the 16 elements per channel; `lms compile` says which it used and why.
#[test]
fn batch_norm_running_variance_is_biased_as_onnx_or_unbiased_as_pytorch() {
    use lms_compiler::train::RunningVariance;
    use prost::Message;
    let mut m = ModelBuilder::new("bn", 13);
    m.input("x", 1, &[4, 3, 2, 2])
        .weight("bn.scale", &[3], 0.5, 1.5)
        .weight("bn.bias", &[3], -0.5, 0.5)
        .weight("bn.mean", &[3], -0.1, 0.1)
        .weight("bn.var", &[3], 0.9, 1.1)
        .node(
            "BatchNormalization",
            &["x", "bn.scale", "bn.bias", "bn.mean", "bn.var"],
            &["n"],
            vec![("momentum", A::F(0.75))],
        )
        .node("GlobalAveragePool", &["n"], &["pooled"], vec![])
        .output("pooled");
    let running_var = |convention| {
        let options = TrainOptions { running_variance: Some(convention), ..adam(0.01) };
        let mut s = session(&compile(&m.build(), None, &options), 3, &BTreeMap::new());
        s.step().unwrap();
        let variables: BTreeMap<_, _> = s.variables().unwrap().into_iter().collect();
        variables["bn.var"].as_f32("bn.var").unwrap().to_vec()
    };
    let (biased, unbiased) = (running_var(RunningVariance::Biased), running_var(RunningVariance::Unbiased));
    let initial = m.build().graph.unwrap().initializer.into_iter().find(|t| t.name == "bn.var").unwrap().float_data;
    for ch in 0..3 {
        let batch_term = |updated: f32| f64::from(updated) - 0.75 * f64::from(initial[ch]);
        let ratio = batch_term(unbiased[ch]) / batch_term(biased[ch]);
        assert!((ratio - 16.0 / 15.0).abs() < 1e-4, "channel {ch}: ratio {ratio}");
    }

    let dir = lms_tests::scratch_path("train-intent", "bn");
    std::fs::create_dir_all(&dir).unwrap();
    let summary = |producer: &str, flags: &[&str]| {
        let mut proto = m.build();
        proto.producer_name = producer.into();
        let path = dir.join(format!("{producer}.onnx"));
        std::fs::write(&path, proto.encode_to_vec()).unwrap();
        let out = dir.join("bn.lms");
        let args = [&["compile", path.to_str().unwrap(), "-o", out.to_str().unwrap()][..], flags].concat();
        let text = lms_tests::lms_ok(&args);
        text.lines().find(|l| l.starts_with("batch norm")).unwrap_or_else(|| panic!("{text}")).to_string()
    };
    assert_eq!(
        summary("onnx-builder", &[]),
        "batch norm      running variance updated with the biased batch variance (ONNX's definition)"
    );
    assert_eq!(
        summary("pytorch", &[]),
        "batch norm      running variance updated with the unbiased batch variance (PyTorch's convention): the model's producer is pytorch"
    );
    assert_eq!(
        summary("pytorch", &["--running-variance", "biased"]),
        "batch norm      running variance updated with the biased batch variance (ONNX's definition)"
    );
}
