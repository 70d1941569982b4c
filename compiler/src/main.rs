//! The `lms` command line.

use clap::{Args, Parser, Subcommand};
use lms_compiler::analysis::profile::{DeviceProfile, DEFAULT_PROFILE};
use lms_compiler::commands::compile::{Budget, CompileOptions, Strategy, DEFAULT_HOST_BUDGET_BYTES};
use lms_compiler::commands::inspect::InspectReport;
use lms_compiler::commands::run::{DeviceKind, MemoryLimits, RunPlan, RunReport, SaveOnnx};
use lms_compiler::commands::simulate::SimulateReport;
use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::passes::split::SplitRequest;
use lms_compiler::passes::tflms::{CtrldStrategy, FreeKnobs, SwapInTrigger, TflmsConfig};
use lms_compiler::pipeline::PassOptions;
use lms_compiler::train::{Loss, Optimizer, RunningVariance, TrainOptions};
use lms_compiler::{egraph, emit, exit, flags, Error};
use std::collections::BTreeMap;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `print!` through [`process::print`](lms_compiler::commands::process::print): a
/// failed write to stdout returns its error (status 2) from the function.
macro_rules! out {
    ($($arg:tt)*) => {
        lms_compiler::commands::process::print(&format!($($arg)*))?
    };
}

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
    Inspect(InspectArgs),
    /// Build the training graph of a model and write it as a .lms file.
    Compile(Box<CompileArgs>),
    /// What a .lms file holds: provenance, batch, optimizer, strategy, budgets, arenas, decisions, predicted step.
    Show(ShowArgs),
    /// Memory over the schedule of a .lms file, without a GPU.
    Simulate(SimulateArgs),
    /// Train a .lms graph on synthetic data or an .npz file; report loss, peak memory and speed.
    Run(RunArgs),
    /// The largest batch whose training graph fits a device budget (simulated).
    MaxBatch(MaxBatchArgs),
    /// Predicted step time against device budget for the planner (auto) and TFLMS.
    PlanCurve(PlanCurveArgs),
    /// Prove that a rewritten .lms graph computes the outputs and variable updates of its original.
    Verify(VerifyArgs),
    /// Measure a backend's kernel rates, swap copies and per-op overhead into a device profile file.
    Profile(ProfileArgs),
    /// Whether this machine can run `--device cuda`: GPU, driver, CUDA libraries, free memory.
    Doctor,
}

#[derive(Args)]
struct ProfileArgs {
    /// Backend to measure.
    #[arg(long, value_enum, default_value = "cpu")]
    device: DeviceArg,
    /// The profile file to write (JSON, the format `--device-profile` reads).
    #[arg(short = 'o', long = "output", value_name = "FILE.json")]
    output: PathBuf,
    /// The profile's name (default: the device's, with `-measured`).
    #[arg(long)]
    name: Option<String>,
    /// Small sizes and few steps: seconds instead of under a minute, rough rates.
    #[arg(long)]
    quick: bool,
}

