//! Benchmark: `lms inspect` (decode, import with shape inference, and the
//! inspect analyses) on a synthetic 100,000-node ONNX graph.
//!
//! Run with `cargo bench -p lms-compiler --bench inspect`. Target: under 1 s
//! in release.

use lms_compiler::commands::inspect::InspectReport;
use lms_compiler::frontend::{self, FrontendOptions};
use lms_proto::Message;
use std::time::Instant;

mod common;

/// Nodes in the synthetic graph's residual blocks (MatMul, Add, Relu, Add each), plus the head.
const NODES: usize = 100_000;
const WIDTH: i64 = 16;

fn main() {
    let bytes = common::residual_chain(NODES / 4, 32, WIDTH, 10).encode_to_vec();
    let mut best = f64::INFINITY;
    for run in 0..3 {
        let start = Instant::now();
        let proto = frontend::decode_model(&bytes).expect("decodes");
        let decoded = start.elapsed();
        let model = frontend::import(&proto, None, &FrontendOptions::default()).expect("imports");
        let imported = start.elapsed();
        let report = InspectReport::new(&model).expect("analyses");
        let total = start.elapsed();
        assert_eq!(report.nodes, NODES + 1);
        println!(
            "run {run}: {NODES} nodes, {:.1} MiB: decode {:.3} s, import {:.3} s, inspect {:.3} s, total {:.3} s",
            bytes.len() as f64 / (1 << 20) as f64,
            decoded.as_secs_f64(),
            (imported - decoded).as_secs_f64(),
            (total - imported).as_secs_f64(),
            total.as_secs_f64()
        );
        best = best.min(total.as_secs_f64());
    }
    println!("inspect, 100,000-node graph: best {best:.3} s (target < 1 s)");
}
