//! `lms run` on a user's data: `--data FILE.npz --epochs N`, `--save-onnx`
//! (checked against onnxruntime), `--save-state` and `--resume`, and clear
//! errors for data that does not fit the graph.

use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::npz;
use lms_runtime::{CpuBackend, HostTensor, Program, RunOptions, Session};
use lms_tests::training::serialized;
use lms_tests::{fixture, lms};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// `name` in the scratch folder of the train-and-export test.
fn scratch(name: &str) -> PathBuf {
    lms_tests::scratch_path("cli-data", name)
}

/// `name` in the scratch folder of the mismatched-data test: its own, since both tests
/// write the same data files and run at the same time.
fn misfit_scratch(name: &str) -> PathBuf {
    lms_tests::scratch_path("cli-data-misfit", name)
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Runs `lms`; its stdout, or a panic with its stderr.
fn ok(args: &[&str]) -> String {
    lms_tests::lms_ok(args)
}

/// Runs `lms`, which must fail with exit code 2; its one-line error.
fn fails(args: &[&str]) -> String {
    let out = lms(args);
    assert_eq!(out.status.code(), Some(2), "lms {args:?} should fail: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8(out.stderr).unwrap().trim().to_string()
}

/// Runs a Python script with the fixtures' virtualenv (numpy, onnx, onnxruntime).
fn python(script: &str, args: &[&str]) {
    let py = fixture(".venv/bin/python");
    assert!(py.exists(), "{} is missing: run `bash fixtures/fetch-onnx-testdata.sh` first", py.display());
    let out = Command::new(py).arg("-c").arg(script).args(args).output().expect("run python");
    assert!(out.status.success(), "python: {}", String::from_utf8_lossy(&out.stderr));
}

/// Writes train.npz (10 samples), eval.npz (4) and mismatched.npz (f64 images) into the scratch folder.
const MAKE_DATA: &str = r#"
import sys, numpy as np
out = sys.argv[1]
rng = np.random.default_rng(17)
x = rng.standard_normal((10, 3, 32, 32)).astype(np.float32)
np.savez_compressed(f"{out}/train.npz", x=x, labels=rng.integers(0, 10, 10).astype(np.int64))
np.savez(f"{out}/eval.npz", x=rng.standard_normal((4, 3, 32, 32)).astype(np.float32))
np.savez(f"{out}/mismatched.npz", x=x.astype(np.float64), labels=np.zeros(10, np.int64))
"#;

/// Checks the saved model with onnx.checker and runs it and the original in onnxruntime on eval.npz's x;
/// writes ort.npz with `trained` and `original` outputs.
const RUN_ORT: &str = r#"
import sys, numpy as np, onnx, onnxruntime as ort
trained, original, data, out = sys.argv[1:5]
onnx.checker.check_model(onnx.load(trained), full_check=True)
x = np.load(data)["x"]
run = lambda path: ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
np.savez(out, trained=run(trained), original=run(original))
"#;

/// lms's forward pass of the ONNX model at `path` on `x`.
fn lms_forward(path: &Path, x: &HostTensor) -> Vec<f32> {
    let model = frontend::load(path, &FrontendOptions { batch: Some(x.shape[0]), ..Default::default() }).unwrap();
    let program = Program::new(serialized(&model.graph), "forward").unwrap();
    let values = BTreeMap::from([("x".to_string(), x.clone())]);
    let mut session = Session::with_values(program, CpuBackend::new(), RunOptions::default(), &values).unwrap();
    session.step().unwrap().outputs[0].as_f32("logits").unwrap().to_vec()
}

fn array(path: &Path, name: &str) -> HostTensor {
    npz::read(path, 1 << 30, |_, _, _| Ok(()))
        .unwrap()
        .into_iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no {name}"))
        .1
}

#[test]
fn train_the_cnn_on_npz_data_and_onnxruntime_runs_the_saved_model() {
    let dir = scratch("");
    python(MAKE_DATA, &[s(&dir)]);
    let (graph, trained, state) = (scratch("cnn.lms"), scratch("trained.onnx"), scratch("state.npz"));
    let model = fixture("models/cnn_residual.onnx");
    ok(&["compile", s(&model), "--batch", "4", "--train", "adam", "--lr", "0.01", "-o", s(&graph)]);
    let run = ok(&[
        "run",
        s(&graph),
        "--data",
        s(&scratch("train.npz")),
        "--epochs",
        "2",
        "--save-onnx",
        s(&trained),
        "--model",
        s(&model),
        "--save-state",
        s(&state),
        "--json",
    ]);
    let report: serde_json::Value = serde_json::from_str(&run).unwrap();
    assert_eq!(report["losses"].as_array().unwrap().len(), 4, "2 epochs of 2 whole batches: {report}");
    assert_eq!(report["batches_per_epoch"], 2);
    assert_eq!(report["samples_left_out"], 2);
    // 14 trained weights and 8 BatchNorm running statistics.
    assert_eq!(report["weights_saved"], 22);

    let ort = scratch("ort.npz");
    python(RUN_ORT, &[s(&trained), s(&model), s(&scratch("eval.npz")), s(&ort)]);
    let x = array(&scratch("eval.npz"), "x");
    let ours = lms_forward(&trained, &x);
    let theirs = array(&ort, "trained");
    let theirs = theirs.as_f32("trained").unwrap();
    assert_eq!(ours.len(), theirs.len());
    // Relative to the logits' scale: a logit near 0 is a difference of larger sums.
    let scale = theirs.iter().fold(0f32, |m, v| m.max(v.abs()));
    let worst = ours.iter().zip(theirs).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    println!("lms vs onnxruntime: largest difference {worst:e}, largest |logit| {scale}");
    assert!(worst <= 1e-5 * scale, "lms and onnxruntime differ by {worst:e} at logits of scale {scale}");
    let before = array(&ort, "original");
    let changed = before.as_f32("original").unwrap().iter().zip(theirs).any(|(a, b)| (a - b).abs() > 1e-3);
    assert!(changed, "the saved model computes what the untrained one does");

    // The state resumes: 1 more epoch continues from step 4, and the state is exactly this graph's
    // (another graph's state is refused at its first array, before its values are read).
    let resumed = ok(&["run", s(&graph), "--data", s(&scratch("train.npz")), "--resume", s(&state), "--json"]);
    let resumed: serde_json::Value = serde_json::from_str(&resumed).unwrap();
    assert_eq!(resumed["resumed_after_steps"], 4);
    // Its step lines go on from step 5.
    let text = ok(&["run", s(&graph), "--data", s(&scratch("train.npz")), "--resume", s(&state)]);
    let first = text.lines().next().unwrap_or_default();
    assert!(first.starts_with("step    5  loss "), "{text}");
    let mlp = scratch("mlp.lms");
    ok(&["compile", "fixtures/models/mlp.onnx", "--batch", "4", "-o", s(&mlp)]);
    let err = fails(&["run", s(&mlp), "--resume", s(&state)]);
    assert!(err.contains("state.npz: array 'stem.weight' is not a variable of"), "{err}");
}

#[test]
fn data_that_does_not_fit_the_graph_is_named() {
    let dir = misfit_scratch("");
    python(MAKE_DATA, &[s(&dir)]);
    let graph = misfit_scratch("cnn_sgd.lms");
    ok(&["compile", "fixtures/models/cnn_residual.onnx", "--batch", "4", "-o", s(&graph)]);
    let err = fails(&["run", s(&graph), "--data", s(&misfit_scratch("mismatched.npz"))]);
    assert!(
        err.ends_with(
            "mismatched.npz: array 'x' is f64 [10, 3, 32, 32], the graph's input 'x' wants f32 [samples,3,32,32]"
        ),
        "{err}"
    );
    let err = fails(&["run", s(&graph), "--data", s(&misfit_scratch("eval.npz"))]);
    assert!(err.contains("eval.npz: no array 'labels' (the graph's inputs are x, labels;"), "{err}");
}
