//! `lms compile` as a library call (for the CLI and for `build.rs`): ONNX
//! model → training graph → optional memory rewrite → `.lms` file, text form,
//! ONNX export and report. Every output is written through a temporary file
//! and a rename, and the same options always give the same bytes.

use crate::analysis::footprint::Footprint;
use crate::analysis::profile::{DeviceProfile, DEFAULT_PROFILE};
use crate::analysis::timeline;
use crate::budget::Budget;
use crate::commands::compile_pipeline::Pipeline;
use crate::commands::provenance;
use crate::commands::setup::Setup;
use crate::commands::simulate::SimulateReport;
use crate::emit;
use crate::error::{Error, Result};
use crate::frontend::FrontendOptions;
use crate::ir::{Graph, Plan};
use crate::passes::planner::{self, DecisionReport};
use crate::passes::split::{SplitReport, SplitRequest};
use crate::passes::stages::PassReport;
use crate::passes::tflms::{FreeKnobs, SwapInTrigger, SwappedTensor, TflmsConfig};
use crate::pipeline::{self, Context, PassOptions};
use crate::train::{TrainOptions, TrainSummary};
use crate::units::format_bytes;
use lms_proto::Message;
use serde::Serialize;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// Which memory rewrite to apply to the training graph.
#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    /// None: the training graph as built.
    None,
    /// TFLMS swapping with these knobs.
    Tflms(TflmsConfig),
    /// The budget planner: a swap or a recompute per tensor, chosen by
    /// extra predicted time per byte (needs a budget).
    Auto,
}

/// Everything `lms compile` needs.
#[derive(Clone, Debug)]
pub struct CompileOptions {
    pub model: PathBuf,
    pub frontend: FrontendOptions,
    pub train: TrainOptions,
    pub strategy: Strategy,
    /// With a strategy: search its knobs for a plan that fits.
    pub budget: Option<Budget>,
    /// With a budget (`--force`): rewrite even when the graph already fits,
    /// and write a plan whose arenas are over the budget (saying so) instead
    /// of failing.
    pub force: bool,
    /// With a budget: the strategy's knobs the search may choose (those the
    /// user left unset); the others are used as given.
    pub free_knobs: FreeKnobs,
    /// The device profile the plan is made for: a shipped profile's name or
    /// a profile file's path, recorded in the plan as given (`lms simulate`
    /// loads it from there); it places time-triggered swap-ins. Default
    /// `h100-sxm`; empty for none (time triggers
    /// and `auto` then use the default).
    pub device_profile: String,
    /// Ops forced to run in parts (`--split`), before any other rewrite.
    pub split: Vec<SplitRequest>,
    /// Where the pipeline stops and which pass's text form it dumps.
    pub passes: PassOptions,
    /// The `.lms` file to write.
    pub output: PathBuf,
    /// Also write the stable text form here.
    pub text: Option<PathBuf>,
    /// Also write an ONNX export here.
    pub onnx: Option<PathBuf>,
    /// Also write the report as JSON here.
    pub report: Option<PathBuf>,
    /// Also write the HTML report here: memory before and after the rewrite,
    /// the predicted streams and the plan's decisions.
    pub html: Option<PathBuf>,
    /// Also write a Makefile-style depfile here: the `.lms` file depends on
    /// the model and its external data files.
    pub depfile: Option<PathBuf>,
    /// Prove a rewritten graph equivalent to the training graph (egg) before
    /// writing it.
    pub verify: bool,
}

impl Default for CompileOptions {
    /// No model or output yet, the model's batch, the default training
    /// graph, no rewrite (a budget search may choose every knob), the
    /// default device profile,
    /// verification on, no extra outputs.
    fn default() -> Self {
        CompileOptions {
            model: PathBuf::new(),
            frontend: FrontendOptions::default(),
            train: TrainOptions::default(),
            strategy: Strategy::None,
            budget: None,
            force: false,
            free_knobs: FreeKnobs::ALL,
            device_profile: DEFAULT_PROFILE.to_string(),
            split: Vec::new(),
            passes: PassOptions::default(),
            output: PathBuf::new(),
            text: None,
            onnx: None,
            report: None,
            html: None,
            depfile: None,
            verify: true,
        }
    }
}

