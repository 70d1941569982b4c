//! Budget mode: the TFLMS knobs that make a graph fit a memory budget
//! (TFLMS §5.2 tunes `n_tensors` and `lb` by hand; this tunes them with
//! the memory simulator).
//!
//! A plan fits when its simulated device peak is within the device budget
//! and its host peak within the host budget. The search varies only the
//! knobs the user left unset ([`FreeKnobs`]): `n_tensors` over 1..=all and
//! `lb` over 1..=[`MAX_LB`] (with the count trigger; the time trigger has
//! no `lb`); the others stay as given. It wants the fewest
//! swapped bytes, then the largest `lb` (the earliest swap-ins, which hide
//! transfers best). Swapped bytes grow with `n_tensors` (tensors are taken
//! in a fixed order), so that is the smallest `n_tensors` that fits with any
//! `lb`. Swapping more never raises the device peak and never lowers the
//! host peak, so the plans that fit form a range of `n_tensors` starting at
//! the smallest one whose device peak fits: for each `lb` a binary search
//! finds that one, and it fits exactly when its host peak does too. (Where
//! the device peak does rise with more swaps, the plan returned still fits,
//! but a smaller one might too.)

use super::{Analysis, SwapInTrigger, TflmsConfig, TflmsReport};
use crate::analysis::{memory, order};
use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::pipeline::Patch;
use std::collections::HashMap;

/// The largest `lb` the search tries. Beyond a few ops a swap-in's transfer
/// is hidden behind compute on any real model, and an earlier swap-in only
/// holds device memory longer.
pub const MAX_LB: u32 = 5;

/// The knobs the search may choose; the others keep the configuration's
/// value (a knob the user set is never changed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreeKnobs {
    pub n_tensors: bool,
    pub lb: bool,
}

impl FreeKnobs {
    /// Both knobs free.
    pub const ALL: FreeKnobs = FreeKnobs { n_tensors: true, lb: true };
}

/// What [`fit`] found.
#[derive(Clone, Debug)]
pub struct Fit {
    /// The rewrite chosen; `None` when the input already fits.
    pub plan: Option<Plan>,
    /// Simulated device peak of the input graph.
    pub device_peak_before: u64,
    /// Simulated device peak after the chosen rewrite.
    pub device_peak: u64,
    /// Simulated host peak after the chosen rewrite.
    pub host_peak: u64,
}

/// The knobs budget mode chose and the rewrite they give.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The given configuration with the chosen `n_tensors` and `lb`.
    pub config: TflmsConfig,
    /// The rewrite, as a patch of the input graph.
    pub patch: Patch,
    /// The rewrite's report.
    pub report: TflmsReport,
}

/// Makes `g` fit in `budget_bytes` of device memory and `host_budget_bytes`
/// of host memory by TFLMS with `cfg`'s knobs, choosing those of `free`
/// (module doc). No plan when `g` already fits. Fails with
/// [`Error::OverBudget`], naming the memory, the overshoot and the peak op
/// of the closest plan, when no plan fits.
pub fn fit(g: &Graph, cfg: &TflmsConfig, free: FreeKnobs, budget_bytes: u64, host_budget_bytes: u64) -> Result<Fit> {
    let budgets = Budgets { device: budget_bytes, host: host_budget_bytes };
    let before = Peaks::of(g)?;
    if budgets.fit(&before) {
        let (device_peak, host_peak) = (before.device, before.host);
        return Ok(Fit { plan: None, device_peak_before: device_peak, device_peak, host_peak });
    }
    let mut search =
        Search { analysis: Analysis::new(g, cfg)?, base: cfg, budgets, tried: HashMap::new(), closest: before.clone() };
    let total = search.analysis.candidates.len();
    // The time trigger does not use lb: one value is enough.
    let lbs: Vec<u32> =
        if free.lb && cfg.trigger == SwapInTrigger::Count { (1..=MAX_LB).collect() } else { vec![cfg.lb] };
    let mut fitting: Vec<(usize, u32)> = Vec::new();
    for &lb in &lbs {
        let n =
            if free.n_tensors { search.smallest_device_fit(lb, total)? } else { Some(cfg.n_tensors.unwrap_or(total)) };
        if let Some(n) = n {
            if search.peaks(n, lb)?.map(|p| budgets.fit(&p)).unwrap_or(false) {
                fitting.push((n, lb));
            }
        }
    }
    // Fewest tensors, then the largest lb.
    let Some(&(n_tensors, lb)) = fitting.iter().min_by_key(|&&(n, lb)| (n, std::cmp::Reverse(lb))) else {
        return Err(budgets.error(&search.closest));
    };
    let config = search.config(n_tensors, lb);
    let (patch, report) = search.analysis.patch(&config)?;
    let after = search.peaks(n_tensors, lb)?.expect("simulated above");
    Ok(Fit {
        plan: Some(Plan { config, patch, report }),
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

/// The search's state: one analysis, the peaks of the plans simulated so
/// far, and the plan closest to fitting.
struct Search<'g, 'c> {
    analysis: Analysis<'g>,
    base: &'c TflmsConfig,
    budgets: Budgets,
    tried: HashMap<(usize, u32), Peaks>,
    closest: Peaks,
}

impl Search<'_, '_> {
    /// The smallest `n_tensors` whose device peak fits with this `lb`, by
    /// binary search; `None` when swapping every candidate does not fit the
    /// device budget.
    fn smallest_device_fit(&mut self, lb: u32, total: usize) -> Result<Option<usize>> {
        let device_fits = |s: &mut Self, n: usize| -> Result<bool> {
            Ok(s.peaks(n, lb)?.is_some_and(|p| p.device <= s.budgets.device))
        };
        if total == 0 || !device_fits(self, total)? {
            return Ok(None);
        }
        // Invariant: `low` does not fit (0: the input itself), `high` fits.
        let (mut low, mut high) = (0, total);
        while high - low > 1 {
            let mid = low + (high - low) / 2;
            if device_fits(self, mid)? {
                high = mid;
            } else {
                low = mid;
            }
        }
        Ok(Some(high))
    }

    /// The peaks of the plan with these knobs; simulates it once. `None`
    /// for a plan that swaps nothing.
    fn peaks(&mut self, n_tensors: usize, lb: u32) -> Result<Option<Peaks>> {
        if n_tensors == 0 {
            return Ok(None);
        }
        if let Some(peaks) = self.tried.get(&(n_tensors, lb)) {
            return Ok(Some(peaks.clone()));
        }
        let (graph, _) = self.analysis.rewrite(&self.config(n_tensors, lb))?;
        let peaks = Peaks::of(&graph)?;
        if self.budgets.overshoot(&peaks) < self.budgets.overshoot(&self.closest) {
            self.closest = peaks.clone();
        }
        self.tried.insert((n_tensors, lb), peaks.clone());
        Ok(Some(peaks))
    }

    /// The base configuration with these knobs.
    fn config(&self, n_tensors: usize, lb: u32) -> TflmsConfig {
        TflmsConfig { n_tensors: Some(n_tensors), lb, ..self.base.clone() }
    }
}
