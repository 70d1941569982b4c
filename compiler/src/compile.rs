//! `lms compile` as a library call (for the CLI and for `build.rs`): ONNX
//! model → training graph → optional memory rewrite → `.lms` file, text form,
//! ONNX export and report. Every output is written through a temporary file
//! and a rename, and the same options always give the same bytes.

use crate::analysis::{memory, order};
use crate::emit;
use crate::error::{Error, Result};
use crate::frontend::{self, FrontendOptions};
use crate::ir::Graph;
use crate::passes::tflms::{self, SwappedTensor, TflmsConfig};
use crate::train::{self, TrainOptions, TrainSummary};
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
}

/// A memory budget to fit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget {
    pub device_bytes: u64,
    pub host_bytes: u64,
    /// Rewrite even when the graph already fits.
    pub force: bool,
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
    /// The `.lms` file to write.
    pub output: PathBuf,
    /// Also write the stable text form here.
    pub text: Option<PathBuf>,
    /// Also write an ONNX export here.
    pub onnx: Option<PathBuf>,
    /// Also write the report as JSON here.
    pub report: Option<PathBuf>,
    /// Also write a Makefile-style depfile here: the `.lms` file depends on
    /// the model and its external data files.
    pub depfile: Option<PathBuf>,
    /// Prove a rewritten graph equivalent to the training graph (egg) before
    /// writing it.
    pub verify: bool,
}

/// What `lms compile` did.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CompileReport {
    pub model: String,
    pub strategy: String,
    pub ops: usize,
    pub tensors: usize,
    /// With a budget: whether the training graph fit before any rewrite.
    pub fits_without_rewrite: Option<bool>,
    pub budget_bytes: Option<u64>,
    /// Knobs chosen in budget mode.
    pub n_tensors: Option<usize>,
    pub lb: Option<u32>,
    pub swapped_tensors: usize,
    pub swapped_bytes: u64,
    pub added_ops: usize,
    pub swap_ins_without_control: usize,
    pub peak_device_bytes_before: u64,
    pub peak_device_bytes_after: u64,
    pub peak_host_bytes_after: u64,
    /// With a rewrite that was verified: the outputs and variable updates
    /// proven equal to the training graph's.
    pub verified: Option<usize>,
    /// Each swapped tensor: bytes, distance, swap ops and their control ops.
    pub swaps: Vec<SwappedTensor>,
    /// The trained and frozen tensors, and warnings about the model.
    pub training: TrainSummary,
}

/// Compiles a model and writes every requested output.
pub fn compile(options: &CompileOptions) -> Result<CompileReport> {
    let in_model = |e: Error| e.in_file(&options.model);
    let proto = frontend::read_model(&options.model).map_err(in_model)?;
    let base_dir = options.model.parent().unwrap_or(Path::new("."));
    let model = frontend::import(&proto, Some(base_dir), &options.frontend).map_err(in_model)?;
    let summary = train::summary(&model.graph, &options.train).map_err(in_model)?;
    let training = train::build(&model.graph, &options.train).map_err(in_model)?;
    let peak_before = device_peak(&training)?;
    let mut report = CompileReport {
        model: options.model.display().to_string(),
        strategy: "none".into(),
        ops: 0,
        tensors: 0,
        fits_without_rewrite: options.budget.map(|b| peak_before <= b.device_bytes),
        budget_bytes: options.budget.map(|b| b.device_bytes),
        n_tensors: None,
        lb: None,
        swapped_tensors: 0,
        swapped_bytes: 0,
        added_ops: 0,
        swap_ins_without_control: 0,
        peak_device_bytes_before: peak_before,
        peak_device_bytes_after: peak_before,
        peak_host_bytes_after: 0,
        verified: None,
        swaps: vec![],
        training: summary,
    };
    let graph = match (&options.strategy, options.budget) {
        (Strategy::None, None) => training,
        (Strategy::None, Some(_)) => {
            return Err(Error::Usage("--budget needs a memory strategy (--strategy tflms)".into()))
        }
        (Strategy::Tflms(config), budget) => {
            report.strategy = "tflms".into();
            let (graph, swap) = match budget {
                Some(b) if !b.force || peak_before > b.device_bytes => {
                    let fit = tflms::fit(&training, config, b.device_bytes, b.host_bytes).map_err(in_model)?;
                    match fit.plan {
                        Some(plan) => {
                            report.n_tensors = plan.config.n_tensors;
                            report.lb = Some(plan.config.lb);
                            (fit.graph, Some(plan.report))
                        }
                        None => (fit.graph, None),
                    }
                }
                _ => {
                    let (graph, swap) = tflms::rewrite(&training, config).map_err(in_model)?;
                    (graph, Some(swap))
                }
            };
            if options.verify {
                let proof =
                    crate::egraph::verify(&training, &graph, &crate::egraph::Limits::default()).map_err(in_model)?;
                report.verified = Some(proof.proven());
            }
            if let Some(swap) = swap {
                report.swapped_tensors = swap.tensors.len();
                report.swapped_bytes = swap.swapped_bytes();
                report.added_ops = swap.ops_added;
                report.swap_ins_without_control = swap.swap_ins_without_control;
                report.swaps = swap.tensors;
            }
            graph
        }
    };
    let schedule = order::schedule(&graph)?;
    let profile = memory::simulate(&graph, &schedule);
    report.peak_device_bytes_after = profile.peak_bytes;
    report.peak_host_bytes_after = profile.host_peak_bytes;
    report.ops = graph.node_ids().filter(|&id| !graph.node(id).parameterized).count();
    report.tensors = graph.tensor_count();
    write_outputs(options, &graph, &schedule, &report)?;
    if let Some(path) = &options.depfile {
        let mut inputs = vec![options.model.clone()];
        inputs.extend(frontend::external_files(&proto, base_dir));
        write(path, depfile(&options.output, &inputs).as_bytes())?;
    }
    Ok(report)
}

