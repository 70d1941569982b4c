//! `lms plan-curve`: its flags, the files it writes and the curve printed.

use super::{loss, optimizer, spinner, LossKind, OptimizerKind};
use crate::analysis::profile::{DeviceProfile, DEFAULT_PROFILE};
use crate::budget::DEFAULT_HOST_BUDGET_BYTES;
use crate::frontend::{self, FrontendOptions};
use crate::train::TrainOptions;
use crate::{emit, flags, Error};
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub(crate) struct PlanCurveArgs {
    /// The ONNX model (forward graph).
    pub(crate) model: PathBuf,
    /// Leading dimension of every data input (at least 1).
    #[arg(long, value_parser = flags::count)]
    pub(crate) batch: usize,
    /// Value of a named symbolic dimension, as NAME=N (repeatable).
    #[arg(long = "dim", value_name = "NAME=N", value_parser = flags::dim)]
    pub(crate) dims: Vec<(String, usize)>,
    /// Optimizer of the training graph.
    #[arg(long, value_enum, default_value = "sgd")]
    pub(crate) train: OptimizerKind,
    /// Loss on the model's first output.
    #[arg(long, value_enum, default_value = "softmax-xent")]
    pub(crate) loss: LossKind,
    /// Budgets on the curve, from the smallest the planner reaches to the unrewritten peak (2 to 1000).
    #[arg(long, default_value_t = 8, value_parser = flags::budget_steps)]
    pub(crate) budget_steps: usize,
    /// Host memory for swapped tensors (default 64GiB; 0: auto only recomputes).
    #[arg(long, value_parser = flags::size_or_zero)]
    pub(crate) host_budget: Option<u64>,
    /// Device profile of the time model (a shipped name or a file).
    #[arg(long, value_name = "NAME|FILE", default_value = DEFAULT_PROFILE)]
    pub(crate) device_profile: String,
    /// Also write the curve as JSON to this file.
    #[arg(long, value_name = "FILE.json")]
    pub(crate) json: Option<PathBuf>,
    /// Also write the curve as an SVG chart to this file.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) svg: Option<PathBuf>,
}

/// Runs `lms plan-curve`.
pub(crate) fn command(args: &PlanCurveArgs) -> Result<(), Error> {
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
        .and_then(|model| crate::train::build(&model.graph, &train))
        .and_then(|graph| {
            let host = args.host_budget.unwrap_or(DEFAULT_HOST_BUDGET_BYTES);
            crate::commands::plan_curve::plan_curve(&graph, &device, host, args.budget_steps)
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
