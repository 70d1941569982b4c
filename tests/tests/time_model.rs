//! The time model on real models: FLOPs of a training step against an
//! independent count, predicted step time against the profile's peak and the
//! streams' busy times, and the Chrome trace `lms simulate --trace` writes.

use lms_compiler::analysis::order;
use lms_compiler::analysis::profile::DeviceProfile;
use lms_compiler::commands::simulate::SimulateReport;
use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::ir::Graph;
use lms_compiler::train::{self, Optimizer, TrainOptions};
use lms_tests::onnx_data;
use std::path::PathBuf;

fn scratch(name: &str) -> PathBuf {
    lms_tests::scratch_path("time-model", name)
}

fn ok(args: &[&str]) -> String {
    lms_tests::lms_ok(args)
}

fn momentum() -> TrainOptions {
    TrainOptions { optimizer: Optimizer::Momentum { lr: 0.01, momentum: 0.9 }, ..TrainOptions::default() }
}

/// FLOPs of the forward graph's Conv and Gemm nodes, counted here from the
/// shapes: a Conv output element is a dot product over C/group·kh·kw inputs,
/// a Gemm output element over K; 2 FLOPs per multiply-add, biases left out.
/// Also returns the FLOPs of the first Conv.
fn forward_matrix_flops(forward: &Graph) -> (f64, f64) {
    let mut total = 0.0;
    let mut first_conv = None;
    for &id in &order::schedule(forward).unwrap() {
        let node = forward.node(id);
        let shape = |slot: usize| forward.tensor(node.inputs[slot].unwrap()).ty.shape.clone();
        let out: f64 = forward.tensor(node.outputs[0]).ty.shape.iter().product::<usize>() as f64;
        let flops = match node.op.as_str() {
            "Conv" => 2.0 * out * shape(1)[1..].iter().product::<usize>() as f64,
            "Gemm" => {
                let a = shape(0);
                let trans_a = node.attrs.int("transA", 0).unwrap() != 0;
                2.0 * out * if trans_a { a[0] } else { a[1] } as f64
            }
            _ => continue,
        };
        if node.op == "Conv" && first_conv.is_none() {
            first_conv = Some(flops);
        }
        total += flops;
    }
    (total, first_conv.expect("the model has a convolution"))
}

/// ResNet-50 at batch 256, momentum, no rewrite: the step's matrix FLOPs are
/// three times the forward ones (forward, data gradient, weight gradient),
/// less the first conv's data gradient, and the step takes at least those
/// FLOPs at the profile's matrix peak.
#[test]
fn resnet50_step_flops_and_time() {
    let path = onnx_data("light/light_resnet50.onnx");
    let model = frontend::load(&path, &FrontendOptions { batch: Some(256), ..Default::default() }).unwrap();
    let (forward, first_conv) = forward_matrix_flops(&model.graph);
    let training = train::build(&model.graph, &momentum()).unwrap();
    let schedule = order::schedule(&training).unwrap();
    let h100 = DeviceProfile::load("h100-sxm").unwrap();
    let report = SimulateReport::new(&training, &schedule, &h100);
    let expected = 3.0 * forward - first_conv;
    let gemm = report.gemm_flops as f64;
    assert!((gemm / expected - 1.0).abs() < 0.05, "gemm_flops {gemm:.4e}, expected {expected:.4e} within 5%");
    assert!((gemm / (3.0 * forward) - 1.0).abs() < 0.05, "gemm_flops {gemm:.4e} vs 3x forward {forward:.4e}");
    assert!(report.flops > report.gemm_flops);
    let bound = gemm / h100.matrix_flops();
    assert!(report.predicted_step_seconds >= bound, "{} s < {bound} s", report.predicted_step_seconds);
    assert_eq!(report.predicted_step_seconds, report.compute_seconds, "no swaps: compute is the whole step");
    assert_eq!((report.stall_seconds, report.h2d_bytes, report.d2h_bytes), (0.0, 0, 0));
}

/// TFLMS under 16 GiB: the step is at least each stream's busy time and at
/// most their sum; `--json` has every time field and `--trace` writes a
/// Chrome trace with the three streams.
#[test]
fn tflms_step_lies_between_the_busiest_stream_and_the_sum() {
    let model = onnx_data("light/light_resnet50.onnx");
    let (plain, swapped, trace) = (scratch("r50.lms"), scratch("r50-tflms.lms"), scratch("r50-tflms.trace.json"));
    let common = ["compile", model.to_str().unwrap(), "--batch", "256", "--train", "momentum", "--no-verify", "-o"];
    ok(&[&common[..], &[plain.to_str().unwrap()]].concat());
    let budget = ["--strategy", "tflms", "--budget", "16GiB", "--host-budget", "64GiB"];
    ok(&[&common[..], &[swapped.to_str().unwrap()], &budget[..]].concat());
    let args = [
        "simulate",
        swapped.to_str().unwrap(),
        "--before",
        plain.to_str().unwrap(),
        "--trace",
        trace.to_str().unwrap(),
    ];
    let sim: serde_json::Value = serde_json::from_str(&ok(&[&args[..], &["--json"]].concat())).unwrap();
    let after = &sim["after"];
    let field = |r: &serde_json::Value, key: &str| r[key].as_f64().unwrap_or_else(|| panic!("no {key} in {r}"));
    for key in ["flops", "gemm_flops", "h2d_bytes", "d2h_bytes", "compute_seconds", "stall_seconds"] {
        field(after, key);
    }
    assert_eq!(after["device_profile"], "h100-sxm");
    let step = field(after, "predicted_step_seconds");
    let busy = ["compute_seconds", "h2d_seconds", "d2h_seconds"].map(|k| field(after, k));
    assert!(busy.iter().all(|&b| b > 0.0 && step >= b), "step {step} below a stream's busy time {busy:?}");
    assert!(step <= busy.iter().sum::<f64>() * (1.0 + 1e-12), "step {step} above the sum {busy:?}");
    let unrewritten = field(&sim["before"], "predicted_step_seconds");
    assert!(step > unrewritten, "swapping 13 GiB each way costs time: {step} vs {unrewritten}");
    assert!(field(after, "h2d_bytes") > 10e9 && field(after, "stall_seconds") > 0.0);

    let trace: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&trace).unwrap()).unwrap();
    let events = trace["traceEvents"].as_array().unwrap();
    let threads: Vec<&str> =
        events.iter().filter(|e| e["name"] == "thread_name").map(|e| e["args"]["name"].as_str().unwrap()).collect();
    assert_eq!(threads, ["compute", "device-to-host", "host-to-device"]);
    for tid in 1..=3 {
        let on_lane = events.iter().filter(|e| e["ph"] == "X" && e["tid"] == tid).count();
        assert!(on_lane > 100, "stream {tid} has {on_lane} events");
    }
    let end = events.iter().filter(|e| e["ph"] == "X").map(|e| field(e, "ts") + field(e, "dur")).fold(0.0, f64::max);
    assert!((end / 1e6 - step).abs() < 1e-3 * step, "trace ends at {end} µs, step {step} s");
}
