//! The plan `--strategy auto` chooses for a budget: the one search that
//! `compile`, `max-batch` and `plan-curve` run, so they agree on the plan
//! of a batch and budget.
//!
//! The planner's greedy is not monotone in the budget (a higher budget can
//! lead it to swaps that each hide but together queue on the host link), and
//! a batch split can beat the unsplit plan even where that one fits. So the
//! search plans several ways and keeps the plan the full timeline predicts
//! fastest (ties: the first below):
//!
//! 1. the planner's plan at the budget ([`fit_fastest`]);
//! 2. its plans at the [`RUNGS`] budgets of a fixed ladder just below the
//!    budget: a plan whose arenas fit a smaller budget fits this one, so a
//!    larger budget never loses the plans a smaller one found on the ladder;
//! 3. TFLMS's swap plan at the budget (its knobs searched): auto is never
//!    predicted slower than TFLMS;
//! 4. for each number of parts, the batch split of the fewest ops under
//!    which a plan fits, and that plan ([`split::split_plans`]).
//!
//! The ladder is anchored at the unrewritten graph's device arena, not at
//! the budget, so two budgets share its rungs.
//!
//! Placing a plan's arenas is most of what a plan costs, so every plan after
//! the first is timed before it is placed and dropped when it is predicted no
//! faster than the best so far ([`super::fit_faster`]): only a plan that would
//! be kept is placed.

use super::split::{self, ChosenSplit};
use super::{fit_fastest, fit_fastest_below, report, Fitted, Plan, PlanOptions, Speeds};
use crate::analysis::footprint::Footprint;
use crate::analysis::profile::DeviceProfile;
use crate::analysis::timeline;
use crate::egraph::rules::split::MAX_PARTS;
use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::passes::split::{batch_patch, BatchSplit};
use crate::passes::tflms::{self, FreeKnobs, TflmsConfig};
use crate::pipeline;

/// How many budgets of the ladder below the budget the search also plans at.
pub const RUNGS: usize = 6;

/// Each rung of the ladder is this fraction of the one above (the top rung
/// is the unrewritten graph's device arena).
const RUNG_RATIO: f64 = 31.0 / 32.0;

/// The plan the search chose.
pub struct Planned {
    /// The batch split applied before the plan (`None`: the graph as built).
    pub split: Option<ChosenSplit>,
    /// The plan, of the split graph when there is a split.
    pub fitted: Fitted,
    /// Its predicted step on the search's profile.
    pub step_seconds: f64,
}