/// What `lms compile` did.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CompileReport {
    pub model: String,
    /// The leading dimension of the data inputs (`None` for a model without inputs).
    pub batch: Option<usize>,
    /// The optimizer of the training graph, e.g. `adam (lr 0.001)` (`None`
    /// when the pipeline stopped before the optimizer pass).
    pub optimizer: Option<String>,
    pub strategy: String,
    /// The passes run, in order (fewer than the pipeline's with `--stop-after`).
    pub passes: Vec<String>,
    pub ops: usize,
    pub tensors: usize,
    /// With a budget: whether the training graph fit before any rewrite
    /// (its placed arenas within the budgets).
    pub fits_without_rewrite: Option<bool>,
    /// With a budget and a strategy that ran: whether the compiled graph's
    /// placed arenas are within the budgets (only `--force` writes one that is not).
    pub fits: Option<bool>,
    pub budget_bytes: Option<u64>,
    pub host_budget_bytes: Option<u64>,
    /// Knobs of the rewrite (`lb` only with the count trigger).
    pub n_tensors: Option<usize>,
    pub lb: Option<u32>,
    /// What started the swap-ins: `count` or `time`.
    pub trigger: Option<SwapInTrigger>,
    /// Tensors smaller than this were not swapped.
    pub min_bytes: Option<u64>,
    /// The device profile of the plan: a shipped profile's name or the name
    /// inside the profile file given.
    pub device_profile: String,
    /// The knobs the budget search chose.
    pub chosen_knobs: Vec<String>,
    /// The knobs given (`--n-tensors`, `--lb`); the others not chosen took
    /// their defaults.
    pub given_knobs: Vec<String>,
    pub swapped_tensors: usize,
    pub swapped_bytes: u64,
    /// Tensors the planner (`auto`) recomputes, and their bytes.
    pub recomputed_tensors: usize,
    pub recomputed_bytes: u64,
    pub added_ops: usize,
    pub swap_ins_without_control: usize,
    pub peak_device_bytes_before: u64,
    pub peak_device_bytes_after: u64,
    pub peak_host_bytes_after: u64,
    /// Bytes of the compiled graph's device arena, every tensor at its static offset (the
    /// live peak plus alignment and fragmentation; the plan records it).
    pub arena_device_bytes: u64,
    /// The same for the host arena.
    pub arena_host_bytes: u64,
    /// With `--force`: why the plan written is over its budgets (`None`
    /// when it is within them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub written_over_budget: Option<String>,
    /// With a rewrite that was verified: the outputs and variable updates
    /// proven equal to the training graph's.
    pub verified: Option<usize>,
    /// Each swapped tensor: bytes, distance, swap ops and their control ops.
    pub swaps: Vec<SwappedTensor>,
    /// Each forced split: the ops run in parts, the tensors split and merged.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub splits: Vec<SplitReport>,
    /// The planner's (`auto`) split along the batch, when no plan fit without one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub auto_split: Option<planner::SplitChoice>,
    /// The planner's (`auto`) decisions, in the order taken: kind, tensor,
    /// bytes (ΔM), extra_seconds (ΔT) and why.
    pub decisions: Vec<DecisionReport>,
    /// With a device profile (always with `auto`): the predicted time of one
    /// step of the compiled graph, and its ratio to the unrewritten graph's
    /// predicted step with no memory limit.
    pub predicted_step_seconds: Option<f64>,
    pub predicted_overhead: Option<f64>,
    /// The trained and frozen tensors, and warnings about the model.
    pub training: TrainSummary,
}

