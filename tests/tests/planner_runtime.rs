//! The budget planner on the CPU runtime: under a budget the training graph
//! cannot meet, the planned graph (swaps and recomputes, or recomputes only
//! with no host memory) trains three steps bit for bit like the original,
//! its runtime peaks equal the simulated ones, it fits the budget where the
//! original does not, and the verifier proves it computes the same outputs
//! and updates. The same holds end to end for `lms compile --strategy auto`,
//! whose rewrite of the small CNN is also pinned as a snapshot.

use lms_compiler::analysis::footprint::Footprint;
use lms_compiler::analysis::memory;
use lms_compiler::budget::Budget;
use lms_compiler::emit::serialize;
use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::ir::{Graph, SWAP_IN_OP};
use lms_compiler::passes::planner::{self, Facts, Kind, PlanOptions, Speeds};
use lms_compiler::passes::split::{batch_patch, BatchSplit};
use lms_compiler::pipeline;
use lms_compiler::train::{self, Loss, Optimizer, TrainOptions};
use lms_compiler::Error;
use lms_runtime::RuntimeError;
use lms_tests::training::{arenas, budgeted_session, train_bits};
use lms_tests::{fixture, lms_ok, scratch_path};
use std::path::Path;

fn training_graph(path: &Path, batch: usize) -> Graph {
    let model = frontend::load(path, &FrontendOptions { batch: Some(batch), ..Default::default() }).unwrap();
    let options = TrainOptions {
        loss: Loss::SoftmaxCrossEntropy,
        optimizer: Optimizer::Momentum { lr: 0.05, momentum: 0.9 },
        ..Default::default()
    };
    train::build(&model.graph, &options).unwrap()
}

/// Op times from the bytes each node touches, at CPU-like rates.
fn speeds(g: &Graph) -> Speeds {
    let mut node_seconds = vec![0.0; g.node_bound()];
    for id in g.node_ids() {
        let node = g.node(id);
        let bytes: u64 = node.inputs.iter().flatten().chain(&node.outputs).map(|&t| g.tensor(t).ty.bytes()).sum();
        node_seconds[id.index()] = bytes as f64 / 10e9;
    }
    Speeds { node_seconds, d2h_bytes_per_second: 5e9, h2d_bytes_per_second: 5e9 }
}

/// The smallest device peak the planner reaches on `g` with `host_budget`.
fn smallest_peak(g: &Graph, host_budget: u64) -> u64 {
    let options = PlanOptions::new(Budget { device: 0, host: host_budget });
    planner::plan(g, g.schedule(), &speeds(g), options).device_peak
}

#[test]
fn planned_graphs_train_bit_for_bit_and_fit_where_the_original_does_not() {
    for (name, path) in
        [("cnn_residual", fixture("models/cnn_residual.onnx")), ("tiny_gpt", fixture("models/tiny_gpt.onnx"))]
    {
        let original = training_graph(&path, 4);
        let before = memory::simulate(&original, original.schedule());
        let (losses_a, vars_a, _, _) = train_bits(&original);
        for host_budget in [u64::MAX, 0] {
            // Halfway between the smallest peak the planner reaches and the original's.
            let smallest = smallest_peak(&original, host_budget);
            let budget = smallest + (before.peak_bytes - smallest) / 2;
            let options = PlanOptions::new(Budget { device: budget, host: host_budget });
            let fitted = planner::fit(&original, &speeds(&original), options).unwrap();
            let recomputes = fitted.plan.decisions.iter().filter(|d| matches!(d.kind, Kind::Recompute { .. })).count();
            let swaps = fitted.plan.decisions.len() - recomputes;
            println!(
                "{name} host budget {host_budget}: {recomputes} recomputed, {swaps} swapped, peak {} -> {} (budget {budget})",
                before.peak_bytes, fitted.footprint.device.peak_bytes
            );
            if host_budget == 0 {
                assert!(recomputes > 0, "{name}: no recompute");
                assert_eq!(swaps, 0, "{name}: swaps without host memory");
            }
            let g = &fitted.graph;
            let (losses_b, vars_b, peak_b, host_b) = train_bits(g);
            assert_eq!(losses_a, losses_b, "{name}: losses differ after planning");
            assert_eq!(vars_a, vars_b, "{name}: parameters differ after planning");
            let sim = memory::simulate(g, g.schedule());
            assert_eq!((peak_b, host_b), (sim.peak_bytes, sim.host_peak_bytes), "{name}: runtime vs simulated peaks");
            assert!(peak_b <= budget, "{name}: {peak_b} over the budget {budget}");
            // The plan's arena fits the budget and runs there; the original's, above its live
            // peak, is refused there.
            assert!(arenas(g).0 <= budget, "{name}: arena {} over the budget {budget}", arenas(g).0);
            budgeted_session(g, budget).unwrap().step().unwrap();
            match budgeted_session(&original, budget) {
                Err(RuntimeError::OutOfMemory(_)) => {}
                other => panic!("{name}: the original should not fit in {budget} bytes: {:?}", other.err()),
            }
            let proof = lms_compiler::egraph::verify(&original, g, &lms_compiler::egraph::Limits::default()).unwrap();
            assert!(proof.proven() > 0, "{name}: nothing proven");
        }
    }
}

