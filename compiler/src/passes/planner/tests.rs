//! Planner tests: plans fit, apply to verified graphs, and come within 10%
//! of the exact optimum on the small training graphs.

use super::milp::optimum;
use super::*;
use crate::frontend::{self, FrontendOptions};
use crate::train::{self, Loss, Optimizer, TrainOptions};
use std::path::PathBuf;

fn training_graph(model: &str, batch: usize) -> Graph {
    training_graph_of(&format!("models/{model}"), batch)
}

/// The SGD training graph of a model under `fixtures/`.
fn training_graph_of(model: &str, batch: usize) -> Graph {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures").join(model);
    let model = frontend::load(&path, &FrontendOptions { batch: Some(batch), ..Default::default() }).unwrap();
    let options =
        TrainOptions { loss: Loss::SoftmaxCrossEntropy, optimizer: Optimizer::Sgd { lr: 0.1 }, ..Default::default() };
    train::build(&model.graph, &options).unwrap()
}

/// Op times from the bytes each node touches at 10 GB/s, links at `link` bytes/s.
fn speeds_with_link(g: &Graph, link: f64) -> Speeds {
    let mut node_seconds = vec![0.0; g.node_bound()];
    for id in g.node_ids() {
        let node = g.node(id);
        let bytes: u64 = node.inputs.iter().flatten().chain(&node.outputs).map(|&t| g.tensor(t).ty.bytes()).sum();
        node_seconds[id.index()] = bytes as f64 / 10e9;
    }
    Speeds { node_seconds, d2h_bytes_per_second: link, h2d_bytes_per_second: link }
}

fn speeds(g: &Graph) -> Speeds {
    speeds_with_link(g, 5e9)
}

fn options(device_budget: u64, host_budget: u64) -> PlanOptions {
    PlanOptions::new(Budget { device: device_budget, host: host_budget })
}

#[test]
fn plans_fit_their_budget_and_are_proven_equal() {
    for model in ["cnn_residual.onnx", "tiny_gpt.onnx", "mlp.onnx"] {
        let g = training_graph(model, 8);
        let schedule = g.schedule().to_vec();
        let before = memory::simulate(&g, &schedule);
        let speeds = speeds(&g);
        for (fraction, host) in [(90, u64::MAX), (70, u64::MAX), (70, 0)] {
            let budget = before.resident_bytes + (before.peak_bytes - before.resident_bytes) * fraction / 100;
            let Ok(fitted) = fit(&g, &speeds, options(budget, host)) else { continue };
            let arena = fitted.footprint.device.arena_bytes;
            assert!(arena <= budget, "{model}: arena {arena} over {budget}");
            let peak = fitted.footprint.device.peak_bytes;
            assert!(fitted.plan.device_peak >= peak, "{model}: the tracker is not conservative");
            assert!(!fitted.plan.decisions.is_empty(), "{model}: nothing decided");
            crate::egraph::verify(&g, &fitted.graph, &crate::egraph::Limits::default()).unwrap();
            // Same input, same plan.
            let again = fit(&g, &speeds, options(budget, host)).unwrap();
            assert_eq!(again.plan.decisions, fitted.plan.decisions, "{model}: not deterministic");
        }
    }
}

#[test]
fn a_budget_below_an_ops_working_set_names_the_op() {
    let g = training_graph("cnn_residual.onnx", 8);
    let schedule = g.schedule().to_vec();
    let (op, working_set) = largest_working_set(&g, &schedule);
    let err = fit(&g, &speeds(&g), options(working_set - 1, u64::MAX)).unwrap_err().to_string();
    assert!(err.contains(&format!("op '{}' alone needs", g.node(op).name)), "{err}");
    assert!(err.contains("the smallest peak any plan reaches is"), "{err}");
}

