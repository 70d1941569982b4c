//! `lms max-batch`: the largest batch whose training graph fits a device
//! and a host budget, by simulation and static placement: without
//! rewriting, and with a memory strategy (TFLMS budget search, or the budget
//! planner). A batch fits when its plan's placed arenas are within the
//! budgets ([`Footprint::fits`]). Live memory grows with the batch, so a
//! doubling search followed by bisection finds a boundary; the placed arena
//! is not monotone in the batch, so every batch is decided by its own plan's
//! arenas, and the batch reported is one whose arenas were placed and fit
//! (a larger one past a batch that does not fit may fit too). The step time
//! at the batch found is predicted on a device profile. With the budget
//! planner, each probe asks only whether a plan fits
//! ([`planner::fits_quickly`], a subset of the search's plans), and the batch
//! found is planned by [`planner::search`], what `compile --strategy auto`
//! runs: `compile --batch N` at the batch reported writes the plan reported.
//! Of the batches tried that fit, the one with the most samples per second
//! (batch over predicted step) is reported too: with the planner, each is
//! planned by [`planner::search`], as `compile --batch N` would plan it.

use crate::analysis::footprint::Footprint;
use crate::analysis::profile::DeviceProfile;
use crate::analysis::{order, timeline};
use crate::budget::Budget;
use crate::error::{Error, Result};
use crate::frontend::{self, FrontendOptions};
use crate::passes::planner::{self, PlanOptions};
use crate::passes::tflms::{self, TflmsConfig};
use crate::pipeline;
use crate::train::{self, TrainOptions};
use serde::Serialize;
use std::path::Path;

/// The largest batch that fits, and the peaks and arenas there.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct MaxBatch {
    /// `None` when even batch 1 does not fit.
    pub batch: Option<usize>,
    /// Simulated device peak at that batch.
    pub peak_device_bytes: u64,
    /// Simulated host peak at that batch (swapped tensors).
    pub peak_host_bytes: u64,
    /// Placed device arena at that batch (within the budget).
    pub arena_device_bytes: u64,
    /// Placed host arena at that batch (within the host budget).
    pub arena_host_bytes: u64,
    /// Predicted step time at that batch on the device profile.
    pub predicted_step_seconds: f64,
    /// The search stopped at its limit with the limit still fitting: the
    /// largest batch is at least `batch`, not exactly it.
    pub at_limit: bool,
    /// Of the batches tried that fit, the one with the highest predicted
    /// throughput; `None` when even batch 1 does not fit.
    pub best_throughput: Option<Throughput>,
}

/// A batch that fits and its predicted training throughput.
#[derive(Clone, Copy, Debug, Serialize, PartialEq)]
pub struct Throughput {
    /// The batch.
    pub batch: usize,
    /// Predicted step time at that batch on the device profile.
    pub predicted_step_seconds: f64,
    /// `batch / predicted_step_seconds`.
    pub samples_per_second: f64,
}

/// A batch that fits: its plan's peaks and arenas, and its predicted step.
struct Fits(Footprint, f64);

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
/// `budget`'s device bytes, rewritten by `rewrite` with its host
/// bytes; the step predicted on `profile`. `on_probe` hears of each batch tried and whether it fits
/// (for a progress display).
#[allow(clippy::too_many_arguments)]
pub fn max_batch(
    model: &Path,
    frontend: &FrontendOptions,
    train_options: &TrainOptions,
    rewrite: Rewrite<'_>,
    budgets: Budget,
    limit: usize,
    profile: &DeviceProfile,
    on_probe: &mut dyn FnMut(usize, bool),
) -> Result<MaxBatch> {
    let step =
        |g: &crate::ir::Graph| -> Result<f64> { Ok(timeline::simulate(g, &order::schedule(g)?, profile).step_seconds) };
    let auto_options = PlanOptions::new(budgets);
    let training_graph = |batch: usize| -> Result<crate::ir::Graph> {
        let options = FrontendOptions { batch: Some(batch), ..frontend.clone() };
        train::build(&frontend::load(model, &options)?.graph, train_options).map_err(|e| e.in_file(model))
    };
    // Peaks, arenas and step time at a batch; `None` when it does not fit.
    let probe = |batch: usize| -> Result<Option<Fits>> {
        let graph = training_graph(batch)?;
        let footprint = Footprint::of(&graph, &order::schedule(&graph)?);
        if footprint.fits(budgets) {
            return Ok(Some(Fits(footprint, step(&graph)?)));
        }
        match rewrite {
            Rewrite::None => Ok(None),
            Rewrite::Tflms(config) => match tflms::fit(&graph, config, tflms::FreeKnobs::ALL, budgets) {
                Ok(fit) => {
                    let seconds = match &fit.plan {
                        Some(plan) => step(&pipeline::apply_checked(&graph, &plan.patch)?.0)?,
                        None => step(&graph)?,
                    };
                    Ok(Some(Fits(fit.after, seconds)))
                }
                Err(Error::OverBudget { .. }) => Ok(None),
                Err(e) => Err(e.in_file(model)),
            },
            // Whether a plan fits, quickly; a batch that fits is planned by
            // the search `compile --strategy auto` runs, for its step.
            Rewrite::Auto => match planner::fits_quickly(&graph, profile, auto_options) {
                Ok(true) => {
                    let planned = planner::search(&graph, profile, auto_options).map_err(|e| e.in_file(model))?;
                    let planned_graph = &planned.fitted.graph;
                    Ok(Some(Fits(Footprint::of(planned_graph, planned_graph.schedule()), planned.step_seconds)))
                }
                Ok(false) => Ok(None),
                Err(e) => Err(e.in_file(model)),
            },
        }
    };
    let mut best_throughput: Option<Throughput> = None;
    let mut fits = |batch: usize| -> Result<Option<Fits>> {
        let peaks = probe(batch)?;
        on_probe(batch, peaks.is_some());
        if let Some(Fits(_, seconds)) = &peaks {
            let tried = Throughput {
                batch,
                predicted_step_seconds: *seconds,
                samples_per_second: batch as f64 / seconds.max(f64::MIN_POSITIVE),
            };
            if best_throughput.is_none_or(|b| better(&tried, &b)) {
                best_throughput = Some(tried);
            }
        }
        Ok(peaks)
    };
    let Some(mut best) = fits(1)? else {
        let none = MaxBatch {
            batch: None,
            peak_device_bytes: 0,
            peak_host_bytes: 0,
            arena_device_bytes: 0,
            arena_host_bytes: 0,
            predicted_step_seconds: 0.0,
            at_limit: false,
            best_throughput: None,
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
    let Fits(footprint, predicted_step_seconds) = best;
    debug_assert!(footprint.fits(budgets), "the batch reported was placed and fits");
    Ok(MaxBatch {
        batch: Some(lo),
        peak_device_bytes: footprint.device.peak_bytes,
        peak_host_bytes: footprint.host.peak_bytes,
        arena_device_bytes: footprint.device.arena_bytes,
        arena_host_bytes: footprint.host.arena_bytes,
        predicted_step_seconds,
        at_limit,
        best_throughput,
    })
}

/// Whether `a` has more samples per second than `b`, or as many at a
/// smaller batch.
fn better(a: &Throughput, b: &Throughput) -> bool {
    a.samples_per_second > b.samples_per_second || (a.samples_per_second == b.samples_per_second && a.batch < b.batch)
}
