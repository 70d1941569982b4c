//! Budget mode: the TFLMS knobs that make a graph fit a memory budget
//! (tflms.txt §5.2 tunes `n_tensors` and `lb` by hand; this tunes them with
//! the memory simulator).
//!
//! A plan fits when its simulated device peak is within the device budget
//! and its host peak within the host budget. Among the plans of
//! `n_tensors` = 1..=all and `lb` = 1..=[`MAX_LB`] (the other knobs as
//! given), the search wants the fewest swapped bytes, then the largest `lb`
//! (the earliest swap-ins, which hide transfers best). Swapped bytes grow
//! with `n_tensors` (tensors are taken in a fixed order), so that is the
//! smallest `n_tensors` that fits with any `lb`: for each `lb` a binary
//! search over `n_tensors`, which assumes the device peak does not rise as
//! more tensors are swapped. (Where it does, the plan returned still fits,
//! but a smaller one might too.)

use super::{Analysis, TflmsConfig, TflmsReport};
use crate::analysis::{memory, order};
use crate::error::{Error, Result};
use crate::ir::Graph;
use std::collections::HashMap;

/// The largest `lb` the search tries. Beyond a few ops a swap-in's transfer
/// is hidden behind compute on any real model, and an earlier swap-in only
/// holds device memory longer.
pub const MAX_LB: u32 = 5;

/// What [`fit`] found.
#[derive(Clone, Debug)]
pub struct Fit {
    /// The graph to run: a copy of the input when it already fits, else the
    /// rewrite of [`Fit::plan`].
    pub graph: Graph,
    /// The rewrite chosen; `None` when the input already fits.
    pub plan: Option<Plan>,
    /// Simulated device peak of the input graph.
    pub device_peak_before: u64,
    /// Simulated device peak of `graph`.
    pub device_peak: u64,
    /// Simulated host peak of `graph`.
    pub host_peak: u64,
}

/// The knobs budget mode chose and what the rewrite did.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The given configuration with the chosen `n_tensors` and `lb`.
    pub config: TflmsConfig,
    /// The rewrite's report.
    pub report: TflmsReport,
}

/// Makes `g` fit in `budget_bytes` of device memory and `host_budget_bytes`
/// of host memory by TFLMS with `cfg`'s knobs, choosing `n_tensors` and `lb`
/// (module doc). Leaves `g` unchanged when it already fits. Fails with
/// [`Error::OverBudget`], naming the memory, the overshoot and the peak op
/// of the closest plan, when no plan fits.
pub fn fit(g: &Graph, cfg: &TflmsConfig, budget_bytes: u64, host_budget_bytes: u64) -> Result<Fit> {
    let budgets = Budgets { device: budget_bytes, host: host_budget_bytes };
    let before = Peaks::of(g)?;
    if budgets.fit(&before) {
        let (device_peak, host_peak) = (before.device, before.host);
        return Ok(Fit { graph: g.clone(), plan: None, device_peak_before: device_peak, device_peak, host_peak });
    }
    let mut search =
        Search { analysis: Analysis::new(g, cfg)?, base: cfg, budgets, tried: HashMap::new(), closest: before.clone() };
    let total = search.analysis.candidates.len();
    let mut fewest: Option<usize> = None;
    for lb in 1..=MAX_LB {
        if let Some(n) = search.smallest_fitting(lb, total)? {
            fewest = Some(fewest.map_or(n, |f| f.min(n)));
        }
    }
    let Some(n_tensors) = fewest else {
        return Err(budgets.error(&search.closest));
    };
    let mut chosen = 1;
    for lb in (1..=MAX_LB).rev() {
        if search.fits(n_tensors, lb)? {
            chosen = lb;
            break;
        }
    }
    let config = search.config(n_tensors, chosen);
    let (graph, report) = search.analysis.rewrite(&config)?;
    let after = Peaks::of(&graph)?;
    Ok(Fit {
        graph,
        plan: Some(Plan { config, report }),
        device_peak_before: before.device,
        device_peak: after.device,
        host_peak: after.host,
    })
}

/// The two budgets.
#[derive(Clone, Copy)]
struct Budgets {
    device: u64,
    host: u64,
}

impl Budgets {
    fn fit(&self, peaks: &Peaks) -> bool {
        peaks.device <= self.device && peaks.host <= self.host
    }

    /// Bytes over the budgets, both memories together.
    fn overshoot(&self, peaks: &Peaks) -> u64 {
        peaks.device.saturating_sub(self.device) + peaks.host.saturating_sub(self.host)
    }

    /// The error for a plan that does not fit: the memory it overshoots most.
    fn error(&self, peaks: &Peaks) -> Error {
        if peaks.device.saturating_sub(self.device) >= peaks.host.saturating_sub(self.host) {
            Error::OverBudget { pool: "device", needed: peaks.device, budget: self.device, op: peaks.device_op.clone() }
        } else {
            Error::OverBudget { pool: "host", needed: peaks.host, budget: self.host, op: peaks.host_op.clone() }
        }
    }
}

/// Simulated peaks of a graph and the ops where they happen.
#[derive(Clone, Debug)]
struct Peaks {
    device: u64,
    device_op: String,
    host: u64,
    host_op: String,
}

impl Peaks {
    fn of(g: &Graph) -> Result<Peaks> {
        let schedule = order::schedule(g)?;
        let profile = memory::simulate(g, &schedule);
        let op = |step: usize| schedule.get(step).map_or_else(String::new, |&id| g.node(id).name.clone());
        Ok(Peaks {
            device: profile.peak_bytes,
            device_op: op(profile.peak_step),
            host: profile.host_peak_bytes,
            host_op: op(profile.host_peak_step),
        })
    }
}

/// The search's state: one analysis, the plans simulated so far, and the
/// plan closest to fitting.
struct Search<'g, 'c> {
    analysis: Analysis<'g>,
    base: &'c TflmsConfig,
    budgets: Budgets,
    tried: HashMap<(usize, u32), bool>,
    closest: Peaks,
}

impl Search<'_, '_> {
    /// The smallest `n_tensors` that fits with this `lb`, by binary search;
    /// `None` when swapping every candidate does not fit.
    fn smallest_fitting(&mut self, lb: u32, total: usize) -> Result<Option<usize>> {
        if total == 0 || !self.fits(total, lb)? {
            return Ok(None);
        }
        // Invariant: `low` does not fit (0: the input itself), `high` fits.
        let (mut low, mut high) = (0, total);
        while high - low > 1 {
            let mid = low + (high - low) / 2;
            if self.fits(mid, lb)? {
                high = mid;
            } else {
                low = mid;
            }
        }
        Ok(Some(high))
    }

    /// Whether the plan with these knobs fits; simulates it once.
    fn fits(&mut self, n_tensors: usize, lb: u32) -> Result<bool> {
        if let Some(&fits) = self.tried.get(&(n_tensors, lb)) {
            return Ok(fits);
        }
        let (graph, _) = self.analysis.rewrite(&self.config(n_tensors, lb))?;
        let peaks = Peaks::of(&graph)?;
        let fits = self.budgets.fit(&peaks);
        if self.budgets.overshoot(&peaks) < self.budgets.overshoot(&self.closest) {
            self.closest = peaks;
        }
        self.tried.insert((n_tensors, lb), fits);
        Ok(fits)
    }

    /// The base configuration with these knobs.
    fn config(&self, n_tensors: usize, lb: u32) -> TflmsConfig {
        TflmsConfig { n_tensors: Some(n_tensors), lb, ..self.base.clone() }
    }
}
