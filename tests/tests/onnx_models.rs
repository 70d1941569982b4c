//! The frontend on real ONNX models: every light model-zoo graph and every
//! pytorch-converted / pytorch-operator case whose ops lms supports imports
//! and shape-infers; inferred output shapes equal the expected outputs'; and
//! activation bytes match ONNX's own shape inference within 1%.

use lms_compiler::commands::inspect::InspectReport;
use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::shape;
use lms_compiler::train::TrainOptions;
use lms_proto::onnx::TensorProto;
use lms_proto::Message;
use lms_tests::onnx_builder::{ModelBuilder, A};
use lms_tests::training::{compile, session};
use lms_tests::{list, onnx_data};
use std::collections::BTreeMap;
use std::path::Path;

/// Ops of a model that lms does not support, sorted and deduplicated.
fn unsupported_ops(model: &Path) -> Vec<String> {
    let proto = frontend::read_model(model).expect("fixture decodes");
    let mut ops: Vec<String> = proto
        .graph
        .iter()
        .flat_map(|g| &g.node)
        .map(|n| n.op_type.clone())
        .filter(|op| !shape::is_supported(op))
        .collect();
    ops.sort();
    ops.dedup();
    ops
}

#[test]
fn every_light_model_imports_and_matches_onnx_activation_bytes() {
    let reference: serde_json::Value = serde_json::from_slice(
        &std::fs::read(lms_tests::fixture("data/reference/light_activation_bytes.json"))
            .expect("reference JSON (run fetch-onnx-testdata.sh)"),
    )
    .expect("reference JSON parses");
    let models = list(&onnx_data("light"), |p| p.extension().is_some_and(|e| e == "onnx"));
    assert_eq!(models.len(), 9, "the onnx wheel ships 9 light models");
    for path in models {
        let stem = path.file_stem().unwrap().to_str().unwrap();
        assert!(unsupported_ops(&path).is_empty(), "{stem} uses unsupported ops {:?}", unsupported_ops(&path));
        let model = frontend::load(&path, &FrontendOptions { batch: Some(1), ..Default::default() })
            .unwrap_or_else(|e| panic!("{e}"));
        let report = InspectReport::new(&model).unwrap();
        let expected = &reference["models"][stem];
        let want = expected["activation_bytes"].as_u64().expect("activation_bytes");
        let got = report.activation_bytes;
        let error = (got as f64 - want as f64).abs() / want as f64;
        println!("{stem}: activation bytes {got} vs onnx {want} ({:.3}%)", error * 100.0);
        assert!(error <= 0.01, "{stem}: activation bytes {got} differ from onnx's {want} by {:.2}%", error * 100.0);
        assert_eq!(report.nodes as u64, expected["nodes"].as_u64().unwrap(), "{stem}: node count");
        let want_params = expected["parameter_bytes"].as_u64().unwrap();
        assert_eq!(report.parameter_bytes, want_params, "{stem}: parameter bytes");
        assert!(report.peak_bytes >= report.largest_tensors[0].bytes, "{stem}: peak below the largest tensor");
    }
}

/// Shapes of a case's expected outputs (`test_data_set_0/output_*.pb`).
fn expected_output_shapes(case: &Path) -> Vec<Vec<usize>> {
    list(&case.join("test_data_set_0"), |p| p.file_name().unwrap().to_str().unwrap().starts_with("output_"))
        .iter()
        .map(|p| {
            let t = TensorProto::decode(&*std::fs::read(p).unwrap()).unwrap();
            t.dims.iter().map(|&d| d as usize).collect()
        })
        .collect()
}