/// Compiles a model and writes every requested output.
pub fn compile(options: &CompileOptions) -> Result<CompileReport> {
    let Pipeline { mut passes, profile, model_bytes, external, running_variance_from_producer } =
        Pipeline::for_options(options)?;
    check_paths(options, &external)?;
    let mut cx = Context::default();
    let ran = pipeline::run(&mut passes, &mut cx, &options.passes).map_err(|e| suggest_auto(e, &options.strategy))?;
    let strategy = ran
        .reports
        .iter()
        .find_map(|r| match r {
            PassReport::Tflms { .. } => Some("tflms"),
            PassReport::Plan(_) => Some("auto"),
            _ => None,
        })
        .unwrap_or(crate::ir::NO_STRATEGY);
    let graph = &mut cx.graph;
    // A profile file is carried by content, under the name inside it.
    let from_file = profile.as_ref().filter(|_| DeviceProfile::file(&options.device_profile).is_some());
    graph.plan = Plan {
        strategy: strategy.to_string(),
        budget_device_bytes: options.budget.map(|b| b.device),
        budget_host_bytes: options.budget.map(|b| b.host),
        device_profile: match (&profile, options.device_profile.as_str()) {
            (Some(p), "") => p.name.clone(),
            (Some(p), _) if from_file.is_some() => p.name.clone(),
            (_, given) => given.to_string(),
        },
        device_profile_json: from_file
            .map(|p| serde_json::to_string(p).map_err(|e| Error::Usage(format!("device profile: {e}"))))
            .transpose()?,
        swaps: std::mem::take(&mut graph.plan.swaps),
        recomputes: std::mem::take(&mut graph.plan.recomputes),
    };
    let after = Footprint::of(&cx.graph, cx.graph.schedule());
    let before = cx.reference.as_ref().unwrap_or(&cx.graph);
    // The unrewritten graph is placed only when its live peaks are within the budgets.
    let (peak_device_bytes_before, fits_without_rewrite) = match &cx.reference {
        Some(reference) => (
            crate::analysis::memory::simulate(reference, reference.schedule()).peak_bytes,
            options.budget.map(|b| Footprint::graph_fits(reference, reference.schedule(), b)),
        ),
        None => (after.device.peak_bytes, options.budget.map(|b| after.fits(b))),
    };
    let step_seconds = |p: &DeviceProfile, g: &Graph| timeline::simulate(g, g.schedule(), p).step_seconds;
    let predicted = profile.as_ref().map(|p| (step_seconds(p, &cx.graph), step_seconds(p, before)));
    let setup = Setup::of(&cx.graph);
    let mut report = CompileReport {
        model: provenance::model_file_name(&options.model),
        batch: setup.batch,
        optimizer: setup.optimizer,
        strategy: strategy.to_string(),
        passes: ran.passes.iter().map(|p| p.to_string()).collect(),
        ops: cx.graph.schedule().iter().filter(|&&id| !cx.graph.node(id).parameterized).count(),
        tensors: cx.graph.tensors().count(),
        fits_without_rewrite,
        fits: None,
        budget_bytes: options.budget.map(|b| b.device),
        host_budget_bytes: options.budget.map(|b| b.host),
        n_tensors: None,
        lb: None,
        trigger: None,
        min_bytes: None,
        device_profile: cx.graph.plan.device_profile.clone(),
        chosen_knobs: Vec::new(),
        given_knobs: Vec::new(),
        swapped_tensors: 0,
        swapped_bytes: 0,
        recomputed_tensors: 0,
        recomputed_bytes: 0,
        added_ops: 0,
        swap_ins_without_control: 0,
        peak_device_bytes_before,
        peak_device_bytes_after: after.device.peak_bytes,
        peak_host_bytes_after: after.host.peak_bytes,
        arena_device_bytes: after.device.arena_bytes,
        arena_host_bytes: after.host.arena_bytes,
        written_over_budget: None,
        verified: None,
        swaps: vec![],
        splits: vec![],
        auto_split: None,
        decisions: vec![],
        predicted_step_seconds: predicted.map(|(after, _)| after),
        predicted_overhead: predicted.map(|(after, before)| after / before),
        training: TrainSummary { running_variance_from_producer, ..TrainSummary::default() },
    };
    for pass in ran.reports {
        report.fold(pass, options.free_knobs);
    }
    // A plan is written only within its budgets, unless forced.
    if let (Some(b), true) = (options.budget, strategy != crate::ir::NO_STRATEGY) {
        report.fits = Some(after.fits(b));
        if let Err(over) = after.check(&cx.graph, cx.graph.schedule(), b) {
            if !options.force {
                return Err(suggest_auto(over.in_file(&options.model), &options.strategy));
            }
            report.written_over_budget = Some(over.to_string());
        }
    }
    let metadata = provenance::metadata(options, &model_bytes, &report);
    write_outputs(options, &cx.graph, (&after).into(), &metadata, &report)?;
    if let Some(path) = &options.html {
        write(path, html_report(options, cx.reference.as_ref(), &cx.graph, &report.decisions)?.as_bytes())?;
    }
    if let Some(path) = &options.depfile {
        let mut inputs = vec![options.model.clone()];
        inputs.extend(external);
        write(path, depfile(&options.output, &inputs).as_bytes())?;
    }
    Ok(report)
}

