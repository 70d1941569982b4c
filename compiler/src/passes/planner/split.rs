//! The planner's split candidate (TSPLIT §III-IV): when no swap-and-recompute
//! plan fits — at a large batch one op's own working set exceeds the device
//! — ops run in parts along the batch ([`crate::passes::split::batch_patch`]),
//! and the planner then swaps or recomputes the micro-tensors one by one.
//!
//! A split is chosen by its predicted cost, not a fixed rule: for each number
//! of parts, the size threshold that splits the fewest ops and still lets a
//! plan fit; of those, the split whose planned graph the full timeline
//! predicts fastest (more parts: more kernel launches of smaller, less
//! efficient micro-ops; fewer parts: more swapping and recomputing).

use super::{fit_fastest, Fitted, PlanOptions, Speeds};
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
pub struct ChosenSplit {
    pub patch: Patch,
    pub choice: SplitChoice,
}

/// The batch split under which a swap-and-recompute plan fits `options`,
/// when none fits `g` as it is (`None` when one does); the fastest on
/// `profile`. Fails with [`Error::NoPlan`] (of the unsplit graph) when no
/// split makes a plan fit.
pub fn choose_split(g: &Graph, profile: &DeviceProfile, options: PlanOptions) -> Result<Option<ChosenSplit>> {
    let unsplit = match fit_fastest(g, &Speeds::from_profile(g, profile), profile, options) {
        Ok(_) => return Ok(None),
        Err(e @ Error::NoPlan { .. }) => e,
        Err(e) => return Err(e),
    };
    let step = |f: &Fitted| timeline::simulate(&f.graph, f.graph.schedule(), profile).step_seconds;
    let mut best: Option<(f64, ChosenSplit)> = None;
    let mut tried = 0;
    // The smallest peak a split reaches when none fits, of which pool, and where.
    let mut closest: Option<(u64, &'static str, String, BatchSplit)> = None;
    for parts in 2..=MAX_PARTS {
        for min_bytes in thresholds(g) {
            let split = BatchSplit { parts, min_bytes };
            let Some((patch, report)) = batch_patch(g, &split) else { continue };
            tried += 1;
            let (graph, _) = pipeline::apply_checked(g, &patch)?;
            match fit_fastest(&graph, &Speeds::from_profile(&graph, profile), profile, options) {
                Ok(fitted) => {
                    let seconds = step(&fitted);
                    if best.as_ref().is_none_or(|(s, _)| seconds < *s) {
                        let choice = SplitChoice { report, step_seconds: seconds, unsplit_step_seconds: 0.0, tried: 0 };
                        best = Some((seconds, ChosenSplit { patch, choice }));
                    }
                    break;
                }
                Err(Error::NoPlan { pool, why, smallest, .. }) => {
                    if closest.as_ref().is_none_or(|(c, _, _, _)| smallest < *c) {
                        closest = Some((smallest, pool, why, split));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
    let Some((_, mut chosen)) = best else { return Err(no_split_fits(unsplit, closest)) };
    chosen.choice.tried = tried;
    chosen.choice.unsplit_step_seconds = timeline::simulate(g, g.schedule(), profile).step_seconds;
    Ok(Some(chosen))
}

/// The error when no split fits either: the unsplit graph's reason, and the
/// smallest peak of any split when it is below the unsplit graph's (of the
/// same pool).
fn no_split_fits(unsplit: Error, closest: Option<(u64, &'static str, String, BatchSplit)>) -> Error {
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

/// A budget search's question, answered quickly: the plan of the first of
/// the splits of every op into 8, 4 and 2 parts under which one fits
/// `options` (`None` when none does).
pub fn fit_split(g: &Graph, profile: &DeviceProfile, options: PlanOptions) -> Result<Option<Fitted>> {
    for parts in [MAX_PARTS, 4, 2] {
        let Some((patch, _)) = batch_patch(g, &BatchSplit { parts, min_bytes: 0 }) else { continue };
        let (graph, _) = pipeline::apply_checked(g, &patch)?;
        match super::fit(&graph, &Speeds::from_profile(&graph, profile), options) {
            Ok(fitted) => return Ok(Some(fitted)),
            Err(Error::NoPlan { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(None)
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
