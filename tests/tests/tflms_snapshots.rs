//! TFLMS rewrites of the small fixture models (training graphs with SGD and
//! softmax cross-entropy at batch 2), as snapshots of their text form: one
//! per fixture and knob that changes the output. Also: the default rewrite
//! lowers the simulated device peak, and serializes deterministically.

use lms_compiler::analysis::{memory, order};
use lms_compiler::emit::{serialize, text};
use lms_compiler::ir::Graph;
use lms_compiler::passes::tflms::{self, CtrldStrategy, SwapInTrigger, TflmsConfig};
use lms_proto::Message;
use lms_tests::training::{sgd_graph, tflms_knobs};

/// The training graph of `fixtures/models/<name>.onnx` at batch 2.
fn training_graph(name: &str) -> Graph {
    sgd_graph(&lms_tests::fixture(&format!("models/{name}.onnx")), 2)
}

/// The knob settings snapshotted, by name.
fn knobs() -> Vec<(&'static str, TflmsConfig)> {
    let mut knobs = tflms_knobs();
    knobs.extend([
        ("n_tensors_2", TflmsConfig { n_tensors: Some(2), ..TflmsConfig::default() }),
        ("lb_3", TflmsConfig { lb: 3, ..TflmsConfig::default() }),
        (
            "direct_order_lb_3",
            TflmsConfig { lb: 3, ctrld_strategy: CtrldStrategy::DirectOrder, ..TflmsConfig::default() },
        ),
        ("excl_types", TflmsConfig { excl_types: vec!["Relu".into(), "Add".into()], ..TflmsConfig::default() }),
        ("trigger_time", TflmsConfig { trigger: SwapInTrigger::Time, ..TflmsConfig::default() }),
    ]);
    knobs
}

fn snapshot_fixture(fixture: &str) {
    let g = training_graph(fixture);
    for (knob, cfg) in knobs() {
        let (rewritten, _) = tflms::rewrite(&g, &cfg).unwrap_or_else(|e| panic!("{fixture}, {knob}: {e}"));
        let text = text::to_text(&rewritten).expect("rewritten graph is acyclic");
        insta::assert_snapshot!(format!("tflms_{knob}@{fixture}"), text);
    }
}

#[test]
fn snapshots_mlp() {
    snapshot_fixture("mlp");
}

#[test]
fn snapshots_cnn_residual() {
    snapshot_fixture("cnn_residual");
}

#[test]
fn snapshots_tiny_gpt() {
    snapshot_fixture("tiny_gpt");
}

/// Simulated memory of a graph over its default schedule.
fn profile(g: &Graph) -> memory::MemoryProfile {
    memory::simulate(g, &order::schedule(g).expect("acyclic"))
}

#[test]
fn default_rewrite_lowers_the_device_peak() {
    for fixture in ["cnn_residual", "tiny_gpt"] {
        let g = training_graph(fixture);
        let (rewritten, report) = tflms::rewrite(&g, &TflmsConfig::default()).expect("rewrites");
        let (before, after) = (profile(&g), profile(&rewritten));
        println!(
            "{fixture}: {} tensors swapped ({} bytes), {} swap-ins without a control op; \
             device peak {} -> {} bytes, host peak {} bytes",
            report.tensors.len(),
            report.swapped_bytes(),
            report.swap_ins_without_control,
            before.peak_bytes,
            after.peak_bytes,
            after.host_peak_bytes
        );
        assert!(
            after.peak_bytes < before.peak_bytes,
            "{fixture}: device peak {} is not below {}",
            after.peak_bytes,
            before.peak_bytes
        );
    }
}

#[test]
fn rewrite_serializes_deterministically() {
    let g = training_graph("cnn_residual");
    let bytes = || {
        let (rewritten, _) = tflms::rewrite(&g, &TflmsConfig::default()).expect("rewrites");
        serialize::to_proto(&rewritten, &[]).expect("serializes").encode_to_vec()
    };
    assert_eq!(bytes(), bytes());
}
