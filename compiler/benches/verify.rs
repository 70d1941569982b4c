//! Benchmark: proving TFLMS rewrites equal to their training graphs with
//! `egraph::verify`:
//! 1. ResNet-50 (`fixtures/data/onnx/light/light_resnet50.onnx`, batch 2,
//!    SGD and softmax cross-entropy, TFLMS defaults). Target: under 5 s in
//!    release.
//! 2. The synthetic training graph of about 100,000 nodes the other benches
//!    share (a chain of residual blocks), to show how verification scales.
//!
//! Run with `cargo bench -p lms-compiler --bench verify`.

use lms_compiler::egraph::{self, Limits};
use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::ir::Graph;
use lms_compiler::passes::tflms::{self, TflmsConfig};
use lms_compiler::train::{self, Loss, Optimizer, TrainOptions};
use std::path::Path;
use std::time::Instant;

mod common;

/// Best of three verifications of the default TFLMS rewrite of `original`.
fn bench(label: &str, original: &Graph, target: Option<f64>) {
    let (rewritten, swaps) = tflms::rewrite(original, &TflmsConfig::default()).expect("rewrites");
    let mut best = f64::INFINITY;
    for run in 0..3 {
        let start = Instant::now();
        let report = egraph::verify(original, &rewritten, &Limits::default()).expect("the rewrite is proven");
        let seconds = start.elapsed().as_secs_f64();
        println!(
            "run {run}: {} + {} graph nodes, {} tensors swapped, {} items proven; e-graph {} nodes, {} classes, {} after {} iterations: {seconds:.3} s",
            original.node_count(),
            rewritten.node_count(),
            swaps.tensors.len(),
            report.proven(),
            report.nodes,
            report.classes,
            report.stop,
            report.iterations
        );
        best = best.min(seconds);
    }
    let target = target.map_or_else(String::new, |t| format!(" (target < {t} s)"));
    println!("verify {label}: best {best:.3} s{target}");
}

fn training_options() -> TrainOptions {
    TrainOptions { loss: Loss::SoftmaxCrossEntropy, optimizer: Optimizer::Sgd { lr: 0.01 }, ..Default::default() }
}

fn main() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/data/onnx/light/light_resnet50.onnx");
    if path.exists() {
        let model =
            frontend::load(&path, &FrontendOptions { batch: Some(2), ..Default::default() }).expect("ResNet-50 loads");
        let original = train::build(&model.graph, &training_options()).expect("training graph builds");
        bench("TFLMS-rewritten ResNet-50 (batch 2)", &original, Some(5.0));
    } else {
        println!("{} is missing: run `bash fixtures/fetch-onnx-testdata.sh` first", path.display());
    }
    let model = frontend::import(&common::residual_chain(6_666, 8, 16, 10), None, &FrontendOptions::default())
        .expect("imports");
    let original = train::build(&model.graph, &training_options()).expect("training graph builds");
    bench("TFLMS-rewritten synthetic residual chain", &original, None);
}
