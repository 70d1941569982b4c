//! Bad input on the command line: a one-line error naming the file and the
//! node or tensor, exit code 2, no panic.

use lms_compiler::frontend;
use lms_proto::onnx::{ModelProto, NodeProto};
use lms_proto::Message;
use lms_tests::{fixture, lms};
use std::path::PathBuf;

/// Runs `lms inspect` on a file and returns its stderr, asserting exit code 2
/// and a single line.
fn inspect_error(path: &str) -> String {
    let out = lms(&["inspect", path, "--batch", "1"]);
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{path}: stderr {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "{path}: not one line: {stderr}");
    assert!(stderr.starts_with("lms: error: "), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// A scratch folder for this test binary.
fn scratch(name: &str) -> PathBuf {
    lms_tests::scratch_path("cli-errors", name)
}

/// The tiny GPT fixture, edited and written to a scratch file.
fn edited(name: &str, edit: impl FnOnce(&mut ModelProto)) -> String {
    let mut model = frontend::read_model(&fixture("models/tiny_gpt.onnx")).unwrap();
    edit(&mut model);
    let path = scratch(name);
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path.to_str().unwrap().to_string()
}

fn node<'a>(model: &'a mut ModelProto, op: &str) -> &'a mut NodeProto {
    model.graph.as_mut().unwrap().node.iter_mut().find(|n| n.op_type == op).unwrap()
}

#[test]
fn missing_empty_directory_and_truncated_files() {
    assert!(inspect_error("no/such/model.onnx").contains("no/such/model.onnx: cannot read"));
    assert!(inspect_error("fixtures").contains("fixtures: is a directory"));
    let empty = scratch("empty.onnx");
    std::fs::write(&empty, b"").unwrap();
    assert!(inspect_error(empty.to_str().unwrap()).ends_with("empty.onnx: file is empty\n"));
    let bytes = std::fs::read(fixture("models/cnn_residual.onnx")).unwrap();
    let truncated = scratch("truncated.onnx");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    assert!(inspect_error(truncated.to_str().unwrap()).contains("truncated.onnx: not a valid ONNX model"));
}

#[test]
fn broken_graphs_name_the_node_or_tensor() {
    let dangling = edited("dangling.onnx", |m| node(m, "Erf").input[0] = "nowhere".into());
    let err = inspect_error(&dangling);
    assert!(err.contains("dangling.onnx: node") && err.contains("(Erf) reads tensor 'nowhere'"), "{err}");

    let cycle = edited("cycle.onnx", |m| {
        let softmax_out = node(m, "Softmax").output[0].clone();
        let first = &mut m.graph.as_mut().unwrap().node[0];
        if first.input.is_empty() {
            first.input.push(softmax_out);
        } else {
            first.input[0] = softmax_out;
        }
    });
    assert!(inspect_error(&cycle).contains("has a cycle through node"));

    let unsupported = edited("unsupported.onnx", |m| node(m, "Erf").op_type = "FancyOp".into());
    let err = inspect_error(&unsupported);
    assert!(err.contains("(FancyOp): unsupported op 'FancyOp'"), "{err}");

    let mismatch = edited("mismatch.onnx", |m| {
        let softmax_out = node(m, "Softmax").output[0].clone();
        let sub = node(m, "Sub");
        sub.input[1] = softmax_out; // [b,16,32] - [b,2,16,16]
    });
    let err = inspect_error(&mismatch);
    assert!(err.contains("(Sub): ") && err.contains("broadcast"), "{err}");

    let bad_attr = edited("bad_attr.onnx", |m| {
        let a = node(m, "Softmax").attribute.iter_mut().find(|a| a.name == "axis").unwrap();
        a.i = 7;
    });
    let err = inspect_error(&bad_attr);
    assert!(err.contains("(Softmax): ") && err.contains("axis"), "{err}");

    let dup = edited("duplicate.onnx", |m| {
        let softmax_out = node(m, "Softmax").output[0].clone();
        node(m, "Erf").output[0] = softmax_out;
    });
    assert!(inspect_error(&dup).contains("is produced twice"));
}

