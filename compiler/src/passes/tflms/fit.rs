//! Budget mode: the TFLMS knobs that make a graph fit a memory budget
//! (TFLMS §5.2 tunes `n_tensors` and `lb` by hand; this tunes them with
//! the memory simulator and the static placement).
//!
//! A plan fits when its placed device arena is within the device budget and
//! its host arena within the host budget ([`Footprint::fits`]). The search
//! varies only the knobs the user left unset ([`FreeKnobs`]): `n_tensors`
//! over 1..=all and `lb` over 1..=[`MAX_LB`] (with the count trigger; the
//! time trigger has no `lb`); the others stay as given. It wants the fewest
//! swapped bytes, then the largest `lb` (the earliest swap-ins, which hide
//! transfers best). Swapped bytes grow with `n_tensors` (tensors are taken
//! in a fixed order), so that is the smallest `n_tensors` that fits with any
//! `lb`. The search runs on live peaks against a live target (the budgets at
//! first): swapping more never raises the device peak and never lowers the
//! host peak, so the plans within the target form a range of `n_tensors`
//! starting at the smallest one whose device peak is within it: for each
//! `lb` a binary search finds that one, and it is within the target exactly
//! when its host peak is too. The plan chosen is then placed; when an arena
//! is over its budget, the search runs again at a live target lowered in
//! proportion to the overshoot ([`Footprint::lower`]), at most
//! [`MAX_ROUNDS`] times. (Where the device peak does rise with more swaps,
//! the plan returned still fits, but a smaller one might too.)

use super::peaks::{Peaks, Sweep};
use super::{Analysis, SwapInTrigger, TflmsConfig, TflmsReport};
use crate::analysis::footprint::{Footprint, MAX_ROUNDS};
use crate::analysis::order;
use crate::budget::Budget;
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
    pub plan: Option<ChosenRewrite>,
    /// Peaks and arenas of the input graph.
    pub before: Footprint,
    /// Peaks and arenas after the chosen rewrite (the input's without one).
    pub after: Footprint,
}

/// The knobs budget mode chose and the rewrite they give.
#[derive(Clone, Debug)]
pub struct ChosenRewrite {
    /// The given configuration with the chosen `n_tensors` and `lb`.
    pub config: TflmsConfig,
    /// The rewrite, as a patch of the input graph.
    pub patch: Patch,
    /// The rewrite's report.
    pub report: TflmsReport,
}

/// Makes `g` fit in `budgets` (device and host memory) by TFLMS with `cfg`'s knobs, choosing those of `free`
/// (module doc). No plan when `g` already fits. Fails with
/// [`Error::OverBudget`], naming the memory, the overshoot and the peak op
/// of the closest plan, when no plan fits.
pub fn fit(g: &Graph, cfg: &TflmsConfig, free: FreeKnobs, budgets: Budget) -> Result<Fit> {
    let schedule = order::schedule(g)?;
    let before = Footprint::of(g, &schedule);
    if before.fits(budgets) {
        return Ok(Fit { plan: None, before, after: before });
    }
    let analysis = Analysis::new(g, cfg)?;
    let mut search = Search {
        sweep: Sweep::new(g, &analysis.order),
        analysis,
        base: cfg,
        budgets,
        target: budgets,
        tried: HashMap::new(),
        closest: (
            None,
            before.device.peak_bytes.saturating_sub(budgets.device)
                + before.host.peak_bytes.saturating_sub(budgets.host),
        ),
    };
    // The time trigger does not use lb: one value is enough.
    let lbs: Vec<u32> =
        if free.lb && cfg.trigger == SwapInTrigger::Count { (1..=MAX_LB).collect() } else { vec![cfg.lb] };
    // The placed plan closest to fitting: its overshoot and why it does not fit.
    let mut closest_placed: Option<(u64, Error)> = None;
    for _ in 0..MAX_ROUNDS {
        let Some((n_tensors, lb)) = search.within_target(free, &lbs)? else { break };
        let config = search.config(n_tensors, lb);
        let (graph, _) = search.analysis.rewrite(&config)?;
        let placed = order::schedule(&graph)?;
        let after = Footprint::of(&graph, &placed);
        match after.check(&graph, &placed, budgets) {
            Ok(()) => {
                let (patch, report) = search.analysis.patch(&config)?;
                return Ok(Fit { plan: Some(ChosenRewrite { config, patch, report }), before, after });
            }
            Err(e) => {
                let overshoot = after.overshoot(budgets);
                if closest_placed.as_ref().is_none_or(|(o, _)| overshoot < *o) {
                    closest_placed = Some((overshoot, e));
                }
            }
        }
        let lowered = after.lower(search.target, budgets);
        if lowered == search.target {
            break;
        }
        search.target = lowered;
    }
    if let Some((_, e)) = closest_placed {
        return Err(e);
    }
    // No plan's live peaks are within the budgets (so neither are its arenas):
    // the closest one by its live peaks, placed.
    Err(match search.closest.0 {
        Some((n_tensors, lb)) => {
            let (graph, _) = search.analysis.rewrite(&search.config(n_tensors, lb))?;
            let placed = order::schedule(&graph)?;
            Footprint::of(&graph, &placed).over(&graph, &placed, budgets)
        }
        None => before.over(g, &schedule, budgets),
    })
}

