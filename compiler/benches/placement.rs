//! Benchmark: the static placement (every tensor's offset in its pool's arena). `lms
//! compile` computes it for every `.lms` it writes, and the runtime again when it loads one.
//!
//! - A synthetic training graph of about 100,000 nodes (a chain of residual blocks
//!   `h' = relu(h @ W_i + b_i) + h`, with SGD and softmax cross-entropy), before and after
//!   the TFLMS rewrite: the time at scale.
//! - The `.lms` files named in `LMS_PLACEMENT_PLANS` (paths separated by spaces; the plans
//!   of `compiler/benches/results/placement.md`): their device pools' live peak, lower
//!   bound (aligned), arena, and the arena of each strategy.
//!
//! Run with `cargo bench -p lms-compiler --bench placement`.

use lms_compiler::analysis::memory::{self, Pool};
use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::ir::Graph;
use lms_compiler::passes::tflms::{self, TflmsConfig};
use lms_compiler::train::{self, TrainOptions};
use lms_proto::contract::placement::{self, Lifetime};
use lms_proto::contract::Program;
use lms_proto::Message;
use std::time::Instant;

mod common;

/// Residual blocks: each is 4 forward ops and 15 training-graph nodes in all.
const BLOCKS: usize = 6_666;

/// Best of three runs of `f`, in seconds, and its last result.
fn best_of_three<T>(mut f: impl FnMut() -> T) -> (f64, T) {
    let mut best = f64::INFINITY;
    let mut result = None;
    for _ in 0..3 {
        let start = Instant::now();
        result = Some(f());
        best = best.min(start.elapsed().as_secs_f64());
    }
    (best, result.expect("three runs"))
}

/// The device placement of `g`: time, arena against its peak.
fn measure(what: &str, g: &Graph) {
    let (seconds, arena) = best_of_three(|| memory::placement(g, g.schedule(), Pool::Device).arena_bytes);
    let peak = memory::simulate(g, g.schedule()).peak_bytes;
    println!(
        "placement, {what} ({} nodes, {} tensors): best {seconds:.3} s; arena {arena} B, peak {peak} B ({:.4}x)",
        g.node_count(),
        g.tensor_count(),
        arena as f64 / peak as f64
    );
}

/// Bytes live at the busiest step, unaligned (the simulator's live peak).
fn live_peak(lifetimes: &[Option<Lifetime>]) -> u64 {
    let steps = lifetimes.iter().flatten().map(|l| l.last + 1).max().unwrap_or(0);
    let mut delta = vec![0i128; steps + 1];
    for l in lifetimes.iter().flatten() {
        delta[l.first] += l.bytes as i128;
        delta[l.last + 1] -= l.bytes as i128;
    }
    let mut live = 0;
    delta
        .iter()
        .map(|d| {
            live += d;
            live as u64
        })
        .max()
        .unwrap_or(0)
}

/// The device placement of the `.lms` file at `path` (its recorded arenas ignored).
fn measure_plan(path: &str) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let mut graph = lms_proto::lms::Graph::decode(&bytes[..]).unwrap_or_else(|e| panic!("{path}: {e}"));
    if let Some(plan) = graph.plan.as_mut() {
        (plan.arena_device_bytes, plan.arena_host_bytes) = (None, None);
    }
    let program = Program::new(graph, path).unwrap_or_else(|e| panic!("{e}"));
    let lifetimes = placement::lifetimes(&program, Pool::Device);
    let (seconds, p) = best_of_three(|| placement::place(&lifetimes));
    let (peak, bound) = (live_peak(&lifetimes), placement::lower_bound(&lifetimes));
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    println!(
        "{path}: {} device tensors; live peak {:.2} GiB, lower bound {:.2} GiB, arena {:.2} GiB ({:.4}x the live peak), placement {seconds:.3} s",
        lifetimes.iter().flatten().count(),
        gib(peak),
        gib(bound),
        gib(p.arena_bytes),
        p.arena_bytes as f64 / peak.max(1) as f64
    );
    for strategy in placement::strategies() {
        let arena = placement::place_with(strategy, &lifetimes).map(|q| q.arena_bytes);
        println!("    {strategy:?}: {}", arena.map_or("gave up".into(), |a| format!("{:.4}x", a as f64 / peak as f64)));
    }
    let host = placement::lifetimes(&program, Pool::Host);
    let (seconds, p) = best_of_three(|| placement::place(&host));
    let peak = live_peak(&host);
    println!(
        "    host: {} tensors; live peak {:.2} GiB, arena {:.2} GiB ({:.4}x), placement {seconds:.3} s",
        host.iter().flatten().count(),
        gib(peak),
        gib(p.arena_bytes),
        p.arena_bytes as f64 / peak.max(1) as f64
    );
}

fn main() {
    for path in std::env::var("LMS_PLACEMENT_PLANS").unwrap_or_default().split_whitespace() {
        measure_plan(path);
    }
    let model = frontend::import(&common::residual_chain(BLOCKS, 8, 16, 10), None, &FrontendOptions::default())
        .expect("imports");
    let graph = train::build(&model.graph, &TrainOptions::default()).expect("training graph builds");
    measure("training graph", &graph);
    let (rewritten, _) = tflms::rewrite(&graph, &TflmsConfig::default()).expect("rewrites");
    measure("after TFLMS", &rewritten);
}