#[test]
fn symbolic_dims_need_a_value() {
    let seq = edited("symbolic.onnx", |m| {
        let input = &mut m.graph.as_mut().unwrap().input[0];
        let shape = match input.r#type.as_mut().unwrap().value.as_mut().unwrap() {
            lms_proto::onnx::type_proto::Value::TensorType(t) => t.shape.as_mut().unwrap(),
        };
        shape.dim[1].value = Some(lms_proto::onnx::tensor_shape_proto::dimension::Value::DimParam("seq".into()));
    });
    let err = inspect_error(&seq);
    assert!(err.contains("input 'tokens': dimension 1 ('seq') is symbolic; set it with --dim seq=N"), "{err}");
    let out = lms(&["inspect", &seq, "--dim", "seq=16", "--batch", "3", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A symbolic batch is never silently 1: every command that reads a model
/// asks for `--batch`, naming the dimension.
#[test]
fn a_symbolic_batch_needs_batch() {
    let out = scratch("symbolic-batch.lms");
    let wanted = "fixtures/models/tiny_gpt.onnx: input 'tokens': dimension 0 ('batch') is symbolic; set the batch with --batch N";
    for args in [
        vec!["inspect", "fixtures/models/tiny_gpt.onnx"],
        vec!["compile", "fixtures/models/tiny_gpt.onnx", "-o", out.to_str().unwrap()],
    ] {
        let run = lms(&args);
        let err = String::from_utf8_lossy(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.trim_end(), format!("lms: error: {wanted}"), "{args:?}");
    }
    assert!(!out.exists(), "nothing is written");
    let named = lms(&["inspect", "fixtures/models/tiny_gpt.onnx", "--dim", "batch=3", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&named.stdout).unwrap();
    assert_eq!(json["inputs"][0]["shape"][0], 3, "--dim names the batch too");
}

#[test]
fn inspect_json_has_the_documented_keys() {
    let out = lms(&["inspect", "fixtures/models/cnn_residual.onnx", "--batch", "8", "--json"]);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in ["nodes", "ops", "parameter_bytes", "activation_bytes", "peak_bytes"] {
        assert!(json.get(key).is_some(), "missing {key}");
    }
    assert_eq!(json["inputs"][0]["shape"], serde_json::json!([8, 3, 32, 32]));
    assert_eq!(json["ops"]["Conv"], 4);
}

/// The MLP fixture with `fc1.weight` moved to an external data file.
fn with_external_weight(dir: &std::path::Path, location: &str) -> PathBuf {
    let mut model = frontend::read_model(&fixture("models/mlp.onnx")).unwrap();
    let init = model.graph.as_mut().unwrap().initializer.iter_mut().find(|t| t.name == "fc1.weight").unwrap();
    let data = lms_compiler::frontend::tensor::decode(init, None).unwrap();
    std::fs::write(dir.join("weights.bin"), [vec![0u8; 16], data.bytes.to_vec()].concat()).unwrap();
    init.raw_data.clear();
    init.float_data.clear();
    init.data_location = 1;
    init.external_data =
        [("location", location.to_string()), ("offset", "16".into()), ("length", data.bytes.len().to_string())]
            .into_iter()
            .map(|(k, v)| lms_proto::onnx::StringStringEntryProto { key: k.into(), value: v })
            .collect();
    let path = dir.join("external.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    path
}

#[test]
fn external_data_is_read_and_listed_in_the_depfile() {
    let dir = scratch("external");
    std::fs::create_dir_all(&dir).unwrap();
    let model = with_external_weight(&dir, "weights.bin");
    let (out, dep) = (dir.join("m.lms"), dir.join("m.d"));
    let run = lms(&[
        "compile",
        model.to_str().unwrap(),
        "--batch",
        "1",
        "-o",
        out.to_str().unwrap(),
        "--depfile",
        dep.to_str().unwrap(),
    ]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let depfile = std::fs::read_to_string(&dep).unwrap();
    assert!(depfile.starts_with(&format!("{}: ", out.display())) && depfile.contains("weights.bin"), "{depfile}");
    // Same parameters as the fixture with inline weights.
    let batch = frontend::FrontendOptions { batch: Some(1), ..Default::default() };
    let inline = frontend::load(&fixture("models/mlp.onnx"), &batch).unwrap();
    let external = frontend::load(&model, &batch).unwrap();
    let weight =
        |g: &lms_compiler::ir::Graph| g.tensors().find(|(_, t)| t.name == "fc1.weight").unwrap().1.data.clone();
    assert_eq!(weight(&inline.graph), weight(&external.graph));

    std::fs::remove_file(dir.join("weights.bin")).unwrap();
    let err = inspect_error(model.to_str().unwrap());
    assert!(err.contains("tensor 'fc1.weight'") && err.contains("cannot read external data"), "{err}");
    let escaping = with_external_weight(&dir, "../weights.bin");
    let err = inspect_error(escaping.to_str().unwrap());
    assert!(err.contains("must stay inside the model's folder"), "{err}");
}
