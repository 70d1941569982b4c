//! Benchmark: the predicted timeline (per-op cost on a device profile and
//! the three-stream simulation) of a TFLMS-rewritten training graph of about
//! 100,000 nodes (the residual chain of the `tflms` benchmark, every
//! forward→backward tensor swapped, so all three streams are busy). Also
//! times the TFLMS rewrite with the time trigger, which runs the same cost
//! model over the graph.
//!
//! Run with `cargo bench -p lms-compiler --bench timeline`. Target: the
//! timeline under 1 s in release.

use lms_compiler::analysis::profile::{DeviceProfile, DEFAULT_PROFILE};
use lms_compiler::analysis::timeline;
use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::passes::tflms::{self, SwapInTrigger, TflmsConfig};
use lms_compiler::train::{self, Loss, Optimizer, TrainOptions};
use std::time::Instant;

mod common;

/// Residual blocks of the chain (15 training-graph nodes each, 6 more with
/// their swaps).
const BLOCKS: usize = 5_300;
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
    let profile = DeviceProfile::load(DEFAULT_PROFILE).expect("shipped profile");
    let (rewritten, _) = tflms::rewrite(&graph, &TflmsConfig::default()).expect("rewrites");
    let (mut best, mut best_rewrite) = (f64::INFINITY, f64::INFINITY);
    for run in 0..3 {
        let start = Instant::now();
        let t = timeline::simulate(&rewritten, rewritten.schedule(), &profile);
        let seconds = start.elapsed().as_secs_f64();
        println!(
            "run {run}: timeline of {} nodes ({} events): step {:.3} ms, stall {:.3} ms: {seconds:.3} s",
            rewritten.node_count(),
            t.events.len(),
            t.step_seconds * 1e3,
            t.stall_seconds * 1e3
        );
        best = best.min(seconds);
        let cfg =
            TflmsConfig { trigger: SwapInTrigger::Time, profile: profile.clone().into(), ..TflmsConfig::default() };
        let start = Instant::now();
        let (timed, report) = tflms::rewrite(&graph, &cfg).expect("rewrites");
        let seconds = start.elapsed().as_secs_f64();
        println!(
            "run {run}: tflms --trigger time on {} nodes -> {} nodes, {} tensors swapped: {seconds:.3} s",
            graph.node_count(),
            timed.node_count(),
            report.tensors.len()
        );
        best_rewrite = best_rewrite.min(seconds);
    }
    println!("timeline, {}-node graph: best {best:.3} s (target < 1 s)", rewritten.node_count());
    println!("tflms --trigger time, {}-node training graph: best {best_rewrite:.3} s", graph.node_count());
}
