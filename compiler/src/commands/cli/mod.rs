//! The `lms` command line: the commands' flags (clap), one module per
//! command beside the flags they share, and [`main`], which dispatches and
//! maps errors to exit statuses.

/// `print!` through [`process::print`](crate::commands::process::print): a
/// failed write to stdout returns its error (status 2) from the function.
macro_rules! out {
    ($($arg:tt)*) => {
        crate::commands::process::print(&format!($($arg)*))?
    };
}

mod compile;
mod doctor;
mod inspect;
mod max_batch;
mod plan_curve;
mod profile;
mod run;
mod show;
mod simulate;
mod verify;

use crate::frontend::FrontendOptions;
use crate::train::{Loss, Optimizer};
use crate::{exit, flags};
use clap::{Args, Parser, Subcommand};
use std::collections::BTreeMap;
use std::process::ExitCode;

/// lms trains deep-learning models larger than GPU memory: it compiles an ONNX model's training graph,
/// rewrites it to fit a device memory budget (tensors swapped to host memory, recomputed, or split
/// along the batch), proves the rewrite computes the same thing, and runs it on a GPU or the CPU.
#[derive(Parser)]
#[command(name = "lms", version, after_help = EXIT_CODES)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The exit statuses, as `--help` prints them.
const EXIT_CODES: &str = "Exit status:
  0  ok
  1  internal error (a bug in lms)
  2  usage error or bad input: a file, a flag, an output path
  3  does not fit: compile or max-batch over the budget, run out of memory
  4  rewrite not proven equivalent (verify, compile)
  130  run stopped by SIGINT after a step (its outputs written)
Errors are one line on stderr; a failed write to stdout is status 2. A closed stdout (`lms inspect
--ir | head -1`) ends lms quietly by SIGPIPE, as for other Unix tools (status 141 in a shell).";

#[derive(Subcommand)]
enum Command {
    /// What a model holds and how much memory it needs.
    Inspect(inspect::InspectArgs),
    /// Build the training graph of a model and write it as a .lms file.
    Compile(Box<compile::CompileArgs>),
    /// What a .lms file holds: provenance, batch, optimizer, strategy, budgets, arenas, decisions, predicted step.
    Show(show::ShowArgs),
    /// Memory over the schedule of a .lms file, without a GPU.
    Simulate(simulate::SimulateArgs),
    /// Train a .lms graph on synthetic data or an .npz file; report loss, peak memory and speed.
    Run(run::RunArgs),
    /// The largest batch whose training graph fits a device budget (simulated).
    MaxBatch(max_batch::MaxBatchArgs),
    /// Predicted step time against device budget for the planner (auto) and TFLMS.
    PlanCurve(plan_curve::PlanCurveArgs),
    /// Prove that a rewritten .lms graph computes the outputs and variable updates of its original.
    Verify(verify::VerifyArgs),
    /// Measure a backend's kernel rates, swap copies and per-op overhead into a device profile file.
    Profile(profile::ProfileArgs),
    /// Whether this machine can run `--device cuda`: GPU, driver, CUDA libraries, free memory.
    Doctor,
}

/// `--device`: the backend that runs or is measured.
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum DeviceArg {
    Cpu,
    Cuda,
}

/// `--train`: the optimizer of the training graph.
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum OptimizerKind {
    Sgd,
    Momentum,
    Adam,
}

/// `--loss`: the loss on the model's first output.
#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum LossKind {
    /// Softmax cross-entropy on integer labels over the model's class axis.
    SoftmaxXent,
    /// Mean squared error against a float target.
    Mse,
}

/// Options that make a model's shapes concrete.
#[derive(Args)]
pub(crate) struct ShapeArgs {
    /// Leading dimension of every data input (at least 1).
    #[arg(long, value_parser = flags::count)]
    pub(crate) batch: Option<usize>,
    /// Value of a named symbolic dimension, as NAME=N (repeatable).
    #[arg(long = "dim", value_name = "NAME=N", value_parser = flags::dim)]
    pub(crate) dims: Vec<(String, usize)>,
}

impl ShapeArgs {
    pub(crate) fn options(&self) -> FrontendOptions {
        FrontendOptions { batch: self.batch, dims: self.dims.iter().cloned().collect::<BTreeMap<_, _>>() }
    }
}

/// The optimizer `--train` names, with `--lr` and `--momentum` or their defaults.
pub(crate) fn optimizer(kind: OptimizerKind, lr: Option<f32>, momentum: Option<f32>) -> Optimizer {
    match kind {
        OptimizerKind::Sgd => Optimizer::Sgd { lr: lr.unwrap_or(0.01) },
        OptimizerKind::Momentum => Optimizer::Momentum { lr: lr.unwrap_or(0.01), momentum: momentum.unwrap_or(0.9) },
        OptimizerKind::Adam => Optimizer::Adam { lr: lr.unwrap_or(0.001), beta1: 0.9, beta2: 0.999, epsilon: 1e-8 },
    }
}

/// The loss `--loss` names.
pub(crate) fn loss(kind: LossKind) -> Loss {
    match kind {
        LossKind::SoftmaxXent => Loss::SoftmaxCrossEntropy,
        LossKind::Mse => Loss::MeanSquaredError,
    }
}

/// A spinner with `message` on stderr while long work runs; drawn only on a
/// terminal (indicatif hides it when stderr is piped).
pub(crate) fn spinner(message: String) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new_spinner().with_message(message);
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// Runs the `lms` command line: parses the arguments, runs the command, and
/// prints its error as one line with the exit status it maps to.
pub fn main() -> ExitCode {
    crate::commands::process::die_quietly_on_closed_stdout();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version (stdout, status 0), and help for a bare `lms` (status 2).
        Err(e) if !e.use_stderr() || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { exit::USAGE } else { exit::OK });
        }
        Err(e) => {
            eprintln!("lms: error: {}", crate::commands::process::one_line(&e.to_string()));
            return ExitCode::from(exit::USAGE);
        }
    };
    let result = crate::commands::process::internal_on_panic(|| match &cli.command {
        Command::Inspect(args) => inspect::command(args),
        Command::Compile(args) => compile::command(args),
        Command::Show(args) => show::command(args),
        Command::Simulate(args) => simulate::command(args),
        Command::Run(args) => run::command(args),
        Command::MaxBatch(args) => max_batch::command(args),
        Command::PlanCurve(args) => plan_curve::command(args),
        Command::Verify(args) => verify::command(args),
        Command::Profile(args) => profile::command(args),
        Command::Doctor => doctor::command(),
    });
    match result {
        Some(Ok(())) => ExitCode::SUCCESS,
        Some(Err(e)) => {
            eprintln!("lms: error: {}", crate::commands::process::one_line(&e.to_string()));
            ExitCode::from(e.exit_code())
        }
        None => ExitCode::from(exit::INTERNAL),
    }
}
