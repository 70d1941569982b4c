//! Benchmark: the static placement (every tensor's offset in its pool's arena) of a
//! synthetic training graph of about 100,000 nodes (a chain of residual blocks
//! `h' = relu(h @ W_i + b_i) + h`, with SGD and softmax cross-entropy), before and after
//! the TFLMS rewrite. `lms compile` computes it for every `.lms` it writes, and the runtime
//! again when it loads one.
//!
//! Run with `cargo bench -p lms-compiler --bench placement`.

use lms_compiler::analysis::memory::{self, Pool};
use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::ir::Graph;
use lms_compiler::passes::tflms::{self, TflmsConfig};
use lms_compiler::train::{self, TrainOptions};
use std::time::Instant;

mod common;

/// Residual blocks: each is 4 forward ops and 15 training-graph nodes in all.
const BLOCKS: usize = 6_666;

/// Best of three runs of the device placement of `g`, in seconds, and its arena against
/// its peak.
fn measure(what: &str, g: &Graph) {
    let mut best = f64::INFINITY;
    let mut arena = 0;
    for _ in 0..3 {
        let start = Instant::now();
        arena = memory::placement(g, g.schedule(), Pool::Device).arena_bytes;
        best = best.min(start.elapsed().as_secs_f64());
    }
    let peak = memory::simulate(g, g.schedule()).peak_bytes;
    println!(
        "placement, {what} ({} nodes, {} tensors): best {best:.3} s; arena {arena} B, peak {peak} B",
        g.node_count(),
        g.tensor_count()
    );
}

fn main() {
    let model = frontend::import(&common::residual_chain(BLOCKS, 8, 16, 10), None, &FrontendOptions::default())
        .expect("imports");
    let graph = train::build(&model.graph, &TrainOptions::default()).expect("training graph builds");
    measure("training graph", &graph);
    let (rewritten, _) = tflms::rewrite(&graph, &TflmsConfig::default()).expect("rewrites");
    measure("after TFLMS", &rewritten);
}