#[derive(Args)]
struct ShowArgs {
    /// The .lms file.
    graph: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct VerifyArgs {
    /// The original .lms graph (e.g. compiled with --strategy none).
    original: PathBuf,
    /// The rewritten .lms graph.
    rewritten: PathBuf,
    /// List every output and update with its verdict, e-graph sizes, times and rules applied.
    #[arg(long)]
    verbose: bool,
}

#[derive(Args)]
struct MaxBatchArgs {
    /// The ONNX model (forward graph).
    model: PathBuf,
    /// Device memory to fit (e.g. 16GiB).
    #[arg(long, value_parser = flags::size)]
    budget: u64,
    /// Host memory for swapped tensors (default 64GiB; 0: auto only recomputes).
    #[arg(long, value_parser = flags::size_or_zero)]
    host_budget: Option<u64>,
    /// Value of a named symbolic dimension, as NAME=N (repeatable).
    #[arg(long = "dim", value_name = "NAME=N", value_parser = flags::dim)]
    dims: Vec<(String, usize)>,
    /// Optimizer of the training graph.
    #[arg(long, value_enum, default_value = "sgd")]
    train: OptimizerKind,
    /// Loss on the model's first output.
    #[arg(long, value_enum, default_value = "softmax-xent")]
    loss: LossKind,
    /// Largest batch to try.
    #[arg(long, default_value_t = 1 << 16, value_parser = flags::count)]
    limit: usize,
    /// Memory strategies searched besides no rewrite: tflms, or auto (tflms and the budget planner).
    #[arg(long, value_enum, default_value = "tflms")]
    strategy: MaxBatchStrategy,
    /// Device profile of the predicted step time: a shipped name (h100-sxm, h100-pcie, h200, a100, cpu) or a file.
    #[arg(long, value_name = "NAME|FILE", default_value = DEFAULT_PROFILE)]
    device_profile: String,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct PlanCurveArgs {
    /// The ONNX model (forward graph).
    model: PathBuf,
    /// Leading dimension of every data input (at least 1).
    #[arg(long, value_parser = flags::count)]
    batch: usize,
    /// Value of a named symbolic dimension, as NAME=N (repeatable).
    #[arg(long = "dim", value_name = "NAME=N", value_parser = flags::dim)]
    dims: Vec<(String, usize)>,
    /// Optimizer of the training graph.
    #[arg(long, value_enum, default_value = "sgd")]
    train: OptimizerKind,
    /// Loss on the model's first output.
    #[arg(long, value_enum, default_value = "softmax-xent")]
    loss: LossKind,
    /// Budgets on the curve, from the smallest the planner reaches to the unrewritten peak (2 to 1000).
    #[arg(long, default_value_t = 8, value_parser = flags::budget_steps)]
    budget_steps: usize,
    /// Host memory for swapped tensors (default 64GiB; 0: auto only recomputes).
    #[arg(long, value_parser = flags::size_or_zero)]
    host_budget: Option<u64>,
    /// Device profile of the time model (a shipped name or a file).
    #[arg(long, value_name = "NAME|FILE", default_value = DEFAULT_PROFILE)]
    device_profile: String,
    /// Also write the curve as JSON to this file.
    #[arg(long, value_name = "FILE.json")]
    json: Option<PathBuf>,
    /// Also write the curve as an SVG chart to this file.
    #[arg(long, value_name = "FILE.svg")]
    svg: Option<PathBuf>,
}

#[derive(Args)]
struct RunArgs {
    /// The .lms file.
    graph: PathBuf,
    /// Backend that executes the graph.
    #[arg(long, value_enum, default_value = "cpu")]
    device: DeviceArg,
    /// Training steps on synthetic data.
    #[arg(long, default_value_t = 10, conflicts_with = "data", value_parser = flags::count)]
    steps: usize,
    /// Train on this .npz file: one array per graph input (and `labels` or `target`), samples along axis 0.
    #[arg(long, value_name = "FILE.npz")]
    data: Option<PathBuf>,
    /// Passes over --data.
    #[arg(long, default_value_t = 1, requires = "data", value_parser = flags::count)]
    epochs: usize,
    /// Start from the variables and optimizer state saved by --save-state.
    #[arg(long, value_name = "STATE.npz")]
    resume: Option<PathBuf>,
    /// After training, save every variable, optimizer slot and the step count as .npz.
    #[arg(long, value_name = "STATE.npz")]
    save_state: Option<PathBuf>,
    /// After training, write the original forward model with the trained weights.
    #[arg(long, value_name = "OUT.onnx")]
    save_onnx: Option<PathBuf>,
    /// The model the graph was compiled from, for --save-onnx (default: the one its metadata names, beside it);
    /// checked against the sha256 the graph records.
    #[arg(long, value_name = "MODEL.onnx", requires = "save_onnx")]
    model: Option<PathBuf>,
    /// Device memory limit (e.g. 16GiB): the run is refused when the plan's
    /// device arena exceeds it; default the plan's device budget, else the
    /// machine's memory.
    #[arg(long, value_parser = flags::size)]
    device_memory: Option<u64>,
    /// Pinned host memory limit, likewise for the host arena (0: a plan
    /// without swaps); default the plan's host budget, else half the
    /// machine's memory.
    #[arg(long, value_parser = flags::size_or_zero)]
    host_memory: Option<u64>,
    /// Seed of initialisation and synthetic data.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Write the last step's per-op timings on the three queues as a Chrome trace.
    #[arg(long, value_name = "FILE.json")]
    trace: Option<PathBuf>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum DeviceArg {
    Cpu,
    Cuda,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum OptimizerKind {
    Sgd,
    Momentum,
    Adam,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum RunningVarianceKind {
    /// Σ(x−mean)²/n, the ONNX operator's definition.
    Biased,
    /// Σ(x−mean)²/(n−1), PyTorch's BatchNorm.
    Unbiased,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LossKind {
    /// Softmax cross-entropy on integer labels over the model's class axis.
    SoftmaxXent,
    /// Mean squared error against a float target.
    Mse,
}

#[derive(Args)]
struct CompileArgs {
    /// The ONNX model (forward graph).
    model: PathBuf,
    #[command(flatten)]
    shapes: ShapeArgs,
    /// Optimizer of the training graph.
    #[arg(long, value_enum, default_value = "sgd")]
    train: OptimizerKind,
    /// Learning rate, finite and above 0 (default 0.01; 0.001 for Adam).
    #[arg(long, value_parser = flags::positive)]
    lr: Option<f32>,
    /// Momentum of the momentum optimizer, in [0, 1) (default 0.9).
    #[arg(long, value_parser = flags::fraction)]
    momentum: Option<f32>,
    /// Loss on the model's first output.
    #[arg(long, value_enum, default_value = "softmax-xent")]
    loss: LossKind,
    /// Train exactly the weights whose names match a glob (repeatable; default: weights in parameter positions).
    #[arg(long, value_name = "GLOB")]
    trainable: Vec<String>,
    /// Do not train the weights whose names match a glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    frozen: Vec<String>,
    /// The batch variance BatchNorm's running variance is updated with (default: unbiased when the model's producer is pytorch, else biased).
    #[arg(long, value_enum)]
    running_variance: Option<RunningVarianceKind>,
    /// Memory rewrite of the training graph.
    #[arg(long, value_enum, default_value = "none")]
    strategy: StrategyKind,
    #[command(flatten)]
    tflms: TflmsArgs,
    /// Device memory to fit (e.g. 16GiB): searches the strategy's knobs (tflms) or plans (auto; required).
    #[arg(long, value_parser = flags::size)]
    budget: Option<u64>,
    /// Host memory the swapped tensors may use with --budget (default 64GiB; 0: auto only recomputes).
    #[arg(long, value_parser = flags::size_or_zero)]
    host_budget: Option<u64>,
    /// Run an op as micro-ops on P parts along a dimension, and the ops after it up to K read edges (repeatable).
    #[arg(long, value_name = "op=NAME,dim=batch|channel|height|width,parts=P[,depth=K]", value_parser = SplitRequest::parse)]
    split: Vec<SplitRequest>,
    /// With --budget: rewrite even when the graph already fits, and write a plan whose arenas are over the budgets (warning on stderr) instead of exit 3.
    #[arg(long)]
    force: bool,
    /// Device profile the plan is made for (time triggers; recorded in the plan): a shipped name or a file.
    #[arg(long, value_name = "NAME|FILE", default_value = DEFAULT_PROFILE)]
    device_profile: String,
    /// The .lms file to write.
    #[arg(short, long)]
    output: PathBuf,
    /// Also write the graph's stable text form to this file.
    #[arg(long, value_name = "FILE")]
    text: Option<PathBuf>,
    /// Also write an ONNX export (lms ops in the custom domain `lms`) to this file.
    #[arg(long, value_name = "FILE")]
    onnx: Option<PathBuf>,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE.json")]
    report: Option<PathBuf>,
    /// Also write the report as one self-contained HTML page (memory before and after, streams, decisions).
    #[arg(long, value_name = "FILE.html")]
    html: Option<PathBuf>,
    /// Also write a Makefile-style depfile (the model and its external data).
    #[arg(long, value_name = "FILE.d")]
    depfile: Option<PathBuf>,
    /// Skip proving the rewritten graph equivalent to the training graph.
    #[arg(long)]
    no_verify: bool,
    /// Write the graph's text form after pass PASS (import, autodiff, optimizer, split, tflms, verify) to FILE.
    #[arg(long, num_args = 2, value_names = ["PASS", "FILE"])]
    dump_after: Vec<String>,
    /// End the pipeline after pass PASS; the .lms file holds the graph at that point.
    #[arg(long, value_name = "PASS")]
    stop_after: Option<String>,
    /// Print nothing on success.
    #[arg(long, short, conflicts_with = "verbose")]
    quiet: bool,
    /// Also list each decision (every swapped or recomputed tensor, its ΔM, ΔT and why, or its swap-ins and triggers).
    #[arg(long, short)]
    verbose: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum MaxBatchStrategy {
    /// TFLMS's budget search.
    Tflms,
    /// TFLMS's budget search and the budget planner.
    Auto,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum StrategyKind {
    /// No memory rewrite.
    None,
    /// TFLMS: swap forward→backward tensors to host memory.
    Tflms,
    /// The budget planner: swap or recompute each tensor, whichever costs less time per byte (needs --budget).
    Auto,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum TriggerArg {
    /// TFLMS's rule: a control op between --lb and --ub ops away.
    Count,
    /// The latest op that still lets the transfer finish before the consumer starts (--device-profile's timeline).
    Time,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum CtrldArg {
    ChainRule,
    DirectOrder,
}

/// The knobs of TFLMS (TFLMS Table 2), named as in the paper.
#[derive(Args)]
struct TflmsArgs {
    /// Swap at most this many tensors, in breadth-first order (default all;
    /// with --budget, chosen by the search).
    #[arg(long, value_parser = flags::count)]
    n_tensors: Option<usize>,
    /// Lower bound of the control-op distance (default 1; with --budget,
    /// chosen by the search).
    #[arg(long)]
    lb: Option<u32>,
    /// Upper bound of the control-op distance.
    #[arg(long, default_value_t = 10000)]
    ub: u32,
    /// How swap-ins' control ops are chosen.
    #[arg(long, value_enum, default_value = "chain-rule")]
    ctrld_strategy: CtrldArg,
    /// Fuse swap-ins of a tensor whose consumers are close.
    #[arg(long)]
    fuse_swapins: bool,
    /// γ distance within which consumers share a swap-in (default: lb).
    #[arg(long)]
    fuse_threshold: Option<u32>,
    /// Also swap long forward edges (branches).
    #[arg(long)]
    swap_branches: bool,
    /// α: forward edges longer than this are swapped with --swap-branches.
    #[arg(long, default_value_t = 0)]
    branch_threshold: u32,
    /// Only swap outputs of these op types (comma-separated).
    #[arg(long, value_delimiter = ',')]
    incl_types: Vec<String>,
    /// Never swap outputs of these op types (comma-separated).
    #[arg(long, value_delimiter = ',')]
    excl_types: Vec<String>,
    /// Only swap outputs of ops in these name scopes (comma-separated).
    #[arg(long, value_delimiter = ',')]
    incl_scopes: Vec<String>,
    /// Never swap outputs of ops in these name scopes (comma-separated).
    #[arg(long, value_delimiter = ',')]
    excl_scopes: Vec<String>,
    /// Start the breadth-first search from the ops in this scope.
    #[arg(long)]
    starting_scope: Option<String>,
    /// Start the breadth-first search from these ops (comma-separated).
    #[arg(long, value_delimiter = ',')]
    starting_op_names: Vec<String>,
    /// What starts each swap-in.
    #[arg(long, value_enum, default_value = "count")]
    trigger: TriggerArg,
    /// Never swap tensors smaller than this (e.g. 1MiB).
    #[arg(long, value_name = "SIZE", value_parser = flags::size)]
    min_bytes: Option<u64>,
}

impl TflmsArgs {
    /// The first knob given a value other than its default, as its flag.
    fn first_given(&self) -> Option<&'static str> {
        let given = [
            (self.n_tensors.is_some(), "--n-tensors"),
            (self.lb.is_some(), "--lb"),
            (self.ub != 10000, "--ub"),
            (!matches!(self.ctrld_strategy, CtrldArg::ChainRule), "--ctrld-strategy"),
            (self.fuse_swapins, "--fuse-swapins"),
            (self.fuse_threshold.is_some(), "--fuse-threshold"),
            (self.swap_branches, "--swap-branches"),
            (self.branch_threshold != 0, "--branch-threshold"),
            (!self.incl_types.is_empty(), "--incl-types"),
            (!self.excl_types.is_empty(), "--excl-types"),
            (!self.incl_scopes.is_empty(), "--incl-scopes"),
            (!self.excl_scopes.is_empty(), "--excl-scopes"),
            (self.starting_scope.is_some(), "--starting-scope"),
            (!self.starting_op_names.is_empty(), "--starting-op-names"),
            (self.trigger != TriggerArg::Count, "--trigger"),
            (self.min_bytes.is_some(), "--min-bytes"),
        ];
        given.into_iter().find_map(|(given, flag)| given.then_some(flag))
    }

    fn config(&self) -> TflmsConfig {
        TflmsConfig {
            n_tensors: self.n_tensors,
            lb: self.lb.unwrap_or(TflmsConfig::default().lb),
            ub: self.ub,
            ctrld_strategy: match self.ctrld_strategy {
                CtrldArg::ChainRule => CtrldStrategy::ChainRule,
                CtrldArg::DirectOrder => CtrldStrategy::DirectOrder,
            },
            fuse_swapins: self.fuse_swapins,
            fuse_threshold: self.fuse_threshold,
            swap_branches: self.swap_branches,
            branch_threshold: self.branch_threshold,
            incl_types: self.incl_types.clone(),
            excl_types: self.excl_types.clone(),
            incl_scopes: self.incl_scopes.clone(),
            excl_scopes: self.excl_scopes.clone(),
            starting_scope: self.starting_scope.clone(),
            starting_op_names: self.starting_op_names.clone(),
            trigger: match self.trigger {
                TriggerArg::Count => SwapInTrigger::Count,
                TriggerArg::Time => SwapInTrigger::Time,
            },
            min_bytes: self.min_bytes.unwrap_or(0),
            ..TflmsConfig::default()
        }
    }
}

#[derive(Args)]
struct SimulateArgs {
    /// The .lms file.
    graph: PathBuf,
    /// Also simulate this .lms file (e.g. the graph before rewriting) and compare.
    #[arg(long, value_name = "ORIGINAL.lms")]
    before: Option<PathBuf>,
    /// Write a picture of memory and the three streams over the step (both graphs) as SVG.
    #[arg(long, value_name = "FILE.svg")]
    svg: Option<PathBuf>,
    /// Write the report as one self-contained HTML page (memory, streams, decisions).
    #[arg(long, value_name = "FILE.html")]
    html: Option<PathBuf>,
    /// Write the predicted timeline of the three streams as a Chrome trace (Perfetto).
    #[arg(long, value_name = "FILE.json")]
    trace: Option<PathBuf>,
    /// Device profile of the time model: a shipped name (h100-sxm, h100-pcie, h200, a100, cpu) or a file
    /// (default: the one the plan was made for, else h100-sxm).
    #[arg(long, value_name = "NAME|FILE")]
    device_profile: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Options that make a model's shapes concrete.
#[derive(Args)]
struct ShapeArgs {
    /// Leading dimension of every data input (at least 1).
    #[arg(long, value_parser = flags::count)]
    batch: Option<usize>,
    /// Value of a named symbolic dimension, as NAME=N (repeatable).
    #[arg(long = "dim", value_name = "NAME=N", value_parser = flags::dim)]
    dims: Vec<(String, usize)>,
}

#[derive(Args)]
struct InspectArgs {
    /// The ONNX model.
    model: PathBuf,
    #[command(flatten)]
    shapes: ShapeArgs,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Also print the graph in lms's stable text form.
    #[arg(long, conflicts_with = "json")]
    ir: bool,
}

impl ShapeArgs {
    fn options(&self) -> FrontendOptions {
        FrontendOptions { batch: self.batch, dims: self.dims.iter().cloned().collect::<BTreeMap<_, _>>() }
    }
}

fn inspect(args: &InspectArgs) -> Result<(), Error> {
    if args.model.extension().is_some_and(|e| e == "lms") {
        // A compiled graph: what `lms show` prints; its shapes are fixed.
        let given =
            [(args.shapes.batch.is_some(), "--batch"), (!args.shapes.dims.is_empty(), "--dim"), (args.ir, "--ir")];
        if let Some((_, flag)) = given.iter().find(|(given, _)| *given) {
            return Err(Error::Usage(format!("{flag} has no effect on a .lms file (its shapes are compiled in)")));
        }
        return show(&ShowArgs { graph: args.model.clone(), json: args.json });
    }
    let model = frontend::load(&args.model, &args.shapes.options())?;
    let report = InspectReport::new(&model).map_err(|e| e.in_file(&args.model))?;
    if args.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| Error::Usage(e.to_string()))?;
        out!("{json}\n");
    } else {
        out!("{}", report.to_text());
        if args.ir {
            out!("\n");
            out!("{}", emit::text::to_text(&model.graph).map_err(|e| Error::from(e).in_file(&args.model))?);
        }
    }
    Ok(())
}

/// Refuses compile flags that have no effect without another flag.
fn check_compile_flags(args: &CompileArgs) -> Result<(), Error> {
    let has_budget = args.budget.is_some();
    flags::needs(args.host_budget.is_some(), "--host-budget", has_budget, "--budget")?;
    flags::needs(args.force, "--force", has_budget, "--budget")?;
    let momentum = matches!(args.train, OptimizerKind::Momentum);
    flags::needs(args.momentum.is_some(), "--momentum", momentum, "--train momentum")?;
    let auto = args.strategy == StrategyKind::Auto;
    if auto && !has_budget {
        return Err(Error::Usage("--strategy auto needs --budget (the device memory to fit, e.g. 16GiB)".into()));
    }
    let tflms = args.strategy == StrategyKind::Tflms;
    if let Some(knob) = args.tflms.first_given() {
        flags::needs(true, knob, tflms, "--strategy tflms")?;
    }
    flags::needs(args.tflms.fuse_threshold.is_some(), "--fuse-threshold", args.tflms.fuse_swapins, "--fuse-swapins")?;
    flags::needs(args.tflms.branch_threshold != 0, "--branch-threshold", args.tflms.swap_branches, "--swap-branches")?;
    let count = args.tflms.trigger == TriggerArg::Count;
    flags::needs(args.tflms.lb.is_some(), "--lb", count, "--trigger count")?;
    flags::needs(args.tflms.ub != 10000, "--ub", count, "--trigger count")?;
    let ctrld = !matches!(args.tflms.ctrld_strategy, CtrldArg::ChainRule);
    flags::needs(ctrld, "--ctrld-strategy", count, "--trigger count")
}

fn compile(args: &CompileArgs) -> Result<(), Error> {
    check_compile_flags(args)?;
    let optimizer = optimizer(args.train, args.lr, args.momentum);
    let loss = loss(args.loss);
    let options = CompileOptions {
        model: args.model.clone(),
        frontend: args.shapes.options(),
        train: TrainOptions {
            loss,
            optimizer,
            trainable: args.trainable.clone(),
            frozen: args.frozen.clone(),
            running_variance: args.running_variance.map(|kind| match kind {
                RunningVarianceKind::Biased => RunningVariance::Biased,
                RunningVarianceKind::Unbiased => RunningVariance::Unbiased,
            }),
        },
        strategy: match args.strategy {
            StrategyKind::None => Strategy::None,
            StrategyKind::Tflms => Strategy::Tflms(args.tflms.config()),
            StrategyKind::Auto => Strategy::Auto,
        },
        budget: args.budget.map(|device_bytes| Budget {
            device_bytes,
            host_bytes: args.host_budget.unwrap_or(DEFAULT_HOST_BUDGET_BYTES),
            force: args.force,
        }),
        free_knobs: FreeKnobs { n_tensors: args.tflms.n_tensors.is_none(), lb: args.tflms.lb.is_none() },
        device_profile: args.device_profile.clone(),
        split: args.split.clone(),
        passes: PassOptions {
            dump_after: match args.dump_after.as_slice() {
                [pass, file] => Some((pass.clone(), PathBuf::from(file))),
                _ => None,
            },
            stop_after: args.stop_after.clone(),
        },
        output: args.output.clone(),
        text: args.text.clone(),
        onnx: args.onnx.clone(),
        report: args.report.clone(),
        html: args.html.clone(),
        depfile: args.depfile.clone(),
        verify: !args.no_verify,
    };
    let started = std::time::Instant::now();
    let spinner = (!args.quiet).then(|| spinner(format!("compiling {}", args.model.display())));
    let report = lms_compiler::commands::compile::compile(&options);
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    let report = report?;
    for warning in &report.training.warnings {
        eprintln!("lms: warning: {}", lms_compiler::commands::process::one_line(warning));
    }
    if let Some(over) = &report.written_over_budget {
        eprintln!(
            "lms: warning: --force: wrote a plan over its budget: {}",
            lms_compiler::commands::process::one_line(over)
        );
    }
    if !args.quiet {
        out!("{}", report.summary());
        if args.verbose {
            out!("{}", report.decisions());
        }
        out!("wrote           {} in {:.2} s\n", args.output.display(), started.elapsed().as_secs_f64());
    }
    Ok(())
}

fn show(args: &ShowArgs) -> Result<(), Error> {
    let report = lms_compiler::commands::show::ShowReport::read(&args.graph)?;
    if args.json {
        out!("{}\n", serde_json::to_string_pretty(&report).map_err(|e| Error::Usage(e.to_string()))?);
    } else {
        out!("{}", report.to_text());
    }
    Ok(())
}

fn simulate(args: &SimulateArgs) -> Result<(), Error> {
    let mut inputs = vec![("graph", args.graph.as_path())];
    inputs.extend(args.before.as_deref().map(|b| ("--before graph", b)));
    inputs.extend(args.device_profile.as_deref().and_then(DeviceProfile::file).map(|p| ("--device-profile", p)));
    let mut outputs = Vec::new();
    outputs.extend(args.svg.as_deref().map(|p| ("--svg", p)));
    outputs.extend(args.html.as_deref().map(|p| ("--html", p)));
    outputs.extend(args.trace.as_deref().map(|p| ("--trace", p)));
    emit::output::check_distinct(&inputs, &outputs)?;
    let (graph, schedule) = emit::serialize::read(&args.graph)?;
    let device = match &args.device_profile {
        Some(name) => DeviceProfile::load(name)?,
        None => DeviceProfile::of_plan(&graph.plan).map_err(|e| {
            Error::Hinted { source: Box::new(e), hint: "give --device-profile".into() }.in_file(&args.graph)
        })?,
    };
    let after = SimulateReport::new(&graph, &schedule, &device);
    // The graph before the rewrite: the same model, compiled at the same batch.
    let before = match &args.before {
        Some(path) => {
            let (original, schedule) = emit::serialize::read(path)?;
            if let Some(difference) = original.input_difference(&graph, ["--before", "the graph"]) {
                let why = format!("--before is not this graph before a rewrite: {difference}");
                return Err(Error::Usage(why).in_file(path));
            }
            Some(SimulateReport::new(&original, &schedule, &device))
        }
        None => None,
    };
    let mut series = Vec::new();
    if let Some(b) = &before {
        series.push(("before", b));
    }
    series.push((if before.is_some() { "after" } else { "graph" }, &after));
    if let Some(path) = &args.svg {
        emit::output::write_atomically(
            path,
            lms_compiler::commands::simulate::svg::memory_and_streams(&series).as_bytes(),
        )?;
    }
    if let Some(path) = &args.html {
        let title = format!("{} ({})", after.graph, lms_compiler::commands::provenance::model_file_name(&args.graph));
        emit::output::write_atomically(
            path,
            lms_compiler::commands::simulate::html::report(&title, &series).as_bytes(),
        )?;
    }
    if let Some(path) = &args.trace {
        let json = lms_proto::trace::to_chrome_json(&after.graph, &after.trace);
        emit::output::write_atomically(path, json.as_bytes())?;
    }
    if args.json {
        let json = match &before {
            Some(b) => serde_json::json!({ "before": b, "after": after }),
            None => serde_json::to_value(&after).map_err(|e| Error::Usage(e.to_string()))?,
        };
        out!("{}\n", serde_json::to_string_pretty(&json).map_err(|e| Error::Usage(e.to_string()))?);
    } else {
        if let Some(b) = &before {
            out!("before\n");
            out!("{}", b.to_text());
            out!("after\n");
        }
        out!("{}", after.to_text());
    }
    Ok(())
}

fn profile(args: &ProfileArgs) -> Result<(), Error> {
    let (device, word) = match args.device {
        DeviceArg::Cpu => (DeviceKind::Cpu, "cpu"),
        DeviceArg::Cuda => (DeviceKind::Cuda, "cuda"),
    };
    let name = args.name.clone().unwrap_or_else(|| format!("{word}-measured"));
    let options = lms_compiler::commands::profile::ProfileOptions { quick: args.quick };
    let profile = lms_compiler::commands::profile::measure(device, &name, options)?;
    let json = serde_json::to_string_pretty(&profile).map_err(|e| Error::Usage(e.to_string()))?;
    emit::output::write_atomically(&args.output, format!("{json}\n").as_bytes())?;
    out!(
        "wrote {}: per-op overhead {:.2} us, swap copies {:.2} GB/s to host and {:.2} GB/s to device\n",
        args.output.display(),
        profile.launch_seconds * 1e6,
        profile.device_to_host_bytes_per_second / 1e9,
        profile.host_to_device_bytes_per_second / 1e9
    );
    Ok(())
}

fn run(args: &RunArgs) -> Result<(), Error> {
    let limits = MemoryLimits { device_bytes: args.device_memory, host_bytes: args.host_memory };
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
    };
    lms_compiler::commands::process::stop_on_interrupt();
    // A progress bar on a terminal's stderr; with text, each step's line on
    // stdout as it completes (the bar cleared around it), else one JSON
    // document at the end.
    let bar = indicatif::ProgressBar::new(args.steps as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} steps, loss {msg}").expect("valid template"),
    );
    let report =
        lms_compiler::commands::run::run(&args.graph, device, &plan, limits, args.seed, |total, number, step| {
            bar.set_length(total as u64);
            bar.set_message(step.loss.map_or_else(String::new, |l| format!("{l:.4}")));
            bar.inc(1);
            if !args.json {
                bar.suspend(|| lms_compiler::commands::process::print(&RunReport::step_line(number, step)))?;
            }
            Ok(if lms_compiler::commands::process::interrupted() {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            })
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

fn optimizer(kind: OptimizerKind, lr: Option<f32>, momentum: Option<f32>) -> Optimizer {
    match kind {
        OptimizerKind::Sgd => Optimizer::Sgd { lr: lr.unwrap_or(0.01) },
        OptimizerKind::Momentum => Optimizer::Momentum { lr: lr.unwrap_or(0.01), momentum: momentum.unwrap_or(0.9) },
        OptimizerKind::Adam => Optimizer::Adam { lr: lr.unwrap_or(0.001), beta1: 0.9, beta2: 0.999, epsilon: 1e-8 },
    }
}

fn loss(kind: LossKind) -> Loss {
    match kind {
        LossKind::SoftmaxXent => Loss::SoftmaxCrossEntropy,
        LossKind::Mse => Loss::MeanSquaredError,
    }
}

/// A spinner with `message` on stderr while long work runs; drawn only on a
/// terminal (indicatif hides it when stderr is piped).
fn spinner(message: String) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new_spinner().with_message(message);
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

fn max_batch(args: &MaxBatchArgs) -> Result<(), Error> {
    use lms_compiler::commands::max_batch::{MaxBatch, Rewrite};
    let frontend = FrontendOptions { batch: None, dims: args.dims.iter().cloned().collect() };
    let train =
        TrainOptions { loss: loss(args.loss), optimizer: optimizer(args.train, None, None), ..TrainOptions::default() };
    let host = args.host_budget.unwrap_or(DEFAULT_HOST_BUDGET_BYTES);
    let profile = DeviceProfile::load(&args.device_profile)?;
    let default_knobs = TflmsConfig::default();
    let mut searches =
        vec![("none", "without rewriting", Rewrite::None), ("tflms", "with tflms", Rewrite::Tflms(&default_knobs))];
    if args.strategy == MaxBatchStrategy::Auto {
        searches.push(("auto", "with auto", Rewrite::Auto));
    }
    let progress = spinner(String::new());
    let mut results: Vec<(&str, MaxBatch)> = Vec::new();
    for (key, label, rewrite) in searches {
        progress.set_message(format!("largest batch {label}"));
        let mut on_probe = |batch, fits| {
            progress.set_message(format!(
                "largest batch {label}: batch {batch} {}",
                if fits { "fits" } else { "does not fit" }
            ))
        };
        let found = lms_compiler::commands::max_batch::max_batch(
            &args.model,
            &frontend,
            &train,
            rewrite,
            args.budget,
            host,
            args.limit,
            &profile,
            &mut on_probe,
        );
        match found {
            Ok(r) => results.push((key, r)),
            Err(e) => {
                progress.finish_and_clear();
                return Err(e);
            }
        }
    }
    progress.finish_and_clear();
    let optimizer = lms_compiler::commands::setup::describe_optimizer(&train.optimizer);
    if args.json {
        let mut json = serde_json::json!({ "budget_bytes": args.budget, "host_budget_bytes": host,
            "device_profile": args.device_profile, "optimizer": optimizer, "limit": args.limit });
        for (key, r) in &results {
            json[*key] = serde_json::to_value(r).map_err(|e| Error::Usage(e.to_string()))?;
        }
        out!("{}\n", serde_json::to_string_pretty(&json).map_err(|e| Error::Usage(e.to_string()))?);
    } else {
        out!(
            "{:<12} {optimizer}, budget {} device and {} host, batch searched from 1 to {}\n",
            "setup",
            lms_compiler::units::format_bytes(args.budget),
            lms_compiler::units::format_bytes(host),
            args.limit
        );
        for (key, r) in &results {
            let name = if *key == "none" { "no rewrite" } else { key };
            let bound = if r.at_limit { ">=" } else { "" };
            match r.batch {
                Some(b) => out!(
                    "{name:<12} max batch {bound:>2}{b:>6}  (peak device {}, host {}; step {} on {}){}\n",
                    lms_compiler::units::format_bytes(r.peak_device_bytes),
                    lms_compiler::units::format_bytes(r.peak_host_bytes),
                    lms_compiler::commands::simulate::format_seconds(r.predicted_step_seconds),
                    profile.name,
                    if r.at_limit { "; stopped at --limit, raise it to search further" } else { "" }
                ),
                None => out!("{name:<12} batch 1 does not fit\n"),
            }
        }
    }
    if results.iter().all(|(_, r)| r.batch.is_none()) {
        return Err(Error::NoBatchFits(args.budget).in_file(&args.model));
    }
    Ok(())
}

fn plan_curve(args: &PlanCurveArgs) -> Result<(), Error> {
    let proto = frontend::read_model(&args.model).map_err(|e| e.in_file(&args.model))?;
    let base_dir = args.model.parent().unwrap_or(Path::new("."));
    let external = frontend::external_files(&proto, base_dir);
    let mut inputs = vec![("model", args.model.as_path())];
    inputs.extend(external.iter().map(|p| ("model's external data", p.as_path())));
    inputs.extend(DeviceProfile::file(&args.device_profile).map(|p| ("--device-profile", p)));
    let mut outputs = Vec::new();
    outputs.extend(args.json.as_deref().map(|p| ("--json", p)));
    outputs.extend(args.svg.as_deref().map(|p| ("--svg", p)));
    emit::output::check_distinct(&inputs, &outputs)?;
    let device = DeviceProfile::load(&args.device_profile)?;
    let frontend = FrontendOptions { batch: Some(args.batch), dims: args.dims.iter().cloned().collect() };
    let train =
        TrainOptions { loss: loss(args.loss), optimizer: optimizer(args.train, None, None), ..TrainOptions::default() };
    let progress = spinner(format!("planning {} at {} budgets", args.model.display(), args.budget_steps));
    let curve = frontend::import(&proto, Some(base_dir), &frontend)
        .and_then(|model| lms_compiler::train::build(&model.graph, &train))
        .and_then(|graph| {
            let host = args.host_budget.unwrap_or(DEFAULT_HOST_BUDGET_BYTES);
            lms_compiler::commands::plan_curve::plan_curve(&graph, &device, host, args.budget_steps)
        })
        .map_err(|e| e.in_file(&args.model));
    progress.finish_and_clear();
    let curve = curve?;
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&curve).map_err(|e| Error::Usage(e.to_string()))?;
        emit::output::write_atomically(path, json.as_bytes())?;
    }
    if let Some(path) = &args.svg {
        emit::output::write_atomically(path, curve.svg().as_bytes())?;
    }
    out!("{}", curve.to_text());
    Ok(())
}

fn verify(args: &VerifyArgs) -> Result<(), Error> {
    let (original, _) = emit::serialize::read(&args.original)?;
    let (rewritten, _) = emit::serialize::read(&args.rewritten)?;
    let in_rewritten = |e: Error| e.in_file(&args.rewritten);
    let progress = spinner(format!("proving {} equivalent", args.rewritten.display()));
    let report = egraph::check(&original, &rewritten, &egraph::Limits::default());
    progress.finish_and_clear();
    let report = report.map_err(in_rewritten)?;
    out!("{}", report.to_text(args.verbose));
    report.require_proven().map_err(in_rewritten)?;
    Ok(())
}

fn main() -> ExitCode {
    lms_compiler::commands::process::die_quietly_on_closed_stdout();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // Help and version (stdout, status 0), and help for a bare `lms` (status 2).
        Err(e) if !e.use_stderr() || e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { exit::USAGE } else { exit::OK });
        }
        Err(e) => {
            eprintln!("lms: error: {}", lms_compiler::commands::process::one_line(&e.to_string()));
            return ExitCode::from(exit::USAGE);
        }
    };
    let result = lms_compiler::commands::process::internal_on_panic(|| match &cli.command {
        Command::Inspect(args) => inspect(args),
        Command::Compile(args) => compile(args),
        Command::Show(args) => show(args),
        Command::Simulate(args) => simulate(args),
        Command::Run(args) => run(args),
        Command::MaxBatch(args) => max_batch(args),
        Command::PlanCurve(args) => plan_curve(args),
        Command::Verify(args) => verify(args),
        Command::Profile(args) => profile(args),
        Command::Doctor => {
            let diagnosis = lms_runtime::backend::cuda::doctor();
            out!("{}", diagnosis.facts);
            diagnosis.problem.map_or(Ok(()), |problem| Err(Error::Usage(problem)))
        }
    });
    match result {
        Some(Ok(())) => ExitCode::SUCCESS,
        Some(Err(e)) => {
            eprintln!("lms: error: {}", lms_compiler::commands::process::one_line(&e.to_string()));
            ExitCode::from(e.exit_code())
        }
        None => ExitCode::from(exit::INTERNAL),
    }
}
