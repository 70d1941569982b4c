//! `lms compile`, `lms simulate` and `lms run` end to end.

use lms_compiler::units::format_bytes;
use lms_tests::lms;
use std::path::PathBuf;

fn scratch(name: &str) -> PathBuf {
    lms_tests::scratch_path("cli-train", name)
}

fn ok(args: &[&str]) -> String {
    lms_tests::lms_ok(args)
}

#[test]
fn compile_is_deterministic_and_writes_the_text_form() {
    let (a, b, text) = (scratch("a.lms"), scratch("b.lms"), scratch("a.txt"));
    for out in [&a, &b] {
        ok(&[
            "compile",
            "fixtures/models/cnn_residual.onnx",
            "--batch",
            "4",
            "--train",
            "momentum",
            "-o",
            out.to_str().unwrap(),
            "--text",
            text.to_str().unwrap(),
        ]);
    }
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap(), "same input and flags, same bytes");
    let text = std::fs::read_to_string(&text).unwrap();
    assert!(
        text.contains("lms::BatchNormTrain") && text.contains("lms::MomentumUpdate") && text.contains("updates("),
        "{text}"
    );
}

#[test]
fn simulate_and_run_agree_on_the_peak() {
    let graph = scratch("mlp.lms");
    ok(&[
        "compile",
        "fixtures/models/mlp.onnx",
        "--batch",
        "8",
        "--train",
        "sgd",
        "--lr",
        "0.1",
        "-o",
        graph.to_str().unwrap(),
    ]);
    let sim: serde_json::Value = serde_json::from_str(&ok(&["simulate", graph.to_str().unwrap(), "--json"])).unwrap();
    for key in ["peak_device_bytes", "peak_op", "live_at_peak"] {
        assert!(sim.get(key).is_some(), "simulate JSON lacks {key}");
    }
    let run: serde_json::Value =
        serde_json::from_str(&ok(&["run", graph.to_str().unwrap(), "--steps", "5", "--seed", "3", "--json"])).unwrap();
    assert_eq!(run["losses"].as_array().unwrap().len(), 5);
    assert_eq!(run["step_seconds"].as_array().unwrap().len(), 5);
    assert_eq!(run["peak_device_bytes"], sim["peak_device_bytes"]);
    assert!(run.get("peak_host_bytes").is_some());
    // The run used the arenas of the plan's static placement, to the byte.
    assert_eq!(
        (&run["arena_device_bytes"], &run["arena_host_bytes"]),
        (&sim["arena_device_bytes"], &sim["arena_host_bytes"])
    );
    let text = ok(&["run", graph.to_str().unwrap(), "--steps", "1"]);
    let device = sim["arena_device_bytes"].as_u64().unwrap();
    assert!(
        text.contains(&format!("arenas used: device {}, host 0 B ({device} B, 0 B)", format_bytes(device))),
        "{text}"
    );

    // A limit one byte below the device arena (above the live peak) refuses the run.
    let budget = (device - 1).to_string();
    let out = lms(&["run", graph.to_str().unwrap(), "--steps", "1", "--device-memory", &budget]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(3), "does not fit: {err}");
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
}

#[test]
fn compile_with_tflms_writes_report_and_onnx_export() {
    let (graph, report, export) = (scratch("t.lms"), scratch("t.json"), scratch("t.onnx"));
    let stdout = ok(&[
        "compile",
        "fixtures/models/cnn_residual.onnx",
        "--batch",
        "4",
        "--strategy",
        "tflms",
        "--ctrld-strategy",
        "direct-order",
        "--lb",
        "2",
        "-o",
        graph.to_str().unwrap(),
        "--report",
        report.to_str().unwrap(),
        "--onnx",
        export.to_str().unwrap(),
    ]);
    assert!(stdout.contains("tensors swapped"), "{stdout}");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    for key in ["swapped_tensors", "added_ops", "peak_device_bytes_before", "peak_device_bytes_after", "swaps"] {
        assert!(json.get(key).is_some(), "report lacks {key}");
    }
    assert!(json["swapped_tensors"].as_u64().unwrap() > 0);
    assert!(json["peak_device_bytes_after"].as_u64() < json["peak_device_bytes_before"].as_u64());
    let model = lms_compiler::frontend::read_model(&export).unwrap();
    assert!(model.opset_import.iter().any(|o| o.domain == "lms"));
    let nodes = &model.graph.as_ref().unwrap().node;
    let swap_ins: Vec<_> = nodes.iter().filter(|n| n.op_type == "SwapIn" && n.domain == "lms").collect();
    assert!(!swap_ins.is_empty());
    assert!(
        swap_ins.iter().any(|n| n.metadata_props.iter().any(|p| p.key == "lms.after")
            && n.input.iter().any(|i| i.ends_with(":control"))),
        "control edges are recorded and drawn"
    );
}