/// A Makefile rule: `target: input input ...` with spaces escaped.
fn depfile(target: &Path, inputs: &[PathBuf]) -> String {
    let escape = |p: &Path| p.display().to_string().replace(' ', "\\ ");
    let deps: Vec<String> = inputs.iter().map(|p| escape(p)).collect();
    format!("{}: {}\n", escape(target), deps.join(" "))
}

fn device_peak(g: &Graph) -> Result<u64> {
    Ok(memory::simulate(g, &order::schedule(g)?).peak_bytes)
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    emit::serialize::write_atomically(path, bytes).map_err(|e| Error::from(e).in_file(path))
}

fn write_outputs(
    options: &CompileOptions,
    graph: &Graph,
    schedule: &[crate::ir::NodeId],
    report: &CompileReport,
) -> Result<()> {
    let metadata = vec![
        ("source".to_string(), options.model.display().to_string()),
        ("batch".to_string(), options.frontend.batch.map_or_else(|| "model".to_string(), |b| b.to_string())),
        ("optimizer".to_string(), format!("{:?}", options.train.optimizer)),
        ("loss".to_string(), format!("{:?}", options.train.loss)),
        ("strategy".to_string(), report.strategy.clone()),
    ];
    emit::serialize::write(&options.output, graph, Some(schedule), &metadata)?;
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
    /// The report for people.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "training graph  {} ops, {} tensors ({})", self.ops, self.tensors, self.model);
        let frozen = match self.training.frozen.len() {
            0 => String::new(),
            n if n <= 8 => format!("; frozen {n}: {}", self.training.frozen.join(", ")),
            n => format!("; frozen {n}: {}, ...", self.training.frozen[..8].join(", ")),
        };
        let _ = writeln!(
            s,
            "trained         {} tensors ({} values){frozen}",
            self.training.trained.len(),
            self.training.trained_values
        );
        if let (Some(fits), Some(budget)) = (self.fits_without_rewrite, self.budget_bytes) {
            let verdict = if fits { "fits" } else { "does not fit" };
            let _ = writeln!(
                s,
                "budget          {} device: the training graph {verdict} without rewriting",
                format_bytes(budget)
            );
        }
        if self.strategy != "none" {
            let knobs = match (self.n_tensors, self.lb) {
                (n, Some(lb)) => {
                    format!(" (chosen: n_tensors {}, lb {lb})", n.map_or_else(|| "all".to_string(), |n| n.to_string()))
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
        if let Some(n) = self.verified {
            let _ =
                writeln!(s, "verified        {n} outputs and variable updates proven equal to the training graph's");
        }
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
