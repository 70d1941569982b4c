//! Benchmark: the TFLMS rewrite with default knobs on a synthetic training
//! graph of about 100,000 nodes (a chain of residual blocks
//! `h' = relu(h @ W_i + b_i) + h`, with SGD and softmax cross-entropy).
//!
//! Run with `cargo bench -p lms-compiler --bench tflms`. Target: under 2 s
//! in release.

use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::passes::tflms::{self, TflmsConfig};
use lms_compiler::train::{self, Loss, Optimizer, TrainOptions};
use std::time::Instant;

mod common;

/// Residual blocks: each is 4 forward ops and 15 training-graph nodes in all
/// (with its gradients and the updates of its own weights).
const BLOCKS: usize = 6_666;
const WIDTH: i64 = 16;
const BATCH: i64 = 8;
const CLASSES: i64 = 10;

fn main() {
    let model =
        frontend::import(&common::residual_chain(BLOCKS, BATCH, WIDTH, CLASSES), None, &FrontendOptions::default())
            .expect("imports");
    let options =
        TrainOptions { loss: Loss::SoftmaxCrossEntropy, optimizer: Optimizer::Sgd { lr: 0.01 }, ..Default::default() };
    let graph = train::build(&model.graph, &options).expect("training graph builds");
    let mut best = f64::INFINITY;
    for run in 0..3 {
        let start = Instant::now();
        let (rewritten, report) = tflms::rewrite(&graph, &TflmsConfig::default()).expect("rewrites");
        let seconds = start.elapsed().as_secs_f64();
        println!(
            "run {run}: {} nodes -> {} nodes, {} tensors swapped, {} swap-ins without a control op: {seconds:.3} s",
            graph.node_count(),
            rewritten.node_count(),
            report.tensors.len(),
            report.swap_ins_without_control
        );
        best = best.min(seconds);
    }
    println!("tflms rewrite, {}-node training graph: best {best:.3} s (target < 2 s)", graph.node_count());
}
