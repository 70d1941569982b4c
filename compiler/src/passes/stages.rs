//! The passes `lms compile` runs, in order: `import` (ONNX → IR), `autodiff`
//! (training-mode forward graph, loss, backward phase), `optimizer` (the
//! update phase), the memory passes (`tflms` or `plan`), and `verify` (the rewritten
//! graph proven equal to the training graph). Each reports one
//! [`PassReport`] variant; `lms compile` folds its report from them.

use super::planner::{self, PlanOptions, Speeds};
use super::split;
use super::tflms::{self, FreeKnobs, TflmsConfig, TflmsReport};
use crate::analysis::footprint::Footprint;
use crate::analysis::profile::DeviceProfile;
use crate::budget::Budget;
use crate::egraph;
use crate::error::{Error, Result};
use crate::frontend::{self, FrontendOptions};
use crate::pipeline::{Context, Pass, Patch, Step};
use crate::train::{self, TrainOptions, TrainSummary};
use lms_proto::onnx::ModelProto;
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// What each pass did, one variant per pass.
#[derive(Debug)]
pub enum PassReport {
    /// `import`.
    Import,
    /// `autodiff`: the trained set.
    Autodiff(TrainSummary),
    /// `optimizer`.
    Optimizer,
    /// `split`: what each split did.
    Split(Vec<split::SplitReport>),
    /// `tflms`.
    Tflms {
        /// The knobs used and what was swapped (`None` when the graph
        /// already fit the budget).
        outcome: Option<(TflmsConfig, TflmsReport)>,
        /// Whether the budget search chose the knobs (not so without a
        /// budget, or when `force` rewrote with the knobs as given).
        searched: bool,
    },
    /// `plan-split`: the batch split chosen (`None` when the plan has none).
    PlanSplit(Option<planner::SplitChoice>),
    /// `plan`: the plan (`None` when the graph already fit the budget).
    Plan(Option<Box<planner::Fitted>>),
    /// `verify`: the outputs and variable updates proven equal (`None`
    /// when no pass rewrote the graph).
    Verify(Option<usize>),
}

/// `import`: imports the ONNX model its caller read (and checked the
/// outputs against).
pub struct Import {
    pub model: PathBuf,
    pub options: FrontendOptions,
    /// The model as read from `model`.
    pub proto: ModelProto,
}

impl Pass<PassReport> for Import {
    fn name(&self) -> &'static str {
        "import"
    }

    fn run(&mut self, cx: &mut Context) -> Result<(Step, PassReport)> {
        let base_dir = self.model.parent().unwrap_or(Path::new("."));
        cx.graph =
            frontend::import(&self.proto, Some(base_dir), &self.options).map_err(|e| e.in_file(&self.model))?.graph;
        Ok((Step::Built, PassReport::Import))
    }
}

/// `autodiff`: the training-mode forward graph, the loss and the backward phase.
pub struct Autodiff {
    pub model: PathBuf,
    pub options: TrainOptions,
}

impl Pass<PassReport> for Autodiff {
    fn name(&self) -> &'static str {
        "autodiff"
    }

    fn run(&mut self, cx: &mut Context) -> Result<(Step, PassReport)> {
        let in_model = |e: Error| e.in_file(&self.model);
        let summary = train::summary(&cx.graph, &self.options).map_err(in_model)?;
        let (graph, gradients) = train::differentiate(&cx.graph, &self.options).map_err(in_model)?;
        cx.graph = graph;
        cx.gradients = gradients;
        Ok((Step::Built, PassReport::Autodiff(summary)))
    }
}

/// `optimizer`: the update of every trained variable from its gradient.
pub struct Optimizer {
    pub model: PathBuf,
    pub optimizer: train::Optimizer,
}

impl Pass<PassReport> for Optimizer {
    fn name(&self) -> &'static str {
        "optimizer"
    }

    fn run(&mut self, cx: &mut Context) -> Result<(Step, PassReport)> {
        let graph = std::mem::take(&mut cx.graph);
        cx.graph = train::attach_optimizer(graph, &cx.gradients, self.optimizer).map_err(|e| e.in_file(&self.model))?;
        Ok((Step::Built, PassReport::Optimizer))
    }
}

/// Whether `g` over its schedule already fits `b` ([`Footprint::fits`]).
fn fits(g: &crate::ir::Graph, b: Budget) -> bool {
    Footprint::graph_fits(g, g.schedule(), b)
}

/// `tflms`: TFLMS swapping with the given knobs, or, with a budget, with the
/// knobs the budget search chooses among those left free.
pub struct Tflms {
    pub model: PathBuf,
    pub config: TflmsConfig,
    pub free: FreeKnobs,
    pub budget: Option<Budget>,
    /// With a budget: rewrite even when the graph already fits, and write a
    /// plan over the budget (saying so) instead of failing.
    pub force: bool,
}

impl Pass<PassReport> for Tflms {
    fn name(&self) -> &'static str {
        tflms::PASS
    }

    fn run(&mut self, cx: &mut Context) -> Result<(Step, PassReport)> {
        let in_model = |e: Error| e.in_file(&self.model);
        let g = &cx.graph;
        tflms::check_knobs(g, &self.config).map_err(in_model)?;
        let force = self.force;
        let mut searched = false;
        let (patch, outcome) = match self.budget {
            Some(b) if !force || !fits(g, b) => {
                match tflms::fit(g, &self.config, self.free, b) {
                    Ok(fit) => {
                        searched = true;
                        match fit.plan {
                            Some(plan) => (plan.patch, Some((plan.config, plan.report))),
                            None => (Patch::new(tflms::PASS), None),
                        }
                    }
                    // Forced: the knobs as given (every candidate where unset);
                    // compile writes the plan and says it is over.
                    Err(Error::OverBudget { .. }) if force => {
                        let (patch, report) = tflms::patch(g, &self.config).map_err(in_model)?;
                        (patch, Some((self.config.clone(), report)))
                    }
                    Err(e) => return Err(in_model(e)),
                }
            }
            _ => {
                let (patch, report) = tflms::patch(g, &self.config).map_err(in_model)?;
                (patch, Some((self.config.clone(), report)))
            }
        };
        if !patch.is_empty() {
            cx.keep_reference();
        }
        Ok((Step::Patch(patch), PassReport::Tflms { outcome, searched }))
    }
}

