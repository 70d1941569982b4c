//! The planner's split candidate (TSPLIT §III-IV): when no swap-and-recompute
//! plan fits — at a large batch one op's own working set exceeds the device
//! — ops run in parts along the batch ([`crate::passes::split::batch_patch`]),
//! and the planner then swaps or recomputes the micro-tensors one by one.
//!
//! A split is chosen by its predicted cost, not a fixed rule: for each number
//! of parts, the size threshold that splits the fewest ops and still lets a
//! plan fit, and the smaller ones while their plans are faster; the search ([`super::search`]) keeps whichever of those and of
//! the unsplit plans the full timeline predicts fastest (more parts: more
//! kernel launches of smaller, less efficient micro-ops; fewer parts: more
//! swapping and recomputing).

use super::{fit_fastest_below, Facts, Fitted, Greedy, OnNoPlan, PlanOptions, Speeds};
use crate::analysis::profile::DeviceProfile;
use crate::analysis::timeline;
use crate::egraph::rules::split::MAX_PARTS;
use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::passes::split::{batch_patch, BatchSplit, BatchSplitReport};
use crate::pipeline::{self, Patch};
use serde::Serialize;

/// The split the planner chose and what it predicts.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SplitChoice {
    /// What the split did.
    pub report: BatchSplitReport,
    /// Predicted step time of the split and planned graph.
    pub step_seconds: f64,
    /// Predicted step time of the graph unsplit, with no memory limit.
    pub unsplit_step_seconds: f64,
    /// Splits tried (pairs of parts and threshold), the chosen one included.
    pub tried: usize,
}

/// A chosen split: the patch to apply before planning, and its choice.
#[derive(Clone)]
pub struct ChosenSplit {
    pub patch: Patch,
    pub choice: SplitChoice,
}

/// The split plans of `g` for `options`: for each number of parts, the
/// split with the largest size threshold under which a plan fits, and each
/// smaller threshold's while its plan is faster still (splitting more ops
/// shrinks what is recomputed or swapped), with its plan
/// ([`super::fit_fastest`]); how many splits were tried; and, when none
/// fits, the closest.
pub(super) struct SplitPlans {
    pub fitted: Vec<(ChosenSplit, Fitted)>,
    pub tried: usize,
    /// The smallest peak a split reaches when none fits, of which pool, why, and the split.
    pub closest: Option<(u64, &'static str, String, BatchSplit)>,
}

/// [`SplitPlans`] of `g` for `options`, timed on `profile`. With a step
/// `to_beat` (seconds; then also the fastest split plan so far), a number of
/// parts stops at the first split whose graph, or plan, is predicted no
/// faster (splitting more ops only adds micro-ops), before its plan is
/// placed ([`fit_fastest_below`]): each plan found is faster than the last.
pub(super) fn split_plans(
    g: &Graph,
    profile: &DeviceProfile,
    options: PlanOptions,
    mut to_beat: Option<f64>,
) -> Result<SplitPlans> {
    let step = |graph: &Graph| timeline::simulate(graph, graph.schedule(), profile).step_seconds;
    let unsplit_step_seconds = step(g);
    let mut found = SplitPlans { fitted: Vec::new(), tried: 0, closest: None };
    for parts in 2..=MAX_PARTS {
        for min_bytes in thresholds(g) {
            let split = BatchSplit { parts, min_bytes };
            let Some((patch, report)) = batch_patch(g, &split) else { continue };
            found.tried += 1;
            // A split the emission cannot carry out is not a candidate.
            let Ok((graph, _)) = pipeline::apply_checked(g, &patch) else { continue };
            if to_beat.is_some_and(|seconds| step(&graph) >= seconds) {
                break;
            }
            let speeds = Speeds::from_profile(&graph, profile);
            let facts = Facts::new(&graph, graph.schedule(), &speeds);
            // The closest split's peak is reported when none fits.
            match fit_fastest_below(&mut Greedy::new(&facts), profile, options, to_beat, OnNoPlan::Explain) {
                Ok(Some(fitted)) => {
                    let step_seconds = step(&fitted.graph);
                    to_beat = Some(step_seconds);
                    let choice = SplitChoice { report, step_seconds, unsplit_step_seconds, tried: 0 };
                    found.fitted.push((ChosenSplit { patch, choice }, fitted));
                }
                Ok(None) => break,
                Err(Error::NoPlan { pool, why, smallest, .. }) => {
                    if found.closest.as_ref().is_none_or(|(c, _, _, _)| smallest < *c) {
                        found.closest = Some((smallest, pool, why, split));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
    Ok(found)
}

/// The error when no split fits either: the unsplit graph's reason, and the
/// smallest peak of any split when it is below the unsplit graph's (of the
/// same pool).
pub(super) fn no_split_fits(unsplit: Error, closest: Option<(u64, &'static str, String, BatchSplit)>) -> Error {
    match (unsplit, closest) {
        (Error::NoPlan { pool, why, smallest, budget }, Some((peak, split_pool, split_why, split)))
            if peak < smallest && split_pool == pool =>
        {
            let why = format!("{why}; split along the batch in {} parts, {split_why}", split.parts);
            Error::NoPlan { pool, why, smallest: peak, budget }
        }
        (unsplit, _) => unsplit,
    }
}

/// Size thresholds to try, largest first: halving from the largest tensor
/// down to 1/1024 of it, then every op.
fn thresholds(g: &Graph) -> Vec<u64> {
    let largest =
        g.node_ids().flat_map(|n| g.node(n).outputs.iter()).map(|&t| g.tensor(t).ty.bytes()).max().unwrap_or(0);
    let mut found: Vec<u64> = (0..=10).map(|k| largest.saturating_mul(2) >> k).collect();
    found.push(0);
    found
}
