//! `lms compile`: its flags, their rules, and the summary printed.

use super::{loss, optimizer, spinner, LossKind, OptimizerKind, ShapeArgs};
use crate::analysis::profile::DEFAULT_PROFILE;
use crate::budget::Budget;
use crate::commands::compile::{CompileOptions, Strategy};
use crate::passes::split::SplitRequest;
use crate::passes::tflms::{CtrldStrategy, FreeKnobs, SwapInTrigger, TflmsConfig};
use crate::pipeline::PassOptions;
use crate::train::{RunningVariance, TrainOptions};
use crate::{flags, Error};
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub(crate) struct CompileArgs {
    /// The ONNX model (forward graph).
    pub(crate) model: PathBuf,
    #[command(flatten)]
    pub(crate) shapes: ShapeArgs,
    /// Optimizer of the training graph.
    #[arg(long, value_enum, default_value = "sgd")]
    pub(crate) train: OptimizerKind,
    /// Learning rate, finite and above 0 (default 0.01; 0.001 for Adam).
    #[arg(long, value_parser = flags::positive)]
    pub(crate) lr: Option<f32>,
    /// Momentum of the momentum optimizer, in [0, 1) (default 0.9).
    #[arg(long, value_parser = flags::fraction)]
    pub(crate) momentum: Option<f32>,
    /// Loss on the model's first output.
    #[arg(long, value_enum, default_value = "softmax-xent")]
    pub(crate) loss: LossKind,
    /// Train exactly the weights whose names match a glob (repeatable; default: weights in parameter positions).
    #[arg(long, value_name = "GLOB")]
    pub(crate) trainable: Vec<String>,
    /// Do not train the weights whose names match a glob (repeatable).
    #[arg(long, value_name = "GLOB")]
    pub(crate) frozen: Vec<String>,
    /// The batch variance BatchNorm's running variance is updated with (default: unbiased when the model's producer is pytorch, else biased).
    #[arg(long, value_enum)]
    pub(crate) running_variance: Option<RunningVarianceKind>,
    /// Memory rewrite of the training graph.
    #[arg(long, value_enum, default_value = "none")]
    pub(crate) strategy: StrategyKind,
    #[command(flatten)]
    pub(crate) tflms: TflmsArgs,
    /// Device memory to fit (e.g. 16GiB): searches the strategy's knobs (tflms) or plans (auto; required).
    #[arg(long, value_parser = flags::size)]
    pub(crate) budget: Option<u64>,
    /// Host memory the swapped tensors may use with --budget (default 64GiB; 0: auto only recomputes).
    #[arg(long, value_parser = flags::size_or_zero)]
    pub(crate) host_budget: Option<u64>,
    /// Run an op as micro-ops on P parts along a dimension, and the ops after it up to K read edges (repeatable).
    #[arg(long, value_name = "op=NAME,dim=batch|channel|height|width,parts=P[,depth=K]", value_parser = SplitRequest::parse)]
    pub(crate) split: Vec<SplitRequest>,
    /// With --budget: rewrite even when the graph already fits, and write a plan whose arenas are over the budgets (warning on stderr) instead of exit 3.
    #[arg(long)]
    pub(crate) force: bool,
    /// Device profile the plan is made for (time triggers; recorded in the plan): a shipped name or a file.
    #[arg(long, value_name = "NAME|FILE", default_value = DEFAULT_PROFILE)]
    pub(crate) device_profile: String,
    /// The .lms file to write.
    #[arg(short, long)]
    pub(crate) output: PathBuf,
    /// Also write the graph's stable text form to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) text: Option<PathBuf>,
    /// Also write an ONNX export (lms ops in the custom domain `lms`) to this file.
    #[arg(long, value_name = "FILE")]
    pub(crate) onnx: Option<PathBuf>,
    /// Also write the report as JSON to this file.
    #[arg(long, value_name = "FILE.json")]
    pub(crate) report: Option<PathBuf>,
    /// Also write the report as one self-contained HTML page (memory before and after, streams, decisions).
    #[arg(long, value_name = "FILE.html")]
    pub(crate) html: Option<PathBuf>,
    /// Also write a Makefile-style depfile (the model and its external data).
    #[arg(long, value_name = "FILE.d")]
    pub(crate) depfile: Option<PathBuf>,
    /// Skip proving the rewritten graph equivalent to the training graph.
    #[arg(long)]
    pub(crate) no_verify: bool,
    /// Write the graph's text form after pass PASS (import, autodiff, optimizer, split, tflms, verify) to FILE.
    #[arg(long, num_args = 2, value_names = ["PASS", "FILE"])]
    pub(crate) dump_after: Vec<String>,
    /// End the pipeline after pass PASS; the .lms file holds the graph at that point.
    #[arg(long, value_name = "PASS")]
    pub(crate) stop_after: Option<String>,
    /// Print nothing on success.
    #[arg(long, short, conflicts_with = "verbose")]
    pub(crate) quiet: bool,
    /// Also list each decision (every swapped or recomputed tensor, its ΔM, ΔT and why, or its swap-ins and triggers).
    #[arg(long, short)]
    pub(crate) verbose: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum RunningVarianceKind {
    /// Σ(x−mean)²/n, the ONNX operator's definition.
    Biased,
    /// Σ(x−mean)²/(n−1), PyTorch's BatchNorm.
    Unbiased,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum StrategyKind {
    /// No memory rewrite.
    None,
    /// TFLMS: swap forward→backward tensors to host memory.
    Tflms,
    /// The budget planner: swap or recompute each tensor, whichever costs less time per byte (needs --budget).
    Auto,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum TriggerArg {
    /// TFLMS's rule: a control op between --lb and --ub ops away.
    Count,
    /// The latest op that still lets the transfer finish before the consumer starts (--device-profile's timeline).
    Time,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub(crate) enum CtrldArg {
    ChainRule,
    DirectOrder,
}

/// The knobs of TFLMS (TFLMS Table 2), named as in the paper.
#[derive(Args)]
pub(crate) struct TflmsArgs {
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

/// Refuses compile flags that have no effect without another flag (the
/// budget's rules are [`Budget::from_sizes`]'s and the compile's own).
fn check_compile_flags(args: &CompileArgs) -> Result<(), Error> {
    flags::needs(args.force, "--force", args.budget.is_some(), "--budget")?;
    let momentum = matches!(args.train, OptimizerKind::Momentum);
    flags::needs(args.momentum.is_some(), "--momentum", momentum, "--train momentum")?;
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

/// Runs `lms compile`.
pub(crate) fn command(args: &CompileArgs) -> Result<(), Error> {
    let budget = Budget::from_sizes(args.budget, args.host_budget, ["--budget", "--host-budget"])?;
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
        budget,
        force: args.force,
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
    let report = crate::commands::compile::compile(&options);
    if let Some(s) = spinner {
        s.finish_and_clear();
    }
    let report = report?;
    for warning in &report.training.warnings {
        eprintln!("lms: warning: {}", crate::commands::process::one_line(warning));
    }
    if let Some(over) = &report.written_over_budget {
        eprintln!("lms: warning: --force: wrote a plan over its budget: {}", crate::commands::process::one_line(over));
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
