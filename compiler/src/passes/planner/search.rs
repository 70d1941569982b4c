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
//! 1. the planner's plans at every budget of a fixed ladder (each
//!    [`RUNG_RATIO`] of the one above, anchored at the unrewritten graph's
//!    device arena, not at the budget) from the budget down to the largest
//!    working set of one op, below which no plan fits: a larger budget plans
//!    at every rung a smaller one plans at, and a plan whose arenas fit a
//!    smaller budget fits the larger one, so the planner's best never gets
//!    slower with more budget;
//! 2. only where no rung has a plan, the planner's plan at the budget itself;
//! 3. TFLMS's swap plan at the budget (its knobs searched): auto is never
//!    predicted slower than TFLMS;
//! 4. for each number of parts, the batch split of the fewest ops under
//!    which a plan fits, and those of more ops while their plans are
//!    faster, with their plans ([`split::split_plans`]); with host
//!    memory, also the split under which a recompute-only plan fits (it
//!    splits more ops, and can be faster than swapping); and the kept
//!    split's graph planned at every rung of the ladder below the budget,
//!    as in 1.
//!
//! The graph as built, when it fits, is the plan and nothing else is tried.
//!
//! The rungs plan one graph at falling targets: they share its facts, and
//! each rung's greedy resumes from the run above it ([`super::resume`]).
//!
//! Placing a plan's arenas is most of what a plan costs, so every plan after
//! the first is timed before it is placed and dropped when it is predicted no
//! faster than the best so far ([`super::fit_faster`]): only a plan that would
//! be kept is placed. Making a plan into a graph to time it costs more than
//! planning it, so a plan whose decisions alone bound its step at or above
//! the best so far (the compute its recomputes add, the link time of its
//! swaps) is dropped before its graph is made, and so is a rung's plan that
//! misses the rung by its live peak.

use super::split::{self, ChosenSplit};
use super::{
    fit_faster, fit_fastest, fit_fastest_below, report, Decisions, Facts, Fitted, Greedy, OnNoPlan, PlanOptions, Speeds,
};
use crate::analysis::footprint::Footprint;
use crate::analysis::profile::DeviceProfile;
use crate::analysis::timeline;
use crate::budget::Budget;
use crate::egraph::rules::split::MAX_PARTS;
use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::passes::split::{batch_patch, BatchSplit};
use crate::passes::tflms::{self, FreeKnobs, TflmsConfig};
use crate::pipeline;