/// A TFLMS plan that does not fit, with the advice to try the budget
/// planner, which also recomputes and splits the batch; other errors as they are.
fn suggest_auto(e: Error, strategy: &Strategy) -> Error {
    match strategy {
        Strategy::Tflms(_) if e.exit_code() == crate::error::exit::DOES_NOT_FIT => Error::Hinted {
            source: Box::new(e),
            hint: "--strategy auto may fit it (it also recomputes tensors and splits the batch)".into(),
        },
        _ => e,
    }
}

/// Refuses outputs that name the model, its external data, the device
/// profile's file or each other; checked before any pass runs, since
/// `--dump-after` writes on the way.
fn check_paths(options: &CompileOptions, external: &[PathBuf]) -> Result<()> {
    let mut inputs = vec![("model", options.model.as_path())];
    inputs.extend(external.iter().map(|p| ("model's external data", p.as_path())));
    inputs.extend(DeviceProfile::file(&options.device_profile).map(|p| ("--device-profile", p)));
    let mut outputs = vec![("-o", options.output.as_path())];
    outputs.extend(options.passes.dump_after.as_ref().map(|(_, p)| ("--dump-after", p.as_path())));
    let optional = [
        ("--text", &options.text),
        ("--onnx", &options.onnx),
        ("--report", &options.report),
        ("--html", &options.html),
        ("--depfile", &options.depfile),
    ];
    outputs.extend(optional.into_iter().filter_map(|(flag, p)| Some((flag, p.as_deref()?))));
    emit::output::check_distinct(&inputs, &outputs)
}

/// The HTML report of the compiled graph, and of the training graph before
/// the rewrite when there is one, timed on the plan's device profile (the
/// default profile when the plan names none). A decision the planner took
/// says why as `--verbose` does (`planned`: the peak it relieves).
fn html_report(
    options: &CompileOptions,
    before: Option<&Graph>,
    after: &Graph,
    planned: &[DecisionReport],
) -> Result<String> {
    let profile = match options.device_profile.as_str() {
        "" => DEFAULT_PROFILE,
        name => name,
    };
    let device = DeviceProfile::load(profile)?;
    let simulate = |g: &Graph| SimulateReport::new(g, g.schedule(), &device);
    let before = before.map(simulate);
    let mut after = simulate(after);
    for d in &mut after.decisions {
        if let Some(p) = planned.iter().find(|p| p.kind == d.kind && p.tensor == d.tensor) {
            d.why.clone_from(&p.why);
        }
    }
    let mut series = Vec::new();
    series.extend(before.as_ref().map(|b| ("before", b)));
    series.push((if before.is_some() { "after" } else { "graph" }, &after));
    let title = format!("{} ({})", after.graph, provenance::model_file_name(&options.model));
    Ok(super::simulate::html::report(&title, &series))
}

/// A Makefile rule: `target: input input ...` with spaces escaped.
fn depfile(target: &Path, inputs: &[PathBuf]) -> String {
    let escape = |p: &Path| p.display().to_string().replace(' ', "\\ ");
    let deps: Vec<String> = inputs.iter().map(|p| escape(p)).collect();
    format!("{}: {}\n", escape(target), deps.join(" "))
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    emit::output::write_atomically(path, bytes)
}

fn write_outputs(
    options: &CompileOptions,
    graph: &Graph,
    arenas: emit::serialize::Arenas,
    metadata: &[(String, String)],
    report: &CompileReport,
) -> Result<()> {
    emit::serialize::write(&options.output, graph, arenas, metadata)?;
    if let Some(path) = &options.text {
        write(path, emit::text::to_text(graph)?.as_bytes())?;
    }
    if let Some(path) = &options.onnx {
        write(path, &emit::onnx::to_onnx(graph)?.encode_to_vec())?;
    }
    if let Some(path) = &options.report {
        let json = serde_json::to_string_pretty(report).map_err(|e| Error::Usage(e.to_string()))?;
        write(path, json.as_bytes())?;
    }
    Ok(())
}

