//! The passes `lms compile` runs for its options, as data: the budget
//! checked once, the model read, and one list of passes, each reporting one
//! [`PassReport`] variant that the compile report is folded from.

use crate::analysis::profile::{DeviceProfile, DEFAULT_PROFILE};
use crate::commands::compile::{CompileOptions, Strategy};
use crate::error::{Error, Result};
use crate::frontend;
use crate::passes::stages::{self, PassReport};
use crate::passes::tflms::TflmsConfig;
use crate::pipeline::Pass;
use crate::train::RunningVariance;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// One compile's passes and what they were made from.
pub struct Pipeline {
    /// The passes, in the order they run.
    pub passes: Vec<Box<dyn Pass<PassReport>>>,
    /// The device profile the plan is made for (`None` without one).
    pub profile: Option<DeviceProfile>,
    /// The model file's bytes, as read.
    pub model_bytes: Vec<u8>,
    /// The model's external data files.
    pub external: Vec<PathBuf>,
    /// Whether batch norm's running variance follows PyTorch's convention
    /// because PyTorch exported the model (none was asked for).
    pub running_variance_from_producer: bool,
}

impl Pipeline {
    /// Checks the budget against the strategy, loads the device profile,
    /// reads the model and lists the passes: `import`, `autodiff`,
    /// `optimizer`, `split` (with `--split`), `tflms` or `plan-split` and
    /// `plan` (the strategy's), `verify` (unless turned off).
    pub fn for_options(options: &CompileOptions) -> Result<Pipeline> {
        let budget = options.budget;
        if budget.is_some() && options.strategy == Strategy::None {
            return Err(Error::Usage("--budget needs a memory strategy (--strategy tflms or auto)".into()));
        }
        if options.strategy == Strategy::Auto && budget.is_none() {
            return Err(Error::Usage("--strategy auto needs --budget (the device memory to fit, e.g. 16GiB)".into()));
        }
        let profile = match (options.device_profile.as_str(), &options.strategy) {
            ("", Strategy::Auto) => Some(DeviceProfile::load(DEFAULT_PROFILE)?),
            ("", _) => None,
            (name, _) => Some(DeviceProfile::load(name)?),
        };
        let model = &options.model;
        let in_model = |e: Error| e.in_file(model);
        let model_bytes = frontend::read_model_bytes(model).map_err(in_model)?;
        let proto = frontend::decode_model(&model_bytes).map_err(in_model)?;
        let external = frontend::external_files(&proto, model.parent().unwrap_or(Path::new(".")));
        let mut train = options.train.clone();
        // PyTorch's convention for a model PyTorch exported, unless one is asked for.
        let running_variance_from_producer = train.running_variance.is_none() && proto.producer_name == "pytorch";
        if running_variance_from_producer {
            train.running_variance = Some(RunningVariance::Unbiased);
        }
        let model = model.clone();
        let mut passes: Vec<Box<dyn Pass<PassReport>>> = vec![
            Box::new(stages::Import { model: model.clone(), options: options.frontend.clone(), proto }),
            Box::new(stages::Autodiff { model: model.clone(), options: train }),
            Box::new(stages::Optimizer { model: model.clone(), optimizer: options.train.optimizer }),
        ];
        if !options.split.is_empty() {
            passes.push(Box::new(stages::Split { model: model.clone(), requests: options.split.clone() }));
        }
        match (&options.strategy, budget, &profile) {
            (Strategy::Tflms(config), _, _) => passes.push(Box::new(stages::Tflms {
                model: model.clone(),
                config: TflmsConfig {
                    profile: profile.clone().map_or_else(|| config.profile.clone(), Into::into),
                    ..config.clone()
                },
                free: options.free_knobs,
                budget,
                force: options.force,
            })),
            (Strategy::Auto, Some(budget), Some(profile)) => {
                let planned = Rc::default();
                passes.push(Box::new(stages::PlanSplit {
                    model: model.clone(),
                    budget,
                    force: options.force,
                    profile: profile.clone(),
                    planned: Rc::clone(&planned),
                }));
                passes.push(Box::new(stages::ApplyPlan {
                    model: model.clone(),
                    budget,
                    force: options.force,
                    profile: profile.clone(),
                    planned,
                }));
            }
            _ => {}
        }
        if options.verify {
            passes.push(Box::new(stages::Verify { model }));
        }
        Ok(Pipeline { passes, profile, model_bytes, external, running_variance_from_producer })
    }
}
