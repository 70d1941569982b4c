//! `lms compile`, `lms simulate` and `lms run` end to end.

use lms_tests::lms;
use std::path::PathBuf;

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lms-cli-train-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

fn ok(args: &[&str]) -> String {
    let out = lms(args);
    assert!(out.status.success(), "lms {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn compile_is_deterministic_and_writes_the_text_form() {
    let (a, b, text) = (scratch("a.lms"), scratch("b.lms"), scratch("a.txt"));
    for out in [&a, &b] {
        ok(&["compile", "fixtures/models/cnn_residual.onnx", "--batch", "4", "--train", "momentum", "-o", out.to_str().unwrap(), "--text", text.to_str().unwrap()]);
    }
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), "same input and flags, same bytes");
    let text = std::fs::read_to_string(&text).unwrap();
    assert!(text.contains("lms::BatchNormTrain") && text.contains("lms::MomentumUpdate") && text.contains("updates("), "{text}");
}

#[test]
fn simulate_and_run_agree_on_the_peak() {
    let graph = scratch("mlp.lms");
    ok(&["compile", "fixtures/models/mlp.onnx", "--batch", "8", "--train", "sgd", "--lr", "0.1", "-o", graph.to_str().unwrap()]);
    let sim: serde_json::Value = serde_json::from_str(&ok(&["simulate", graph.to_str().unwrap(), "--json"])).unwrap();
    for key in ["peak_device_bytes", "peak_op", "live_at_peak"] {
        assert!(sim.get(key).is_some(), "simulate JSON lacks {key}");
    }
    let run: serde_json::Value = serde_json::from_str(&ok(&["run", graph.to_str().unwrap(), "--steps", "5", "--seed", "3", "--json"])).unwrap();
    assert_eq!(run["losses"].as_array().unwrap().len(), 5);
    assert_eq!(run["step_seconds"].as_array().unwrap().len(), 5);
    assert_eq!(run["peak_device_bytes"], sim["peak_device_bytes"]);
    assert!(run.get("peak_host_bytes").is_some());

    let budget = (sim["peak_device_bytes"].as_u64().unwrap() - 1).to_string();
    let out = lms(&["run", graph.to_str().unwrap(), "--steps", "1", "--device-memory", &budget]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("out of device memory at node '"), "{err}");
}

#[test]
fn run_errors_are_one_line() {
    let out = lms(&["run", "no/such.lms"]);
    assert_eq!(out.status.code(), Some(2));
    let out = lms(&["run", "fixtures/models/mlp.onnx"]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    let graph = scratch("cuda.lms");
    ok(&["compile", "fixtures/models/mlp.onnx", "-o", graph.to_str().unwrap()]);
    let out = lms(&["run", graph.to_str().unwrap(), "--device", "cuda"]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--device cpu"), "{err}");
}