/// The fastest plan of `g` whose placed arenas fit `options`' budgets
/// (module doc), timed on `profile`. Fails with [`Error::NoPlan`] when no
/// plan fits, split or not.
pub fn search(g: &Graph, profile: &DeviceProfile, options: PlanOptions) -> Result<Planned> {
    let speeds = Speeds::from_profile(g, profile);
    let step = |f: &Fitted| timeline::simulate(&f.graph, f.graph.schedule(), profile).step_seconds;
    let mut best: Option<Planned> = None;
    // Every plan after the first is planned only to beat the best so far.
    let to_beat = |best: &Option<Planned>| best.as_ref().map(|b| b.step_seconds);
    let consider = |best: &mut Option<Planned>, split: Option<ChosenSplit>, fitted: Fitted| {
        let step_seconds = step(&fitted);
        if best.as_ref().is_none_or(|b| step_seconds < b.step_seconds) {
            *best = Some(Planned { split, fitted, step_seconds });
        }
    };
    let unsplit = match fit_fastest(g, &speeds, profile, options) {
        // Nothing to rewrite: no plan is faster than the graph as built.
        Ok(fitted) if fitted.patch.is_empty() => {
            let step_seconds = step(&fitted);
            return Ok(Planned { split: None, fitted, step_seconds });
        }
        Ok(fitted) => {
            consider(&mut best, None, fitted);
            None
        }
        Err(e @ Error::NoPlan { .. }) => Some(e),
        Err(e) => return Err(e),
    };
    let arena = Footprint::of(g, g.schedule()).device.arena_bytes;
    for rung in rungs_below(arena, options.device_budget) {
        let rung_options = PlanOptions { device_budget: rung, ..options };
        match fit_fastest_below(g, &speeds, profile, rung_options, to_beat(&best)) {
            Ok(Some(fitted)) => consider(&mut best, None, fitted),
            // The arena is not monotone in the budget: a lower rung may fit.
            Ok(None) | Err(Error::NoPlan { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    if let Some(fitted) = tflms_plan(g, profile, options, to_beat(&best))? {
        consider(&mut best, None, fitted);
    }
    let splits = split::split_plans(g, profile, options, to_beat(&best))?;
    let tried = splits.tried;
    for (chosen, fitted) in splits.fitted {
        consider(&mut best, Some(chosen), fitted);
    }
    match best {
        Some(mut planned) => {
            if let Some(chosen) = planned.split.as_mut() {
                chosen.choice.tried = tried;
            }
            Ok(planned)
        }
        None => Err(split::no_split_fits(unsplit.expect("an unsplit plan that fits is a candidate"), splits.closest)),
    }
}

/// A budget search's question, answered quickly: whether a plan of a
/// subset of [`search`]'s fits `options` — the planner's plan at the budget
/// ([`super::fit`]), else under the split of every op into 8, 4 or 2 parts —
/// so [`search`] finds a plan wherever this says one fits.
pub fn fits_quickly(g: &Graph, profile: &DeviceProfile, options: PlanOptions) -> Result<bool> {
    match super::fit(g, &Speeds::from_profile(g, profile), options) {
        Ok(_) => return Ok(true),
        Err(Error::NoPlan { .. }) => {}
        Err(e) => return Err(e),
    }
    for parts in [MAX_PARTS, 4, 2] {
        let Some((patch, _)) = batch_patch(g, &BatchSplit { parts, min_bytes: 0 }) else { continue };
        // A split the emission cannot carry out is not a candidate.
        let Ok((graph, _)) = pipeline::apply_checked(g, &patch) else { continue };
        match super::fit(&graph, &Speeds::from_profile(&graph, profile), options) {
            Ok(_) => return Ok(true),
            Err(Error::NoPlan { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// The [`RUNGS`] highest budgets of the ladder from `arena` down (each
/// [`RUNG_RATIO`] of the one above) that are below `budget`, highest first.
fn rungs_below(arena: u64, budget: u64) -> Vec<u64> {
    let mut rung = arena as f64;
    let mut found = Vec::with_capacity(RUNGS);
    while found.len() < RUNGS && rung >= 1.0 {
        rung *= RUNG_RATIO;
        if (rung as u64) < budget {
            found.push(rung as u64);
        }
    }
    found
}

/// TFLMS's plan for `options`' budgets (its knobs searched, swap-ins
/// triggered by count), as a plan of the search; `None` when none fits, or
/// when it is predicted no faster than `to_beat` seconds.
fn tflms_plan(
    g: &Graph,
    profile: &DeviceProfile,
    options: PlanOptions,
    to_beat: Option<f64>,
) -> Result<Option<Fitted>> {
    let config = TflmsConfig { profile: profile.clone().into(), ..TflmsConfig::default() };
    let fit = match tflms::fit(g, &config, FreeKnobs::ALL, options.budgets()) {
        Ok(fit) => fit,
        Err(Error::OverBudget { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let Some(plan) = fit.plan else { return Ok(None) };
    let (graph, _) = pipeline::apply_checked(g, &plan.patch)?;
    let timeline = timeline::simulate(&graph, graph.schedule(), profile);
    if to_beat.is_some_and(|step_seconds| timeline.step_seconds >= step_seconds) {
        return Ok(None);
    }
    // Placed over the schedule the compiled graph keeps.
    let footprint = Footprint::of(&graph, graph.schedule());
    if !footprint.fits(options.budgets()) {
        return Ok(None);
    }
    let reports = report::from_plan(&graph, &timeline);
    let plan_record = Plan {
        decisions: Vec::new(),
        device_peak: footprint.device.peak_bytes,
        host_peak: footprint.host.peak_bytes,
        fits: true,
    };
    Ok(Some(Fitted { patch: plan.patch, graph, plan: plan_record, reports, footprint }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rungs_are_fixed_by_the_arena_and_below_the_budget() {
        assert_eq!(rungs_below(3200, 4000), vec![3100, 3003, 2909, 2818, 2730, 2644]);
        assert_eq!(
            rungs_below(3200, 3050),
            vec![3003, 2909, 2818, 2730, 2644, 2562],
            "the same rungs below a lower budget"
        );
        assert_eq!(
            rungs_below(3200, 3003),
            vec![2909, 2818, 2730, 2644, 2562, 2482],
            "a rung equal to the budget is its own plan"
        );
        assert!(rungs_below(1600, 0).is_empty());
    }
}