#[test]
fn the_greedy_is_within_ten_percent_of_the_optimum() {
    let mut compared = 0;
    // The tiny GPT's program (hundreds of binaries) is beyond the solver's reach in a test.
    for model in ["cnn_residual.onnx", "mlp.onnx"] {
        let g = training_graph(model, 8);
        let schedule = g.schedule().to_vec();
        let before = memory::simulate(&g, &schedule);
        for link in [5e9, 0.5e9] {
            let speeds = speeds_with_link(&g, link);
            let facts = Facts::new(&g, &schedule, &speeds);
            let base: f64 = speeds.node_seconds.iter().sum();
            for (fraction, host) in [(85, u64::MAX), (70, u64::MAX), (55, u64::MAX), (70, 0)] {
                let budget = before.resident_bytes + (before.peak_bytes - before.resident_bytes) * fraction / 100;
                let plan = plan_with(&facts, options(budget, host));
                let Some(best) = optimum(&facts, options(budget, host)) else {
                    assert!(!plan.fits, "{model} at {fraction}%: the greedy fits where the optimum does not");
                    continue;
                };
                assert!(plan.fits, "{model} at {fraction}%, link {link}: the optimum fits, the greedy does not");
                let greedy = (base + extra_seconds(&facts, &plan.decisions)) / base;
                let optimal = (base + best) / base;
                println!(
                    "{model} {fraction}% link {link} host {host}: overhead greedy {greedy:.4}, optimum {optimal:.4}"
                );
                assert!(greedy <= optimal * 1.10, "{model} at {fraction}%: greedy {greedy} vs optimum {optimal}");
                compared += 1;
            }
        }
    }
    assert!(compared >= 6, "only {compared} plans compared with the optimum");
}

#[test]
fn the_fastest_fit_is_never_predicted_slower_than_the_plan_with_swaps() {
    let profile = DeviceProfile::load("h100-sxm").unwrap();
    for model in ["cnn_residual.onnx", "tiny_gpt.onnx"] {
        let g = training_graph(model, 8);
        let peak = memory::simulate(&g, g.schedule()).peak_bytes;
        let speeds = Speeds::from_profile(&g, &profile);
        let step = |f: &Fitted| timeline::simulate(&f.graph, f.graph.schedule(), &profile).step_seconds;
        for budget in [peak * 3 / 4, peak * 9 / 10] {
            let (Ok(swaps), Ok(fastest)) = (
                fit(&g, &speeds, options(budget, u64::MAX)),
                fit_fastest(&g, &speeds, &profile, options(budget, u64::MAX)),
            ) else {
                continue;
            };
            assert!(step(&fastest) <= step(&swaps), "{model} at {budget}");
            assert!(fastest.footprint.device.arena_bytes <= budget, "{model} at {budget}");
        }
    }
}

#[test]
fn every_gap_between_two_uses_of_a_tensor_is_droppable() {
    let g = training_graph("cnn_residual.onnx", 8);
    let schedule = g.schedule().to_vec();
    let speeds = speeds(&g);
    let facts = Facts::new(&g, &schedule, &speeds);
    let mut backward = 0;
    for (t, tensor) in g.tensors() {
        let gaps: Vec<(usize, usize)> =
            facts.gaps[t.index()].clone().map(|i| (facts.droppable[i].gap_start, facts.droppable[i].gap_end)).collect();
        let Some(&first) = facts.gaps[t.index()].clone().next().as_ref() else { continue };
        let made = facts.droppable[first].made;
        let mut uses: Vec<usize> = g.readers(t).map(|(r, _)| facts.view.position[r.index()]).collect();
        uses.push(made);
        uses.sort_unstable();
        uses.dedup();
        let wanted: Vec<(usize, usize)> = uses.windows(2).filter(|w| w[1] > w[0] + 1).map(|w| (w[0], w[1])).collect();
        assert_eq!(gaps, wanted, "{}", tensor.name);
        assert_eq!(facts.droppable[first].out_at, made, "the first gap's swap-out follows the producer");
        backward += usize::from(g.node(tensor.producer.0).phase == crate::ir::Phase::Backward);
    }
    // The residual block's gradient waits for the branch's backward pass.
    assert!(backward > 0, "no backward tensor is droppable");
}