#[test]
fn budget_mode_leaves_a_fitting_graph_alone_and_names_the_shortfall() {
    let graph = scratch("fits.lms");
    let stdout = ok(&[
        "compile",
        "fixtures/models/mlp.onnx",
        "--batch",
        "4",
        "--strategy",
        "tflms",
        "--budget",
        "1GiB",
        "-o",
        graph.to_str().unwrap(),
    ]);
    assert!(stdout.contains("fits without rewriting") && stdout.contains("0 tensors swapped"), "{stdout}");
    let out = lms(&[
        "compile",
        "fixtures/models/cnn_residual.onnx",
        "--batch",
        "4",
        "--strategy",
        "tflms",
        "--budget",
        "100KiB",
        "-o",
        graph.to_str().unwrap(),
    ]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(3), "does not fit: {err}");
    assert!(
        err.contains("does not fit in device memory") && err.contains("over the budget") && err.contains("at op '"),
        "{err}"
    );
}

#[test]
fn verify_proves_a_rewrite_and_rejects_another_graph() {
    let (original, rewritten, other) = (scratch("v-orig.lms"), scratch("v-tflms.lms"), scratch("v-other.lms"));
    ok(&["compile", "fixtures/models/cnn_residual.onnx", "--batch", "2", "-o", original.to_str().unwrap()]);
    let stdout = ok(&[
        "compile",
        "fixtures/models/cnn_residual.onnx",
        "--batch",
        "2",
        "--strategy",
        "tflms",
        "-o",
        rewritten.to_str().unwrap(),
    ]);
    assert!(stdout.contains("proven equal to the training graph's"), "{stdout}");
    let proof = ok(&["verify", original.to_str().unwrap(), rewritten.to_str().unwrap(), "--verbose"]);
    assert!(proof.contains("proven equal"), "{proof}");
    ok(&[
        "compile",
        "fixtures/models/cnn_residual.onnx",
        "--batch",
        "2",
        "--train",
        "momentum",
        "-o",
        other.to_str().unwrap(),
    ]);
    let out = lms(&["verify", original.to_str().unwrap(), other.to_str().unwrap()]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(out.status.code(), Some(4), "not proven: {err}");
    assert!(err.contains("not proven equivalent"), "{err}");
}

#[test]
fn run_writes_a_chrome_trace_of_the_three_queues() {
    let (graph, trace) = (scratch("traced.lms"), scratch("trace.json"));
    let model = "fixtures/models/tiny_gpt.onnx";
    ok(&["compile", model, "--batch", "4", "--train", "sgd", "--strategy", "tflms", "-o", graph.to_str().unwrap()]);
    ok(&["run", graph.to_str().unwrap(), "--steps", "2", "--trace", trace.to_str().unwrap()]);
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = json["traceEvents"].as_array().expect("traceEvents");
    let lanes: Vec<(u64, &str)> = events
        .iter()
        .filter(|e| e["ph"] == "M" && e["name"] == "thread_name")
        .map(|e| (e["tid"].as_u64().unwrap(), e["args"]["name"].as_str().unwrap()))
        .collect();
    assert_eq!(lanes, [(1, "compute"), (2, "device-to-host"), (3, "host-to-device")]);
    let ops = |tid: u64| -> Vec<&str> {
        events.iter().filter(|e| e["ph"] == "X" && e["tid"] == tid).map(|e| e["cat"].as_str().unwrap()).collect()
    };
    let (compute, d2h, h2d) = (ops(1), ops(2), ops(3));
    assert!(compute.contains(&"MatMul") && !compute.contains(&"SwapOut"), "{compute:?}");
    assert!(!d2h.is_empty() && d2h.iter().all(|op| *op == "SwapOut"), "{d2h:?}");
    assert!(h2d.len() >= d2h.len(), "every swapped tensor comes back: {h2d:?}");
    assert!(h2d.iter().all(|op| *op == "SwapIn"), "{h2d:?}");
    let mut previous_end = 0.0;
    for e in events.iter().filter(|e| e["ph"] == "X" && e["tid"] == 1) {
        let (start, dur) = (e["ts"].as_f64().unwrap(), e["dur"].as_f64().unwrap());
        assert!(dur >= 0.0 && start + 1e-3 >= previous_end, "compute ops overlap on one queue: {e}");
        previous_end = start + dur;
    }
}