#[test]
fn every_supported_pytorch_case_imports_with_the_expected_output_shapes() {
    let mut imported = 0;
    let mut skipped = Vec::new();
    for suite in ["pytorch-converted", "pytorch-operator"] {
        for case in list(&onnx_data(suite), |p| p.is_dir()) {
            let name = format!("{suite}/{}", case.file_name().unwrap().to_str().unwrap());
            let model_path = case.join("model.onnx");
            let unsupported = unsupported_ops(&model_path);
            if !unsupported.is_empty() {
                skipped.push(format!("{name}: unsupported ops {}", unsupported.join(", ")));
                continue;
            }
            let model =
                frontend::load(&model_path, &FrontendOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
            let shapes: Vec<Vec<usize>> =
                model.graph.outputs.iter().map(|&t| model.graph.tensor(t).ty.shape.clone()).collect();
            assert_eq!(shapes, expected_output_shapes(&case), "{name}: output shapes");
            InspectReport::new(&model).unwrap_or_else(|e| panic!("{name}: {e}"));
            imported += 1;
        }
    }
    println!("imported {imported} cases; skipped {}:", skipped.len());
    for s in &skipped {
        println!("  skipped {s}");
    }
    assert!(imported >= 100, "only {imported} pytorch cases imported");
}

/// The pytorch-converted and pytorch-operator cases that do not compile for training
/// (mean squared error on the first output, every weight trained), each with a fragment
/// of its error (no op lms supports lacks a gradient: only a model with an integer output).
const TRAINING_REFUSALS: &[(&str, &str)] =
    &[("pytorch-operator/test_operator_non_float_params", "mean squared error needs a float output")];

#[test]
fn every_supported_pytorch_case_compiles_for_training_but_the_listed_refusals() {
    let options = TrainOptions { loss: lms_compiler::train::Loss::MeanSquaredError, ..Default::default() };
    let mut refused = Vec::new();
    let mut trained = 0;
    for suite in ["pytorch-converted", "pytorch-operator"] {
        for case in list(&onnx_data(suite), |p| p.is_dir()) {
            let name = format!("{suite}/{}", case.file_name().unwrap().to_str().unwrap());
            let model_path = case.join("model.onnx");
            if !unsupported_ops(&model_path).is_empty() {
                continue;
            }
            let model =
                frontend::load(&model_path, &FrontendOptions::default()).unwrap_or_else(|e| panic!("{name}: {e}"));
            match lms_compiler::train::build(&model.graph, &options) {
                Ok(_) => trained += 1,
                Err(e) => refused.push((name, e.to_string())),
            }
        }
    }
    let listed: Vec<&str> = TRAINING_REFUSALS.iter().map(|&(name, _)| name).collect();
    let names: Vec<&str> = refused.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(names, listed, "the cases refused for training: {refused:#?}");
    for ((name, error), (_, reason)) in refused.iter().zip(TRAINING_REFUSALS) {
        assert!(error.contains(reason), "{name}: refused with '{error}', expected '{reason}'");
    }
    assert!(trained >= 100, "only {trained} pytorch cases compile for training");
}

/// The cases built around ConvTranspose and InstanceNormalization train: one SGD step on
/// their inputs' synthetic data gives a finite loss and moves every trained weight.
#[test]
fn the_conv_transpose_and_instance_norm_cases_take_a_training_step() {
    let options = TrainOptions { loss: lms_compiler::train::Loss::MeanSquaredError, ..Default::default() };
    for case in [
        "pytorch-converted/test_ConvTranspose2d",
        "pytorch-converted/test_ConvTranspose2d_no_bias",
        "pytorch-operator/test_operator_convtranspose",
        "pytorch-operator/test_operator_symbolic_override",
    ] {
        let model = frontend::load(&onnx_data(case).join("model.onnx"), &FrontendOptions::default())
            .unwrap_or_else(|e| panic!("{case}: {e}"));
        let graph = lms_tests::training::serialized(
            &lms_compiler::train::build(&model.graph, &options).unwrap_or_else(|e| panic!("{case}: {e}")),
        );
        let trained = lms_tests::training::updated_variables(&graph, "SgdUpdate");
        assert!(!trained.is_empty(), "{case}: nothing is trained");
        one_step_moves(&graph, &trained, case);
    }
}

/// A convolution, pooling and matrix product model importing `opset`.
fn conv_model(opset: i64) -> lms_proto::onnx::ModelProto {
    let mut m = ModelBuilder::new("opsets", opset);
    m.input("x", 1, &[2, 3, 8, 8])
        .weight("w", &[4, 3, 3, 3], -0.5, 0.5)
        .weight("w2", &[64, 10], -0.3, 0.3)
        .node("Conv", &["x", "w"], &["c"], vec![("pads", A::Is(vec![1, 1, 1, 1]))])
        .node("Relu", &["c"], &["r"], vec![])
        .node("MaxPool", &["r"], &["p"], vec![("kernel_shape", A::Is(vec![2, 2])), ("strides", A::Is(vec![2, 2]))])
        .node("Flatten", &["p"], &["f"], vec![("axis", A::I(1))])
        .node("MatMul", &["f", "w2"], &["y"], vec![])
        .output("y");
    m.build()
}

/// Opsets 22 and 23 only widen the type constraints of the ops lms runs:
/// the same model at opsets 17, 22 and 23 trains to the same bits; opset 24
/// is refused naming it and the opsets lms reads.
#[test]
fn opsets_22_and_23_train_as_earlier_opsets_do() {
    let bits = |opset: i64| {
        let graph = compile(&conv_model(opset), None, &TrainOptions::default());
        let mut s = session(&graph, 5, &BTreeMap::new());
        let losses: Vec<u32> = (0..3).map(|_| s.step().unwrap().loss.unwrap().to_bits()).collect();
        let vars: BTreeMap<String, Vec<u8>> =
            s.variables().unwrap().into_iter().map(|(n, t)| (n, t.to_le_bytes())).collect();
        (losses, vars)
    };
    let reference = bits(17);
    assert!(!reference.1.is_empty());
    for opset in [22, 23] {
        assert_eq!(bits(opset), reference, "opset {opset} trains differently from opset 17");
    }
    let refused = frontend::import(&conv_model(24), None, &FrontendOptions::default()).unwrap_err().to_string();
    assert!(refused.contains("opset 24") && refused.contains("6 to 23"), "{refused}");
}

/// A model that rounds its data imports (Round needs no gradient on the data path) and takes
/// a training step: a finite loss, the weight after the Round moved.
#[test]
fn a_model_rounding_its_input_imports_and_trains() {
    let mut m = ModelBuilder::new("round", 17);
    m.input("x", 1, &[2, 8])
        .weight("w", &[8, 3], -0.5, 0.5)
        .node("Round", &["x"], &["r"], vec![])
        .node("MatMul", &["r", "w"], &["y"], vec![])
        .output("y");
    let options = TrainOptions { loss: lms_compiler::train::Loss::MeanSquaredError, ..Default::default() };
    let graph = compile(&m.build(), None, &options);
    assert!(graph.nodes.iter().any(|n| n.op == "Round"), "the Round node is kept");
    let trained = lms_tests::training::updated_variables(&graph, "SgdUpdate");
    assert!(!trained.is_empty(), "nothing is trained");
    one_step_moves(&graph, &trained, "round");
}

/// A model with a Mish activation between two layers (opset 18) imports and trains: a
/// finite loss, and the first layer's weight, whose gradient passes through Mish, moves.
#[test]
fn a_model_with_a_mish_activation_imports_and_trains() {
    let mut m = ModelBuilder::new("mish", 18);
    m.input("x", 1, &[2, 8])
        .weight("w1", &[8, 6], -0.5, 0.5)
        .weight("w2", &[6, 3], -0.5, 0.5)
        .node("MatMul", &["x", "w1"], &["h"], vec![])
        .node("Mish", &["h"], &["a"], vec![])
        .node("MatMul", &["a", "w2"], &["y"], vec![])
        .output("y");
    let options = TrainOptions { loss: lms_compiler::train::Loss::MeanSquaredError, ..Default::default() };
    let graph = compile(&m.build(), None, &options);
    assert!(graph.nodes.iter().any(|n| n.op == "Mish"), "the Mish node is kept");
    let trained = lms_tests::training::updated_variables(&graph, "SgdUpdate");
    assert!(trained.iter().any(|name| name == "w1"), "w1 is not trained: {trained:?}");
    one_step_moves(&graph, &trained, "mish");
}

/// One training step of `graph` (named `case` in messages) has a finite loss and moves every
/// variable in `trained`.
fn one_step_moves(graph: &lms_proto::lms::Graph, trained: &[String], case: &str) {
    let mut s = session(graph, 3, &BTreeMap::new());
    let before: BTreeMap<_, _> = s.variables().unwrap().into_iter().collect();
    let loss = s.step().unwrap().loss.unwrap();
    assert!(loss.is_finite(), "{case}: loss {loss}");
    let after: BTreeMap<_, _> = s.variables().unwrap().into_iter().collect();
    for name in trained {
        assert_ne!(before[name], after[name], "{case}: '{name}' did not move");
    }
}