/// On ResNet-50 split along the batch (a graph where chains read tensors
/// that are dropped elsewhere, pins are swapped, and pinned tensors are
/// recomputed), every chain reads each source where the plan has it on the
/// device: no recompute reads a tensor inside a gap where it is recomputed,
/// or before the swap-in of a gap where it is swapped.
#[test]
fn chains_read_their_sources_only_where_the_plan_keeps_them() {
    use crate::passes::split::{batch_patch, BatchSplit};
    let gib = 1u64 << 30;
    let profile = DeviceProfile::load("h100-sxm").unwrap();
    for (batch, host) in [(1400, 64 * gib), (900, 0)] {
        let g = training_graph_of("data/onnx/light/light_resnet50.onnx", batch);
        let (split, _) = batch_patch(&g, &BatchSplit { parts: 8, min_bytes: 0 }).unwrap();
        let (g, _) = pipeline::apply_checked(&g, &split).unwrap();
        let speeds = Speeds::from_profile(&g, &profile);
        let schedule = g.schedule().to_vec();
        let facts = Facts::new(&g, &schedule, &speeds);
        let plan = plan_with(&facts, options(16 * gib, host));
        assert!(plan.fits, "host {host}: {} over 16 GiB", plan.device_peak);
        let recomputed_at = |t: TensorId, at: usize| {
            facts.gap_at(t, at).is_some_and(|gap| {
                plan.decisions.iter().any(|d| d.droppable == gap && matches!(d.kind, Kind::Recompute { .. }))
            })
        };
        // Chains that also re-make a tensor recomputed where they run.
        let grown = plan
            .decisions
            .iter()
            .filter(|d| match &d.kind {
                Kind::Recompute { chain } => {
                    let at = facts.droppable[d.droppable].gap_end;
                    let (_, made_on_the_way) = chain.nodes.split_last().unwrap();
                    made_on_the_way.iter().any(|&n| g.node(n).outputs.iter().any(|&t| recomputed_at(t, at)))
                }
                Kind::Swap { .. } => false,
            })
            .count();
        assert!(grown > 0, "host {host}: no chain re-makes a tensor recomputed where it runs");
        for reader in &plan.decisions {
            let Kind::Recompute { chain } = &reader.kind else { continue };
            let at = facts.droppable[reader.droppable].gap_end;
            for &s in &chain.sources {
                let Some(gap) = facts.gap_at(s, at) else { continue };
                let Some(dropped) = plan.decisions.iter().find(|d| d.droppable == gap) else { continue };
                match dropped.kind {
                    Kind::Swap { trigger } => assert!(trigger < at, "{} read before its swap-in", g.tensor(s).name),
                    Kind::Recompute { .. } => panic!("{} read where it is recomputed", g.tensor(s).name),
                }
            }
        }
        let fitted = fit(&g, &speeds, options(16 * gib, host)).unwrap();
        assert!(fitted.footprint.fits(options(16 * gib, host).budget), "host {host}: {:?}", fitted.footprint);
    }
}

/// Budget sweeps (the plan-curve's budgets, from the smallest the planner
/// reaches to the unrewritten arena) over several batches: auto's predicted
/// step never rises with the budget, a budget auto fits stays fitted above,
/// and at every budget the search `compile` runs is never predicted slower
/// than TFLMS's plan there.
#[test]
fn more_budget_is_never_slower_and_auto_never_slower_than_tflms() {
    let profile = DeviceProfile::load("h100-sxm").unwrap();
    let host = 64u64 << 30;
    let cases: &[(&str, &[usize], usize)] = &[
        ("models/cnn_residual.onnx", &[8, 32], 24),
        ("models/tiny_gpt.onnx", &[8, 32], 24),
        ("models/gpt_buffers.onnx", &[8, 32], 24),
        ("models/mlp.onnx", &[32], 12),
        ("data/onnx/light/light_resnet50.onnx", &[256], 8),
    ];
    let mut compared = 0;
    for &(model, batches, steps) in cases {
        for &batch in batches {
            let g = training_graph_of(model, batch);
            let curve = crate::commands::plan_curve::plan_curve(&g, &profile, host, steps).unwrap();
            let mut fitted_below: Option<f64> = None;
            for point in &curve.points {
                let at = format!("{model} batch {batch} at {} bytes", point.budget_bytes);
                let auto = point.auto.as_ref().map(|f| f.step_seconds);
                if let Some(below) = fitted_below {
                    let auto = auto.unwrap_or_else(|| panic!("{at}: fits a lower budget, not this one"));
                    assert!(auto <= below, "{at}: {auto} s, slower than {below} s at a lower budget");
                }
                fitted_below = auto.or(fitted_below);
                let Some(tflms) = &point.tflms else { continue };
                let searched = search(&g, &profile, options(point.budget_bytes, host))
                    .unwrap_or_else(|e| panic!("{at}: TFLMS fits, auto does not: {e}"));
                let (auto, tflms) = (searched.step_seconds, tflms.step_seconds);
                assert!(auto <= tflms, "{at}: auto {auto} s, slower than TFLMS's {tflms} s");
                assert!(searched.fitted.footprint.fits(options(point.budget_bytes, host).budget), "{at}");
                compared += 1;
            }
            let last = curve.points.last().unwrap().auto.as_ref().unwrap();
            assert_eq!(last.step_seconds, curve.unrewritten_step_seconds, "{model} batch {batch}: at its own arena");
        }
    }
    assert!(compared >= 40, "only {compared} budgets where TFLMS fits");
}