impl CompileReport {
    /// Adds what one pass reported (`free_knobs`: the TFLMS knobs the
    /// budget search could choose).
    fn fold(&mut self, pass: PassReport, free_knobs: FreeKnobs) {
        match pass {
            PassReport::Import | PassReport::Optimizer => {}
            PassReport::Autodiff(summary) => {
                self.training = TrainSummary {
                    running_variance_from_producer: self.training.running_variance_from_producer,
                    ..summary
                };
            }
            PassReport::Split(splits) => self.splits = splits,
            PassReport::Tflms { outcome: None, .. } | PassReport::Plan(None) => {}
            PassReport::Tflms { outcome: Some((config, swap)), searched } => {
                let count = config.trigger == SwapInTrigger::Count;
                self.n_tensors = config.n_tensors;
                self.lb = count.then_some(config.lb);
                self.trigger = Some(config.trigger);
                self.min_bytes = Some(config.min_bytes);
                let given = [("n_tensors", !free_knobs.n_tensors), ("lb", !free_knobs.lb && count)];
                self.given_knobs = given.iter().filter(|k| k.1).map(|k| k.0.to_string()).collect();
                if searched {
                    let free = FreeKnobs { lb: free_knobs.lb && count, ..free_knobs };
                    self.chosen_knobs = [("n_tensors", free.n_tensors), ("lb", free.lb)]
                        .iter()
                        .filter(|k| k.1)
                        .map(|k| k.0.to_string())
                        .collect();
                }
                self.swapped_tensors = swap.tensors.len();
                self.swapped_bytes = swap.swapped_bytes();
                self.added_ops = swap.ops_added;
                self.swap_ins_without_control = swap.swap_ins_without_control;
                self.swaps = swap.tensors;
            }
            PassReport::PlanSplit(choice) => self.auto_split = choice,
            PassReport::Plan(Some(fitted)) => {
                for d in &fitted.reports {
                    if d.kind == planner::RECOMPUTE {
                        self.recomputed_tensors += 1;
                        self.recomputed_bytes += d.bytes;
                    } else {
                        self.swapped_tensors += 1;
                        self.swapped_bytes += d.bytes;
                    }
                }
                self.added_ops = fitted.patch.added_nodes();
                self.decisions = fitted.reports;
            }
            PassReport::Verify(proven) => self.verified = proven,
        }
    }

