//! `lms max-batch`: the largest batch whose training graph fits a device
//! budget, by simulation: without rewriting, and with a memory strategy
//! (TFLMS budget search). Peak memory grows with the batch, so a doubling
//! search followed by bisection finds the boundary.

use crate::analysis::{memory, order};
use crate::error::{Error, Result};
use crate::frontend::{self, FrontendOptions};
use crate::passes::tflms::{self, TflmsConfig};
use crate::train::{self, TrainOptions};
use serde::Serialize;
use std::path::Path;

/// The largest batch that fits, and the peak there.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct MaxBatch {
    /// `None` when even batch 1 does not fit.
    pub batch: Option<usize>,
    /// Simulated device peak at that batch.
    pub peak_device_bytes: u64,
    /// Simulated host peak at that batch (swapped tensors).
    pub peak_host_bytes: u64,
    /// The search stopped at its limit with the limit still fitting: the
    /// largest batch is at least `batch`, not exactly it.
    pub at_limit: bool,
}

/// Searches batches up to `limit` for the largest whose training graph fits
/// `budget` device bytes: as built when `strategy` is `None`, else after the
/// TFLMS budget search with `host_budget` host bytes. `on_probe` hears of
/// each batch tried and whether it fits (for a progress display).
#[allow(clippy::too_many_arguments)]
pub fn max_batch(
    model: &Path,
    frontend: &FrontendOptions,
    train_options: &TrainOptions,
    strategy: Option<&TflmsConfig>,
    budget: u64,
    host_budget: u64,
    limit: usize,
    on_probe: &mut dyn FnMut(usize, bool),
) -> Result<MaxBatch> {
    // Peaks at a batch; `None` when it does not fit.
    let probe = |batch: usize| -> Result<Option<(u64, u64)>> {
        let options = FrontendOptions { batch: Some(batch), ..frontend.clone() };
        let graph =
            train::build(&frontend::load(model, &options)?.graph, train_options).map_err(|e| e.in_file(model))?;
        match strategy {
            None => {
                let profile = memory::simulate(&graph, &order::schedule(&graph)?);
                Ok((profile.peak_bytes <= budget).then_some((profile.peak_bytes, profile.host_peak_bytes)))
            }
            Some(config) => match tflms::fit(&graph, config, tflms::FreeKnobs::ALL, budget, host_budget) {
                Ok(fit) => Ok(Some((fit.device_peak, fit.host_peak))),
                Err(Error::OverBudget { .. }) => Ok(None),
                Err(e) => Err(e.in_file(model)),
            },
        }
    };
    let mut fits = |batch: usize| -> Result<Option<(u64, u64)>> {
        let peaks = probe(batch)?;
        on_probe(batch, peaks.is_some());
        Ok(peaks)
    };
    let Some(mut best) = fits(1)? else {
        return Ok(MaxBatch { batch: None, peak_device_bytes: 0, peak_host_bytes: 0, at_limit: false });
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
    Ok(MaxBatch { batch: Some(lo), peak_device_bytes: best.0, peak_host_bytes: best.1, at_limit })
}