/// The search's state: one analysis, the live target, the peaks of the
/// plans simulated so far, and the knobs of the plan closest to fitting
/// the budgets by its live peaks.
struct Search<'g, 'c> {
    analysis: Analysis<'g>,
    /// The input's memory, for the peaks of each rewrite probed.
    sweep: Sweep<'g>,
    base: &'c TflmsConfig,
    /// The budgets to fit.
    budgets: Budget,
    /// The live peaks the search looks for: the budgets, lowered while the
    /// arenas of its plans are over them.
    target: Budget,
    tried: HashMap<(usize, u32), Peaks>,
    /// The knobs of the plan closest to the budgets by its live peaks
    /// (`None`: the input graph) and its overshoot.
    closest: (Option<(usize, u32)>, u64),
}

impl Search<'_, '_> {
    /// The knobs of the plan whose live peaks are within the target with the
    /// fewest tensors, then the largest lb; `None` when there is none.
    fn within_target(&mut self, free: FreeKnobs, lbs: &[u32]) -> Result<Option<(usize, u32)>> {
        let total = self.analysis.candidates.len();
        let mut within: Vec<(usize, u32)> = Vec::new();
        for &lb in lbs {
            let n = if free.n_tensors {
                self.smallest_device_fit(lb, total)?
            } else {
                Some(self.base.n_tensors.unwrap_or(total))
            };
            if let Some(n) = n {
                if self.peaks(n, lb)?.is_some_and(|p| p.within(self.target)) {
                    within.push((n, lb));
                }
            }
        }
        Ok(within.into_iter().min_by_key(|&(n, lb)| (n, std::cmp::Reverse(lb))))
    }

    /// The smallest `n_tensors` whose device peak fits with this `lb`, by
    /// binary search; `None` when swapping every candidate does not fit the
    /// device budget.
    fn smallest_device_fit(&mut self, lb: u32, total: usize) -> Result<Option<usize>> {
        let device_fits = |s: &mut Self, n: usize| -> Result<bool> {
            Ok(s.peaks(n, lb)?.is_some_and(|p| p.device <= s.target.device))
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

    /// The live peaks of the plan with these knobs; computes them once.
    /// `None` for a plan that swaps nothing.
    fn peaks(&mut self, n_tensors: usize, lb: u32) -> Result<Option<Peaks>> {
        if n_tensors == 0 {
            return Ok(None);
        }
        if let Some(peaks) = self.tried.get(&(n_tensors, lb)) {
            return Ok(Some(*peaks));
        }
        let peaks = self.analysis.peaks(&self.sweep, &self.config(n_tensors, lb));
        // Closest to the budgets the search started from, not to a lowered target.
        let overshoot = peaks.overshoot(self.budgets);
        if overshoot < self.closest.1 {
            self.closest = (Some((n_tensors, lb)), overshoot);
        }
        self.tried.insert((n_tensors, lb), peaks);
        Ok(Some(peaks))
    }

    /// The base configuration with these knobs.
    fn config(&self, n_tensors: usize, lb: u32) -> TflmsConfig {
        TflmsConfig { n_tensors: Some(n_tensors), lb, ..self.base.clone() }
    }
}
