//! Benchmark: the budget planner (`--strategy auto`): plan, patch, apply and
//! simulate (`planner::fit`) on a synthetic training graph of about 100,000
//! nodes (the residual chain of the `tflms` bench) halfway between the
//! smallest peak the planner reaches and its unrewritten peak, and on ResNet-50 light at batch 256 with momentum under 16 GiB of
//! device and 64 GiB of host memory, both on the `h100-sxm` time model.
//!
//! Run with `cargo bench -p lms-compiler --bench planner`. Targets: under
//! 5 s for the 100,000-node graph and under 2 s for ResNet-50, in release.
//! ResNet-50 is skipped when the fetched model-zoo data is absent.

use lms_compiler::analysis::memory;
use lms_compiler::analysis::profile::{DeviceProfile, DEFAULT_PROFILE};
use lms_compiler::budget::Budget;
use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::ir::Graph;
use lms_compiler::passes::planner::{self, PlanOptions, Speeds};
use lms_compiler::train::{self, Loss, Optimizer, TrainOptions};
use std::path::Path;
use std::time::Instant;

mod common;

const BLOCKS: usize = 6_666;
const WIDTH: i64 = 16;
const BATCH: i64 = 256;
const CLASSES: i64 = 10;

/// Best of three `planner::fit` runs of `g` under the budgets.
fn bench(what: &str, g: &Graph, device: &DeviceProfile, device_budget: u64, host_budget: u64, target: f64) {
    let options = PlanOptions::new(Budget { device: device_budget, host: host_budget });
    let mut best = f64::INFINITY;
    for run in 0..3 {
        let start = Instant::now();
        let speeds = Speeds::from_profile(g, device);
        let fitted = planner::fit(g, &speeds, options).expect("a plan fits");
        let seconds = start.elapsed().as_secs_f64();
        let recomputes = fitted.reports.iter().filter(|r| r.kind == planner::RECOMPUTE).count();
        println!(
            "run {run}: {} nodes, peak {} -> {} (arena {}, budget {device_budget}), {} swapped, {recomputes} recomputed: {seconds:.3} s",
            g.node_count(),
            memory::simulate(g, g.schedule()).peak_bytes,
            fitted.footprint.device.peak_bytes,
            fitted.footprint.device.arena_bytes,
            fitted.reports.len() - recomputes,
        );
        best = best.min(seconds);
    }
    println!("planner, {what}: best {best:.3} s (target < {target} s)");
}

fn main() {
    let device = DeviceProfile::load(DEFAULT_PROFILE).expect("shipped profile");
    let model =
        frontend::import(&common::residual_chain(BLOCKS, BATCH, WIDTH, CLASSES), None, &FrontendOptions::default())
            .expect("imports");
    let sgd =
        TrainOptions { loss: Loss::SoftmaxCrossEntropy, optimizer: Optimizer::Sgd { lr: 0.01 }, ..Default::default() };
    let chain = train::build(&model.graph, &sgd).expect("training graph builds");
    // Halfway between the smallest peak the planner reaches and the unrewritten peak.
    let peak = memory::simulate(&chain, chain.schedule()).peak_bytes;
    let speeds = Speeds::from_profile(&chain, &device);
    let floor = PlanOptions::new(Budget { device: 0, host: 64 << 30 });
    let smallest = planner::plan(&chain, chain.schedule(), &speeds, floor).device_peak;
    let budget = smallest + (peak - smallest) / 2;
    bench(&format!("{}-node training graph", chain.node_count()), &chain, &device, budget, 64 << 30, 5.0);

    let resnet = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/data/onnx/light/light_resnet50.onnx");
    if !resnet.exists() {
        println!("planner, ResNet-50: skipped ({} is absent; run fixtures/fetch-onnx-testdata.sh)", resnet.display());
        return;
    }
    let model = frontend::load(&resnet, &FrontendOptions { batch: Some(256), ..Default::default() }).expect("loads");
    let momentum = TrainOptions {
        loss: Loss::SoftmaxCrossEntropy,
        optimizer: Optimizer::Momentum { lr: 0.01, momentum: 0.9 },
        ..Default::default()
    };
    let g = train::build(&model.graph, &momentum).expect("training graph builds");
    bench("ResNet-50 batch 256, momentum, 16 GiB", &g, &device, 16 << 30, 64 << 30, 2.0);
}