/// The runs of a ladder, each resumed from a run at a higher target (falling
/// targets with climbs back, as a fit's lowered rounds and then the next
/// rung ask, and host budgets interleaved), plan exactly what runs from
/// scratch plan: the same decisions, peaks and verdict.
#[test]
fn a_run_resumed_at_a_lower_target_plans_what_a_run_from_scratch_plans() {
    let gib = 1u64 << 30;
    let profile = DeviceProfile::load("h100-sxm").unwrap();
    let graphs = [
        ("cnn_residual", training_graph("cnn_residual.onnx", 8)),
        ("tiny_gpt", training_graph("tiny_gpt.onnx", 32)),
        ("mlp", training_graph("mlp.onnx", 8)),
        ("resnet50 b256", training_graph_of("data/onnx/light/light_resnet50.onnx", 256)),
    ];
    for (model, g) in &graphs {
        let before = memory::simulate(g, g.schedule());
        let (resident, peak) = (before.resident_bytes, before.peak_bytes);
        for speeds in [speeds_with_link(g, 0.5e9), Speeds::from_profile(g, &profile)] {
            let facts = Facts::new(g, g.schedule(), &speeds);
            let mut greedy = Greedy::new(&facts);
            let mut resumed_plans = 0;
            for per_mille in [990, 960, 900, 930, 800, 700, 750, 600, 500, 550, 400, 300, 200, 100, 50] {
                for host in [64 * gib, 0, (peak - resident) / 4] {
                    let at = format!("{model} at {per_mille}/1000, host {host}");
                    let opts = options(resident + (peak - resident) * per_mille / 1000, host);
                    resumed_plans += usize::from(greedy.resumes(opts));
                    let resumed = greedy.plan(opts);
                    let fresh = plan_with(&facts, opts);
                    assert_eq!(resumed.decisions, fresh.decisions, "{at}");
                    assert_eq!(
                        (resumed.device_peak, resumed.host_peak, resumed.fits),
                        (fresh.device_peak, fresh.host_peak, fresh.fits),
                        "{at}"
                    );
                }
            }
            assert!(resumed_plans >= 30, "{model}: only {resumed_plans} runs resumed");
        }
    }
}

/// The bound a search drops plans by before building their graphs is never
/// above the step the timeline predicts for the built graph, on a profile
/// whose copies overlap compute and on one whose copies run in line, for
/// plans that swap and plans that recompute; and it is not the unrewritten
/// step alone (it grows with the plan's work).
#[test]
fn the_step_bound_never_exceeds_the_timeline_of_the_built_plan() {
    let mut grown = 0;
    for profile_name in ["h100-sxm", "cpu"] {
        let profile = DeviceProfile::load(profile_name).unwrap();
        for model in ["cnn_residual.onnx", "tiny_gpt.onnx", "mlp.onnx"] {
            let g = training_graph(model, 8);
            let before = memory::simulate(&g, g.schedule());
            let (resident, peak) = (before.resident_bytes, before.peak_bytes);
            let speeds = Speeds::from_profile(&g, &profile);
            let facts = Facts::new(&g, g.schedule(), &speeds);
            let unrewritten = step_at_least(&facts, &[], &profile);
            for per_mille in [900, 700, 500, 300] {
                for host in [u64::MAX, 0] {
                    let plan = plan_with(&facts, options(resident + (peak - resident) * per_mille / 1000, host));
                    let (graph, _) = pipeline::apply_checked(&g, &patch(&facts, &plan.decisions)).unwrap();
                    let step = timeline::simulate(&graph, graph.schedule(), &profile).step_seconds;
                    let bound = step_at_least(&facts, &plan.decisions, &profile);
                    let at = format!("{model} on {profile_name} at {per_mille}/1000, host {host}");
                    assert!(bound <= step * (1.0 + 1e-12), "{at}: bound {bound} over the step {step}");
                    grown += usize::from(bound > unrewritten);
                }
            }
        }
    }
    assert!(grown >= 10, "the bound grew over the unrewritten step for only {grown} plans");
}