/// `split`: runs the requested ops as micro-ops on parts of their tensors
/// (`--split`).
pub struct Split {
    pub model: PathBuf,
    pub requests: Vec<split::SplitRequest>,
}

impl Pass<PassReport> for Split {
    fn name(&self) -> &'static str {
        split::PASS
    }

    fn run(&mut self, cx: &mut Context) -> Result<(Step, PassReport)> {
        let (patch, reports) = split::patch(&cx.graph, &self.requests).map_err(|e| e.in_file(&self.model))?;
        if !patch.is_empty() {
            cx.keep_reference();
        }
        Ok((Step::Patch(patch), PassReport::Split(reports)))
    }
}

/// `plan-split`: the auto search (`--strategy auto`, `planner::search`):
/// applies the batch split of the plan it chose, when that plan has one, and
/// hands the plan to the `plan` pass.
pub struct PlanSplit {
    pub model: PathBuf,
    pub budget: Budget,
    /// Where no plan fits: no split, for the `plan` pass to plan the graph
    /// as it is.
    pub force: bool,
    /// The time model the search times its plans with.
    pub profile: DeviceProfile,
    /// After the run: the plan chosen, for the `plan` pass to apply.
    pub planned: Rc<RefCell<Option<planner::Fitted>>>,
}

/// The name of the [`PlanSplit`] pass.
pub const PLAN_SPLIT: &str = "plan-split";

impl Pass<PassReport> for PlanSplit {
    fn name(&self) -> &'static str {
        PLAN_SPLIT
    }

    fn run(&mut self, cx: &mut Context) -> Result<(Step, PassReport)> {
        let g = &cx.graph;
        let b = self.budget;
        let no_split = || Ok((Step::Patch(Patch::new(PLAN_SPLIT)), PassReport::PlanSplit(None)));
        if fits(g, b) {
            return no_split();
        }
        let planned = match planner::search(g, &self.profile, PlanOptions::new(b)) {
            Ok(planned) => planned,
            // Forced: no split; the plan pass plans the graph as it is.
            Err(Error::NoPlan { .. }) if self.force => return no_split(),
            Err(e) => return Err(e.in_file(&self.model)),
        };
        *self.planned.borrow_mut() = Some(planned.fitted);
        let Some(chosen) = planned.split else { return no_split() };
        cx.keep_reference();
        Ok((Step::Patch(chosen.patch), PassReport::PlanSplit(Some(chosen.choice))))
    }
}

/// `plan`: applies the plan the `plan-split` pass chose (`--strategy auto`);
/// forced (`--force`) where that pass chose none, the planner's own plan.
pub struct ApplyPlan {
    pub model: PathBuf,
    pub budget: Budget,
    /// Plan even when the graph already fits; where no plan fits, the
    /// planner's own plan.
    pub force: bool,
    /// The time model the planner weighs its candidates with.
    pub profile: DeviceProfile,
    /// The plan the `plan-split` pass chose (shared with it).
    pub planned: Rc<RefCell<Option<planner::Fitted>>>,
}

impl Pass<PassReport> for ApplyPlan {
    fn name(&self) -> &'static str {
        planner::PASS
    }

    fn run(&mut self, cx: &mut Context) -> Result<(Step, PassReport)> {
        let g = &cx.graph;
        let b = self.budget;
        let fitted = match self.planned.borrow_mut().take() {
            Some(fitted) => fitted,
            None if !self.force && fits(g, b) => {
                return Ok((Step::Patch(Patch::new(planner::PASS)), PassReport::Plan(None)))
            }
            None => {
                let speeds = Speeds::from_profile(g, &self.profile);
                let options = PlanOptions::new(b);
                match planner::fit_fastest(g, &speeds, &self.profile, options) {
                    Ok(fitted) => fitted,
                    // Forced: the planner's plan as it is; compile writes it and says it is over.
                    Err(Error::NoPlan { .. }) => {
                        planner::best_effort(g, &speeds, options).map_err(|e| e.in_file(&self.model))?
                    }
                    Err(e) => return Err(e.in_file(&self.model)),
                }
            }
        };
        let patch = fitted.patch.clone();
        if !patch.is_empty() {
            cx.keep_reference();
        }
        Ok((Step::Patch(patch), PassReport::Plan(Some(Box::new(fitted)))))
    }
}

/// The name of the [`Verify`] pass.
pub const VERIFY: &str = "verify";

/// `verify`: proves the graph equal to the reference the memory passes kept
/// (nothing to prove when none rewrote it).
pub struct Verify {
    pub model: PathBuf,
}

impl Pass<PassReport> for Verify {
    fn name(&self) -> &'static str {
        VERIFY
    }

    fn run(&mut self, cx: &mut Context) -> Result<(Step, PassReport)> {
        let proven = match &cx.reference {
            Some(reference) => Some(
                egraph::verify(reference, &cx.graph, &egraph::Limits::default())
                    .map_err(|e| e.in_file(&self.model))?
                    .proven(),
            ),
            None => None,
        };
        Ok((Step::Patch(Patch::new(VERIFY)), PassReport::Verify(proven)))
    }
}