/// (kind, tensor, bytes) of each decision in a report's JSON, sorted.
/// Every gap between two uses of a tensor can be decided (swapped out of
/// the copy there, recomputed, or kept): at budgets from the original arena
/// down to a quarter of the way to the smallest peak the planner reaches, with and without host memory,
/// every plan of the training graphs, whole and split along the batch in
/// two parts, trains bit for bit like the graph it plans, at its simulated
/// peak, within its budget.
#[test]
fn plans_at_every_budget_train_bit_for_bit_at_their_simulated_peak() {
    // Swaps of a copy: a tensor swapped in (or recomputed) for one reader and
    // swapped out again until the next (a batch norm's input read by its
    // statistics and, after their merge, by its normalization).
    let mut copies_swapped = 0;
    let mut graphs = Vec::new();
    for model in ["models/cnn_residual.onnx", "models/tiny_gpt.onnx", "models/mlp.onnx"] {
        let whole = training_graph(&fixture(model), 4);
        let (split, _) = batch_patch(&whole, &BatchSplit { parts: 2, min_bytes: 0 }).unwrap();
        let (split, _) = pipeline::apply_checked(&whole, &split).unwrap();
        graphs.extend([(model, whole), (model, split)]);
    }
    for (model, original) in graphs {
        let before = Footprint::of(&original, original.schedule());
        let (losses_a, vars_a, _, _) = train_bits(&original);
        for host_budget in [u64::MAX, 0] {
            // `fit` decides by the placed arena, which is above the live peak: a
            // budget within the original's placement overhead (alignment,
            // fragmentation) of the smallest live peak the planner reaches may
            // find no plan; there the planner's own plan, made for that live
            // peak, is run instead.
            let smallest = smallest_peak(&original, host_budget);
            let overhead = before.device.arena_bytes - before.device.peak_bytes;
            for quarter in 0..=4 {
                let budget = smallest + (before.device.arena_bytes - smallest) * quarter / 4;
                let options = PlanOptions::new(Budget { device: budget, host: host_budget });
                let graph = match planner::fit(&original, &speeds(&original), options) {
                    Err(Error::NoPlan { .. }) if budget < smallest + overhead => {
                        let speeds = speeds(&original);
                        let facts = Facts::new(&original, original.schedule(), &speeds);
                        let plan = planner::plan_with(&facts, options);
                        assert!(plan.fits, "{model} at {budget}: the planner reaches its own smallest peak");
                        pipeline::apply_checked(&original, &planner::patch(&facts, &plan.decisions)).unwrap().0
                    }
                    fitted => {
                        let fitted = fitted.unwrap();
                        let f = fitted.footprint;
                        assert!(f.fits(options.budget), "{model} at {budget}: {f:?}");
                        fitted.graph
                    }
                };
                let g = &graph;
                let (losses_b, vars_b, peak_b, host_b) = train_bits(g);
                let at = format!("{model} at {budget} bytes, host budget {host_budget}");
                assert_eq!((&losses_a, &vars_a), (&losses_b, &vars_b), "{at}: training differs after planning");
                let sim = memory::simulate(g, g.schedule());
                assert_eq!((peak_b, host_b), (sim.peak_bytes, sim.host_peak_bytes), "{at}: runtime vs simulated");
                assert!(peak_b <= budget, "{at}: peak {peak_b}");
                let copy = |t| {
                    let producer = g.node(g.tensor(t).producer.0);
                    producer.op == SWAP_IN_OP || producer.name.ends_with("/recompute")
                };
                copies_swapped += g.plan.swaps.iter().filter(|s| copy(s.tensor)).count();
            }
        }
    }
    assert!(copies_swapped > 0, "no plan swaps a tensor out over a later gap");
}

