//! `lms max-batch`: its flags, the searches run, and the batches printed.

use super::{loss, optimizer, spinner, LossKind, OptimizerKind};
use crate::analysis::profile::{DeviceProfile, DEFAULT_PROFILE};
use crate::budget::Budget;
use crate::frontend::FrontendOptions;
use crate::passes::tflms::TflmsConfig;
use crate::train::TrainOptions;
use crate::{flags, Error};
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub(crate) struct MaxBatchArgs {
    /// The ONNX model (forward graph).
    pub(crate) model: PathBuf,
    /// Device memory to fit (e.g. 16GiB).
    #[arg(long, value_parser = flags::size)]
    pub(crate) budget: u64,
    /// Host memory for swapped tensors (default 64GiB; 0: auto only recomputes).
    #[arg(long, value_parser = flags::size_or_zero)]
    pub(crate) host_budget: Option<u64>,
    /// Value of a named symbolic dimension, as NAME=N (repeatable).
    #[arg(long = "dim", value_name = "NAME=N", value_parser = flags::dim)]
    pub(crate) dims: Vec<(String, usize)>,
    /// Optimizer of the training graph.
    #[arg(long, value_enum, default_value = "sgd")]
    pub(crate) train: OptimizerKind,
    /// Loss on the model's first output.
    #[arg(long, value_enum, default_value = "softmax-xent")]
    pub(crate) loss: LossKind,
    /// Largest batch to try.
    #[arg(long, default_value_t = 1 << 16, value_parser = flags::count)]
    pub(crate) limit: usize,
    /// Memory strategies searched besides no rewrite: tflms, or auto (tflms and the budget planner).
    #[arg(long, value_enum, default_value = "tflms")]
    pub(crate) strategy: MaxBatchStrategy,
    /// Device profile of the predicted step time: a shipped name (h100-sxm, h100-pcie, h200, a100, cpu) or a file.
    #[arg(long, value_name = "NAME|FILE", default_value = DEFAULT_PROFILE)]
    pub(crate) device_profile: String,
    /// Print the result as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum MaxBatchStrategy {
    /// TFLMS's budget search.
    Tflms,
    /// TFLMS's budget search and the budget planner.
    Auto,
}

/// Runs `lms max-batch`.
pub(crate) fn command(args: &MaxBatchArgs) -> Result<(), Error> {
    use crate::commands::max_batch::{MaxBatch, Rewrite};
    let frontend = FrontendOptions { batch: None, dims: args.dims.iter().cloned().collect() };
    let train =
        TrainOptions { loss: loss(args.loss), optimizer: optimizer(args.train, None, None), ..TrainOptions::default() };
    let budget = Budget::new(args.budget, args.host_budget);
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
        let found = crate::commands::max_batch::max_batch(
            &args.model,
            &frontend,
            &train,
            rewrite,
            budget,
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
    let optimizer = crate::commands::setup::describe_optimizer(&train.optimizer);
    if args.json {
        let mut json = serde_json::json!({ "budget_bytes": args.budget, "host_budget_bytes": budget.host,
            "device_profile": args.device_profile, "optimizer": optimizer, "limit": args.limit });
        for (key, r) in &results {
            json[*key] = serde_json::to_value(r).map_err(|e| Error::Usage(e.to_string()))?;
        }
        out!("{}\n", serde_json::to_string_pretty(&json).map_err(|e| Error::Usage(e.to_string()))?);
    } else {
        out!(
            "{:<12} {optimizer}, budget {} device and {} host, batch searched from 1 to {}\n",
            "setup",
            crate::units::format_bytes(args.budget),
            crate::units::format_bytes(budget.host),
            args.limit
        );
        for (key, r) in &results {
            let name = if *key == "none" { "no rewrite" } else { key };
            let bound = if r.at_limit { ">=" } else { "" };
            match r.batch {
                Some(b) => out!(
                    "{name:<12} max batch {bound:>2}{b:>6}  (peak device {}, host {}; step {} on {}){}\n",
                    crate::units::format_bytes(r.peak_device_bytes),
                    crate::units::format_bytes(r.peak_host_bytes),
                    crate::commands::simulate::format_seconds(r.predicted_step_seconds),
                    profile.name,
                    if r.at_limit { "; stopped at --limit, raise it to search further" } else { "" }
                ),
                None => out!("{name:<12} batch 1 does not fit\n"),
            }
            if let Some(t) = r.best_throughput {
                out!(
                    "{:<12} best throughput of the batches tried: batch {} ({:.1} samples/s; step {})\n",
                    "",
                    t.batch,
                    t.samples_per_second,
                    crate::commands::simulate::format_seconds(t.predicted_step_seconds)
                );
            }
        }
    }
    if results.iter().all(|(_, r)| r.batch.is_none()) {
        return Err(Error::NoBatchFits(args.budget).in_file(&args.model));
    }
    Ok(())
}