/// Each rung of the ladder is this fraction of the one above (the top rung
/// is the unrewritten graph's device arena).
const RUNG_RATIO: f64 = 127.0 / 128.0;

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
    let before = Footprint::of(g, g.schedule());
    // Nothing to rewrite: no plan is faster than the graph as built.
    if before.fits(options.budget) {
        let fitted = fit_fastest(g, &speeds, profile, options)?;
        let step_seconds = step(&fitted);
        return Ok(Planned { split: None, fitted, step_seconds });
    }
    let mut best: Option<Planned> = None;
    // Every plan after the first is planned only to beat the best so far.
    let to_beat = |best: &Option<Planned>| best.as_ref().map(|b| b.step_seconds);
    let consider = |best: &mut Option<Planned>, split: Option<ChosenSplit>, fitted: Fitted| {
        let step_seconds = step(&fitted);
        if best.as_ref().is_none_or(|b| step_seconds < b.step_seconds) {
            *best = Some(Planned { split, fitted, step_seconds });
        }
    };
    let (_, floor) = super::largest_working_set(g, g.schedule());
    // One graph planned at every rung: each run resumes from the one above.
    let facts = Facts::new(g, g.schedule(), &speeds);
    let mut greedy = Greedy::new(&facts);
    for rung in rungs_below(before.device.arena_bytes, options.budget.device, floor) {
        let rung_options = PlanOptions { budget: Budget { device: rung, ..options.budget }, ..options };
        // Why a rung has no plan is not reported.
        match fit_fastest_below(&mut greedy, profile, rung_options, to_beat(&best), OnNoPlan::Skip) {
            Ok(Some(fitted)) => consider(&mut best, None, fitted),
            // The arena is not monotone in the budget: a lower rung may fit.
            Ok(None) | Err(Error::NoPlan { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    // Between the lowest rung and the budget: the budget's own plan, only
    // where no rung has one (it would make the step depend on where the
    // budget falls between two rungs).
    let mut unsplit = None;
    if best.is_none() {
        let fitted = fit_fastest_below(&mut greedy, profile, options, None, OnNoPlan::Explain);
        match fitted.map(|fitted| fitted.expect("a fit with nothing to beat drops no plan")) {
            Ok(fitted) => consider(&mut best, None, fitted),
            Err(e @ Error::NoPlan { .. }) => unsplit = Some(e),
            Err(e) => return Err(e),
        }
    }
    if let Some(fitted) = tflms_plan(g, profile, options, to_beat(&best))? {
        consider(&mut best, None, fitted);
    }
    let splits = split::split_plans(g, profile, options, to_beat(&best))?;
    let (mut tried, closest) = (splits.tried, splits.closest);
    for (chosen, fitted) in splits.fitted {
        consider(&mut best, Some(chosen), fitted);
    }
    // Without swaps a split fits at a smaller threshold (more ops split)
    // than with them, and may be faster: the recompute-only splits compete
    // too, so more host memory never gives a slower plan.
    if options.budget.host > 0 {
        let no_host = PlanOptions { budget: Budget { host: 0, ..options.budget }, ..options };
        let splits = split::split_plans(g, profile, no_host, to_beat(&best))?;
        tried += splits.tried;
        for (chosen, fitted) in splits.fitted {
            consider(&mut best, Some(chosen), fitted);
        }
    }
    // The kept split's graph planned at the ladder's rungs too, as the graph
    // as built is: its plan at the budget alone would make the step depend on
    // where the budget falls between two rungs.
    if let Some(chosen) = best.as_ref().and_then(|b| b.split.clone()) {
        let (graph, _) = pipeline::apply_checked(g, &chosen.patch)?;
        let speeds = Speeds::from_profile(&graph, profile);
        let facts = Facts::new(&graph, graph.schedule(), &speeds);
        let mut greedy = Greedy::new(&facts);
        let (_, floor) = super::largest_working_set(&graph, graph.schedule());
        for rung in rungs_below(before.device.arena_bytes, options.budget.device, floor) {
            let rung_options = PlanOptions { budget: Budget { device: rung, ..options.budget }, ..options };
            match fit_fastest_below(&mut greedy, profile, rung_options, to_beat(&best), OnNoPlan::Skip) {
                Ok(Some(fitted)) => consider(&mut best, Some(chosen.clone()), fitted),
                Ok(None) | Err(Error::NoPlan { .. }) => continue,
                Err(e) => return Err(e),
            }
        }
    }
    match best {
        Some(mut planned) => {
            if let Some(chosen) = planned.split.as_mut() {
                chosen.choice.tried = tried;
                chosen.choice.step_seconds = planned.step_seconds;
            }
            Ok(planned)
        }
        None => Err(split::no_split_fits(unsplit.expect("no unsplit plan fits when none was kept"), closest)),
    }
}

/// A budget search's question, answered quickly: whether a plan of a
/// subset of [`search`]'s fits `options` — the planner's plan at the budget
/// ([`super::fit`]), else under the split of every op into 8, 4 or 2 parts —
/// so [`search`] finds a plan wherever this says one fits.
pub fn fits_quickly(g: &Graph, profile: &DeviceProfile, options: PlanOptions) -> Result<bool> {
    // Why no plan fits is not reported: the fit skips explaining it.
    let fits = |graph: &Graph| {
        let speeds = Speeds::from_profile(graph, profile);
        let facts = Facts::new(graph, graph.schedule(), &speeds);
        match fit_faster(&mut Greedy::new(&facts), options, None, OnNoPlan::Skip) {
            Ok(fitted) => Ok(fitted.is_some()),
            Err(Error::NoPlan { .. }) => Ok(false),
            Err(e) => Err(e),
        }
    };
    if fits(g)? {
        return Ok(true);
    }
    for parts in [MAX_PARTS, 4, 2] {
        let Some((patch, _)) = batch_patch(g, &BatchSplit { parts, min_bytes: 0 }) else { continue };
        // A split the emission cannot carry out is not a candidate.
        let Ok((graph, _)) = pipeline::apply_checked(g, &patch) else { continue };
        if fits(&graph)? {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Every budget of the ladder from `arena` down (each [`RUNG_RATIO`] of the
/// one above) that is at most `budget` and at least `floor` (below it no
/// plan fits), highest first. The ladder does not depend on the budget, so
/// a larger budget plans at every rung a smaller one plans at.
fn rungs_below(arena: u64, budget: u64, floor: u64) -> Vec<u64> {
    let mut rung = arena as f64;
    let mut found = Vec::new();
    while rung >= 1.0 {
        rung *= RUNG_RATIO;
        let bytes = rung as u64;
        if bytes < floor {
            break;
        }
        if bytes <= budget {
            found.push(bytes);
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
    let fit = match tflms::fit(g, &config, FreeKnobs::ALL, options.budget) {
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
    if !footprint.fits(options.budget) {
        return Ok(None);
    }
    let reports = report::from_plan(&graph, &timeline);
    let plan_record = Decisions {
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
    fn rungs_are_fixed_by_the_arena_and_span_the_budget_to_the_floor() {
        assert_eq!(rungs_below(12800, 13000, 12400), vec![12700, 12600, 12502, 12404]);
        assert_eq!(
            rungs_below(12800, 12650, 12300),
            vec![12600, 12502, 12404, 12307],
            "the same rungs below a lower budget"
        );
        assert_eq!(rungs_below(12800, 12600, 12500), vec![12600, 12502], "a rung equal to the budget is planned at");
        assert!(rungs_below(1600, 100, 200).is_empty(), "a budget below the floor has no rung");
        assert!(rungs_below(1600, 1600, 1600).is_empty(), "no rung at or above the floor");
    }
}