fn decisions(report: &serde_json::Value) -> Vec<(String, String, u64)> {
    let mut found: Vec<(String, String, u64)> = report["decisions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (d["kind"].as_str().unwrap().into(), d["tensor"].as_str().unwrap().into(), d["bytes"].as_u64().unwrap())
        })
        .collect();
    found.sort();
    found
}

#[test]
fn auto_compiled_cnn_trains_bit_for_bit_within_its_budget() {
    let path = |name: &str| scratch_path("planner-runtime", name).to_str().unwrap().to_string();
    let model = "fixtures/models/cnn_residual.onnx";
    let train = ["--batch", "4", "--train", "momentum", "--lr", "0.05", "--momentum", "0.9"];
    let original = path("original.lms");
    lms_ok(&[&["compile", model, "-q", "-o", &original][..], &train].concat());
    let (original_graph, _) = serialize::read(original.as_ref()).unwrap();
    let (losses_a, vars_a, peak_a, _) = train_bits(&original_graph);
    // Under the original's peak, above what a swap or recompute plan of the whole batch
    // reaches (below it, the weight gradients' cuDNN workspaces leave only batch splits).
    let budget = 2304 << 10;
    assert!(peak_a > budget, "the original fits the budget: {peak_a}");
    for (host, kind) in [("64GiB", "swap"), ("0", "recompute")] {
        let (out, report, text) = (path(&format!("auto_{host}.lms")), path("auto.json"), path("auto.txt"));
        let args = ["compile", model, "--strategy", "auto", "--budget", "2304KiB", "--host-budget", host, "-o", &out];
        lms_ok(&[&args[..], &train, &["-q", "--report", &report, "--text", &text]].concat());
        let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&report).unwrap()).unwrap();
        assert_eq!(report["strategy"], "auto");
        let decided = decisions(&report);
        assert!(decided.iter().any(|d| d.0 == kind), "host {host}: no {kind} in {decided:?}");
        if host == "0" {
            assert!(decided.iter().all(|d| d.0 == "recompute"), "host 0: swaps in {decided:?}");
            insta::assert_snapshot!("auto_recompute@cnn_residual", std::fs::read_to_string(&text).unwrap());
        }
        let overhead = report["predicted_overhead"].as_f64().unwrap();
        assert!((1.0..2.0).contains(&overhead), "host {host}: predicted overhead {overhead}");
        // The .lms carries the same plan: simulate reports its decisions.
        let simulated: serde_json::Value = serde_json::from_str(&lms_ok(&["simulate", "--json", &out])).unwrap();
        assert_eq!(simulated["strategy"], "auto");
        assert_eq!(decisions(&simulated), decided, "host {host}: simulate and compile disagree");
        lms_ok(&["verify", &original, &out]);
        let (g, _) = serialize::read(out.as_ref()).unwrap();
        let (losses_b, vars_b, peak_b, host_b) = train_bits(&g);
        assert_eq!(losses_a, losses_b, "host {host}: losses differ");
        assert_eq!(vars_a, vars_b, "host {host}: parameters differ");
        assert_eq!(peak_b, simulated["peak_device_bytes"].as_u64().unwrap(), "host {host}: runtime vs simulated peak");
        assert_eq!(
            host_b,
            simulated["peak_host_bytes"].as_u64().unwrap(),
            "host {host}: runtime vs simulated host peak"
        );
        assert!(peak_b <= budget, "host {host}: {peak_b} over the budget");
    }
}
