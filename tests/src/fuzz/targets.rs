//! The two fuzz targets and their seeds: ONNX import (decode → import → shape inference →
//! inspect), and `.lms` load (decode → validate → rebuild → simulate → verify against the
//! graph's original → one training step on the CPU under a small budget). Both also check
//! that prost's decoding holds no more than the wire walk of `lms_proto::bounded` counted.

use super::alloc;
use super::mutate::{mutate_lms, mutate_onnx};
use super::runner::Target;
use crate::{fixture, list, onnx_data};
use lms_compiler::analysis::profile::{DeviceProfile, DEFAULT_PROFILE};
use lms_compiler::commands::inspect::InspectReport;
use lms_compiler::commands::simulate::SimulateReport;
use lms_compiler::egraph::{self, Limits};
use lms_compiler::emit::serialize;
use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::ir::Graph;
use lms_compiler::passes::tflms::{self, TflmsConfig};
use lms_compiler::train::{self, TrainOptions};
use lms_proto::bounded::{self, Bounded};
use lms_proto::contract::Program;
use lms_proto::lms::attribute::Value;
use lms_proto::lms::Attribute;
use lms_proto::onnx::ModelProto;
use lms_proto::Message;
use lms_runtime::{CpuBackend, RunOptions, Session};
use std::collections::HashMap;
use std::path::PathBuf;

/// Seed models above this size are left out: small seeds keep executions fast.
const MAX_SEED_BYTES: u64 = 128 << 10;
/// Initial values above this size are dropped from `.lms` seeds (their variables start
/// from zeros), so mutations land on the graph, not on weights.
const MAX_SEED_DATA_BYTES: usize = 64;

/// The ONNX models seeding the import target: the committed fixture models, the light
/// model-zoo graphs and the PyTorch operator cases.
fn onnx_seed_paths() -> Vec<PathBuf> {
    let onnx = |p: &std::path::Path| p.extension().is_some_and(|e| e == "onnx");
    let mut paths = list(&fixture("models"), onnx);
    paths.extend(list(&onnx_data("light"), onnx));
    for case in list(&onnx_data("pytorch-operator"), |p| p.is_dir()) {
        paths.push(case.join("model.onnx"));
    }
    paths.retain(|p| std::fs::metadata(p).is_ok_and(|m| m.len() <= MAX_SEED_BYTES));
    paths
}

/// Checks that prost, decoding `bytes` as `M`, holds at most what the wire walk of
/// [`bounded`] counts for them, when the walk lets them be decoded under `expansion`.
fn check_decoded_bound<M: Bounded>(bytes: &[u8], expansion: u64) {
    let Ok(bound) = bounded::decoded_bytes(bytes, M::layout(), expansion) else {
        return;
    };
    let (decoded, held) = alloc::held(|| M::decode(bytes));
    drop(decoded);
    assert!(held as u64 <= bound, "decoding {} held {held} bytes, over the {bound} bytes counted", M::layout().name);
}

/// Imports bytes as a model and infers its shapes; true when the model imports.
fn import(bytes: &[u8]) -> bool {
    check_decoded_bound::<ModelProto>(bytes, bounded::ONNX_EXPANSION);
    let Ok(proto) = frontend::decode_model(bytes) else {
        return false;
    };
    let Ok(model) = frontend::import(&proto, None, &FrontendOptions { batch: Some(2), ..Default::default() }) else {
        return false;
    };
    let _ = InspectReport::new(&model);
    true
}

/// The ONNX import target.
pub fn onnx_import() -> Target {
    let seeds = onnx_seed_paths().iter().map(|p| std::fs::read(p).unwrap_or_else(|e| panic!("{e}"))).collect();
    Target { name: "onnx", seeds, mutate: mutate_onnx, run: Box::new(import) }
}

/// Training graphs of the fixture models at batch 2 (the default loss and SGD), keyed by graph name, and the
/// serialized seeds: each graph and its TFLMS rewrite.
fn lms_seeds() -> (HashMap<String, Graph>, Vec<Vec<u8>>) {
    let options = TrainOptions::default();
    let (mut originals, mut seeds) = (HashMap::new(), Vec::new());
    for name in ["mlp", "cnn_residual", "tiny_gpt"] {
        let path = fixture(&format!("models/{name}.onnx"));
        let model = frontend::load(&path, &FrontendOptions { batch: Some(2), ..Default::default() })
            .unwrap_or_else(|e| panic!("{e}"));
        let graph = train::build(&model.graph, &options).unwrap_or_else(|e| panic!("{e}"));
        let (rewritten, _) = tflms::rewrite(&graph, &TflmsConfig::default()).unwrap_or_else(|e| panic!("{e}"));
        for g in [&graph, &rewritten] {
            let mut seed = serialize::to_proto(g, &[]).unwrap_or_else(|e| panic!("{e}"));
            for t in seed.tensors.iter_mut().filter(|t| t.data.len() > MAX_SEED_DATA_BYTES) {
                t.data.clear();
                // The variable starts from zeros instead, so the seed still runs.
                let node = &mut seed.nodes[t.producer as usize];
                node.attributes.retain(|a| a.name != "init");
                node.attributes.push(Attribute { name: "init".into(), value: Some(Value::String("zeros".into())) });
            }
            seeds.push(seed.encode_to_vec());
        }
        originals.insert(graph.name.clone(), graph);
    }
    (originals, seeds)
}

/// Limits of the e-graph per fuzz input: far above what proving a fixture's rewrite takes
/// (one iteration per e-node a fixture's two graphs start with).
fn fuzz_limits() -> Limits {
    Limits { nodes_per_term: 4, iterations_per_term: 1 }
}

/// Device and host budget of the one step an accepted program runs.
const RUN_BUDGET: u64 = 64 << 20;

/// The `.lms` target: contract validation, then what `lms simulate` and `lms verify` do,
/// then what `lms run` does: one step on the CPU under [`RUN_BUDGET`].
pub fn lms_load() -> Target {
    let (originals, seeds) = lms_seeds();
    let device = DeviceProfile::load(DEFAULT_PROFILE).unwrap_or_else(|e| panic!("{e}"));
    let run = move |bytes: &[u8]| {
        check_decoded_bound::<lms_proto::lms::Graph>(bytes, bounded::LMS_EXPANSION);
        let Ok(program) = Program::decode(bytes, "fuzz.lms") else {
            return false;
        };
        if let Ok((graph, schedule)) = serialize::from_program(&program) {
            let _ = SimulateReport::new(&graph, &schedule, &device);
            if let Some(original) = originals.get(&graph.name) {
                let _ = egraph::check(original, &graph, &fuzz_limits());
            }
        }
        let options = RunOptions { device_memory: RUN_BUDGET, host_memory: RUN_BUDGET, seed: 1 };
        if let Ok(mut session) = Session::new(program, CpuBackend::new(), options) {
            let _ = session.step();
        }
        true
    };
    Target { name: "lms", seeds, mutate: mutate_lms, run: Box::new(run) }
}
