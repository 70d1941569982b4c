//! `lms max-batch`: the largest batch whose training graph fits a device
//! budget, by simulation: without rewriting, and with a memory strategy
//! (TFLMS budget search, or the budget planner). Peak memory grows with the
//! batch, so a doubling search followed by bisection finds the boundary. The step time at the
//! batch found is predicted on a device profile.

use crate::analysis::profile::DeviceProfile;
use crate::analysis::{memory, order, timeline};
use crate::error::{Error, Result};
use crate::frontend::{self, FrontendOptions};
use crate::passes::planner::{self, PlanOptions, Speeds, DEFAULT_MAX_CHAIN};
use crate::passes::tflms::{self, TflmsConfig};
use crate::pipeline;
use crate::train::{self, TrainOptions};
use serde::Serialize;
use std::path::Path;

/// The largest batch that fits, and the peak there.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MaxBatch {
    /// `None` when even batch 1 does not fit.
    pub batch: Option<usize>,
    /// Simulated device peak at that batch.
    pub peak_device_bytes: u64,
    /// Simulated host peak at that batch (swapped tensors).
    pub peak_host_bytes: u64,
    /// Predicted step time at that batch on the device profile.
    pub predicted_step_seconds: f64,
    /// The search stopped at its limit with the limit still fitting: the
    /// largest batch is at least `batch`, not exactly it.
    pub at_limit: bool,
}

/// How a batch's training graph is made to fit.
#[derive(Clone, Copy, Debug)]
pub enum Rewrite<'a> {
    /// As built.
    None,
    /// The TFLMS budget search from these knobs.
    Tflms(&'a TflmsConfig),
    /// The budget planner, weighing candidates on the device profile.
    Auto,
}

/// Searches batches up to `limit` for the largest whose training graph fits
/// `budget` device bytes, rewritten by `rewrite` with `host_budget` host
/// bytes; the step predicted on `profile`. `on_probe` hears of each batch tried and whether it fits
/// (for a progress display).
#[allow(clippy::too_many_arguments)]
pub fn max_batch(
    model: &Path,
    frontend: &FrontendOptions,
    train_options: &TrainOptions,
    rewrite: Rewrite<'_>,
    budget: u64,
    host_budget: u64,
    limit: usize,
    profile: &DeviceProfile,
    on_probe: &mut dyn FnMut(usize, bool),
) -> Result<MaxBatch> {
    let step =
        |g: &crate::ir::Graph| -> Result<f64> { Ok(timeline::simulate(g, &order::schedule(g)?, profile).step_seconds) };
    // Peaks and step time at a batch; `None` when it does not fit.
    let probe = |batch: usize| -> Result<Option<(u64, u64, f64)>> {
        let options = FrontendOptions { batch: Some(batch), ..frontend.clone() };
        let graph =
            train::build(&frontend::load(model, &options)?.graph, train_options).map_err(|e| e.in_file(model))?;
        let memory = memory::simulate(&graph, &order::schedule(&graph)?);
        if memory.peak_bytes <= budget {
            return Ok(Some((memory.peak_bytes, memory.host_peak_bytes, step(&graph)?)));
        }
        match rewrite {
            Rewrite::None => Ok(None),
            Rewrite::Tflms(config) => match tflms::fit(&graph, config, tflms::FreeKnobs::ALL, budget, host_budget) {
                Ok(fit) => {
                    let seconds = match &fit.plan {
                        Some(plan) => step(&pipeline::apply_checked(&graph, &plan.patch)?.0)?,
                        None => step(&graph)?,
                    };
                    Ok(Some((fit.device_peak, fit.host_peak, seconds)))
                }
                Err(Error::OverBudget { .. }) => Ok(None),
                Err(e) => Err(e.in_file(model)),
            },
            Rewrite::Auto => {
                let options = PlanOptions { device_budget: budget, host_budget, max_chain: DEFAULT_MAX_CHAIN };
                let fitted = match planner::fit(&graph, &Speeds::from_profile(&graph, profile), options) {
                    Ok(f) => Some(f),
                    Err(Error::NoPlan { .. }) => {
                        planner::fit_split(&graph, profile, options).map_err(|e| e.in_file(model))?
                    }
                    Err(e) => return Err(e.in_file(model)),
                };
                fitted.map(|f| Ok((f.device_peak, f.host_peak, step(&f.graph)?))).transpose()
            }
        }
    };
    let mut fits = |batch: usize| -> Result<Option<(u64, u64, f64)>> {
        let peaks = probe(batch)?;
        on_probe(batch, peaks.is_some());
        Ok(peaks)
    };
    let Some(mut best) = fits(1)? else {
        let none = MaxBatch {
            batch: None,
            peak_device_bytes: 0,
            peak_host_bytes: 0,
            predicted_step_seconds: 0.0,
            at_limit: false,
        };
        return Ok(none);
    };
    let (mut lo, mut hi) = (1usize, None::<usize>);
    // Double until a batch does not fit (or the limit), then bisect.
    while hi.is_none() && lo < limit {
        let next = (lo * 2).min(limit);
        match fits(next)? {
            Some(peaks) => (lo, best) = (next, peaks),
            None => hi = Some(next),
        }
    }
    if let Some(mut hi) = hi {
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match fits(mid)? {
                Some(peaks) => (lo, best) = (mid, peaks),
                None => hi = mid,
            }
        }
    }
    let at_limit = hi.is_none();
    let (peak_device_bytes, peak_host_bytes, predicted_step_seconds) = best;
    Ok(MaxBatch { batch: Some(lo), peak_device_bytes, peak_host_bytes, predicted_step_seconds, at_limit })
}