    /// The short report for people: what was done, peaks before and after,
    /// host bytes, what was proven.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "training graph  {} ops, {} tensors ({})", self.ops, self.tensors, self.model);
        let setup = Setup {
            batch: self.batch,
            optimizer: self.optimizer.clone(),
            strategy: self.strategy.clone(),
            budget_device_bytes: self.budget_bytes,
            budget_host_bytes: self.host_budget_bytes,
        };
        let _ = writeln!(s, "setup           {}", setup.describe());
        let frozen: Vec<String> =
            self.training.frozen.iter().zip(&self.training.frozen_why).map(|(n, why)| format!("{n} ({why})")).collect();
        let frozen = match frozen.len() {
            0 => String::new(),
            n if n <= 8 => format!("; frozen {n}: {}", frozen.join(", ")),
            n => format!("; frozen {n}: {}, ...", frozen[..8].join(", ")),
        };
        let _ = writeln!(
            s,
            "trained         {} tensors ({} values){frozen}",
            self.training.trained.len(),
            self.training.trained_values
        );
        if let Some(convention) = self.training.running_variance {
            let why =
                if self.training.running_variance_from_producer { ": the model's producer is pytorch" } else { "" };
            let _ = writeln!(s, "batch norm      running variance updated with {}{why}", convention.describe());
        }
        if let Some(fits) = self.fits_without_rewrite {
            let verdict = if fits { "fits" } else { "does not fit" };
            let _ = writeln!(s, "budget          the training graph {verdict} without rewriting");
        }
        if self.strategy == "auto" {
            let _ = writeln!(
                s,
                "auto            {} tensors swapped ({}), {} recomputed ({}), {} ops added",
                self.swapped_tensors,
                format_bytes(self.swapped_bytes),
                self.recomputed_tensors,
                format_bytes(self.recomputed_bytes),
                self.added_ops
            );
        } else if self.strategy != "none" {
            let knobs = match (self.n_tensors, self.lb, self.trigger) {
                (n, lb, Some(_)) => {
                    let chosen = if self.chosen_knobs.is_empty() {
                        let knobs: &[&str] = if lb.is_some() { &["n_tensors", "lb"] } else { &["n_tensors"] };
                        let defaults: Vec<&str> =
                            knobs.iter().copied().filter(|k| !self.given_knobs.iter().any(|g| g == k)).collect();
                        match (self.given_knobs.is_empty(), defaults.is_empty()) {
                            (true, _) => "defaults".to_string(),
                            (false, true) => "given".to_string(),
                            (false, false) => {
                                format!("{} given, {} default", self.given_knobs.join(" and "), defaults.join(" and "))
                            }
                        }
                    } else {
                        format!("{} chosen by the budget search", self.chosen_knobs.join(" and "))
                    };
                    let n = n.map_or_else(|| "all".to_string(), |n| n.to_string());
                    let when = match lb {
                        Some(lb) => format!("lb {lb}"),
                        None => format!("trigger time on {}", self.device_profile),
                    };
                    let small = match self.min_bytes {
                        Some(min) if min > 0 => format!(", min {}", format_bytes(min)),
                        _ => String::new(),
                    };
                    format!(" (n_tensors {n}, {when}{small}; {chosen})")
                }
                _ => String::new(),
            };
            let _ = writeln!(
                s,
                "{}           {} tensors swapped ({}), {} ops added, {} swap-ins triggered by their consumer{knobs}",
                self.strategy,
                self.swapped_tensors,
                format_bytes(self.swapped_bytes),
                self.added_ops,
                self.swap_ins_without_control
            );
        }
        let _ = writeln!(
            s,
            "peak device     {} before, {} after; peak host {}",
            format_bytes(self.peak_device_bytes_before),
            format_bytes(self.peak_device_bytes_after),
            format_bytes(self.peak_host_bytes_after)
        );
        let _ = writeln!(
            s,
            "arena           device {} (+{:.2}% over the peak), host {} (+{:.2}%)",
            format_bytes(self.arena_device_bytes),
            crate::commands::simulate::overhead_percent(self.arena_device_bytes, self.peak_device_bytes_after),
            format_bytes(self.arena_host_bytes),
            crate::commands::simulate::overhead_percent(self.arena_host_bytes, self.peak_host_bytes_after)
        );
        for split in &self.splits {
            let _ = writeln!(
                s,
                "split           {} along {} in {} parts ({}): {} ops in parts, {} tensors split, {} merged",
                split.request.op,
                split.request.dim,
                split.request.parts,
                split.merge,
                split.covered.len(),
                split.splits.len(),
                split.merges.len()
            );
        }
        if let Some(c) = &self.auto_split {
            let r = &c.report;
            let _ = writeln!(
                s,
                "split           batch in {} parts, ops of at least {}: {} ops in parts ({} summed), {} tensors split, {} merged; best of {} splits tried",
                r.split.parts,
                format_bytes(r.split.min_bytes),
                r.ops,
                r.summed,
                r.splits,
                r.merges,
                c.tried
            );
        }
        if let (Some(step), Some(overhead)) = (self.predicted_step_seconds, self.predicted_overhead) {
            let profile = &self.device_profile;
            let _ = writeln!(
                s,
                "predicted step  {} on {profile}, {overhead:.3}x the unrewritten graph with no memory limit",
                crate::commands::simulate::format_seconds(step)
            );
        }
        if let Some(n) = self.verified {
            let _ =
                writeln!(s, "verified        {n} outputs and variable updates proven equal to the training graph's");
        }
        s
    }

    /// Each decision, one line each: the planner's with ΔM, ΔT and why;
    /// TFLMS's with the tensor swapped, its bytes and distance, its swap-ins
    /// and what triggers them.
    pub fn decisions(&self) -> String {
        let mut s = planner::report::to_text(&self.decisions);
        for t in &self.swaps {
            let triggers: Vec<String> = t.swap_ins.iter().map(|i| format!("{} {}", i.node, i.trigger)).collect();
            let _ = writeln!(
                s,
                "  swap {:>12}  {} (distance {}): {}",
                format_bytes(t.bytes),
                t.tensor,
                t.distance,
                triggers.join("; ")
            );
        }
        s
    }
}
