//! `lms run`: its flags, the progress shown, and the report printed.

use super::DeviceArg;
use crate::budget::Limits;
use crate::commands::run::{DeviceKind, RunPlan, RunReport, SaveOnnx};
use crate::{flags, Error};
use clap::Args;
use std::ops::ControlFlow;
use std::path::PathBuf;

#[derive(Args)]
pub(crate) struct RunArgs {
    /// The .lms file.
    pub(crate) graph: PathBuf,
    /// Backend that executes the graph.
    #[arg(long, value_enum, default_value = "cpu")]
    pub(crate) device: DeviceArg,
    /// Training steps on synthetic data.
    #[arg(long, default_value_t = 10, conflicts_with = "data", value_parser = flags::count)]
    pub(crate) steps: usize,
    /// Train on this .npz file: one array per graph input (and `labels` or `target`), samples along axis 0.
    #[arg(long, value_name = "FILE.npz")]
    pub(crate) data: Option<PathBuf>,
    /// Passes over --data.
    #[arg(long, default_value_t = 1, requires = "data", value_parser = flags::count)]
    pub(crate) epochs: usize,
    /// Start from the variables and optimizer state saved by --save-state.
    #[arg(long, value_name = "STATE.npz")]
    pub(crate) resume: Option<PathBuf>,
    /// After training, save every variable, optimizer slot and the step count as .npz.
    #[arg(long, value_name = "STATE.npz")]
    pub(crate) save_state: Option<PathBuf>,
    /// After training, write the original forward model with the trained weights.
    #[arg(long, value_name = "OUT.onnx")]
    pub(crate) save_onnx: Option<PathBuf>,
    /// The model the graph was compiled from, for --save-onnx (default: the one its metadata names, beside it);
    /// checked against the sha256 the graph records.
    #[arg(long, value_name = "MODEL.onnx", requires = "save_onnx")]
    pub(crate) model: Option<PathBuf>,
    /// Device memory limit (e.g. 16GiB): the run is refused when the plan's
    /// device arena exceeds it; default the plan's device budget, else the
    /// machine's memory.
    #[arg(long, value_parser = flags::size)]
    pub(crate) device_memory: Option<u64>,
    /// Pinned host memory limit, likewise for the host arena (0: a plan
    /// without swaps); default the plan's host budget, else half the
    /// machine's memory.
    #[arg(long, value_parser = flags::size_or_zero)]
    pub(crate) host_memory: Option<u64>,
    /// Seed of initialisation and synthetic data.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Write the last step's per-op timings on the three queues as a Chrome trace.
    #[arg(long, value_name = "FILE.json")]
    pub(crate) trace: Option<PathBuf>,
    /// Write each node's median wall and CPU time over the steps after the first beside the
    /// time model's prediction (the plan's device profile), per node and per op type, as JSON.
    #[arg(long, value_name = "FILE.json")]
    pub(crate) profile_ops: Option<PathBuf>,
}

/// Runs `lms run`.
pub(crate) fn command(args: &RunArgs) -> Result<(), Error> {
    let limits = Limits { device: args.device_memory, host: args.host_memory };
    let device = match args.device {
        DeviceArg::Cpu => DeviceKind::Cpu,
        DeviceArg::Cuda => DeviceKind::Cuda,
    };
    let plan = RunPlan {
        steps: args.steps,
        data: args.data.clone(),
        epochs: args.epochs,
        resume: args.resume.clone(),
        save_state: args.save_state.clone(),
        save_onnx: args.save_onnx.clone().map(|output| SaveOnnx { output, model: args.model.clone() }),
        trace: args.trace.clone(),
        profile_ops: args.profile_ops.clone(),
    };
    crate::commands::process::stop_on_interrupt();
    // A progress bar on a terminal's stderr; with text, each step's line on
    // stdout as it completes (the bar cleared around it), else one JSON
    // document at the end.
    let bar = indicatif::ProgressBar::new(args.steps as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} steps, loss {msg}").expect("valid template"),
    );
    let report = crate::commands::run::run(&args.graph, device, &plan, limits, args.seed, |total, number, step| {
        bar.set_length(total as u64);
        bar.set_message(step.loss.map_or_else(String::new, |l| format!("{l:.4}")));
        bar.inc(1);
        if !args.json {
            bar.suspend(|| crate::commands::process::print(&RunReport::step_line(number, step)))?;
        }
        Ok(if crate::commands::process::interrupted() { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
    });
    bar.finish_and_clear();
    let report = report?;
    if args.json {
        out!("{}\n", serde_json::to_string_pretty(&report).map_err(|e| Error::Usage(e.to_string()))?);
    } else {
        out!("{}", report.summary());
    }
    if report.interrupted {
        return Err(Error::Interrupted { done: report.step_seconds.len(), total: report.planned_steps });
    }
    Ok(())
}
