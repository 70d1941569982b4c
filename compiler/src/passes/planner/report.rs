//! The planner's decisions as a report: for each, what it did (kind, tensor,
//! ΔM in bytes, ΔT in seconds) and why, in JSON and text.

use super::facts::Facts;
use super::{Decision, Kind};
use crate::units::format_bytes;
use serde::Serialize;
use std::fmt::Write;

/// One decision, as reported.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DecisionReport {
    /// `swap` or `recompute`.
    pub kind: &'static str,
    pub tensor: String,
    /// ΔM: device bytes removed while the decision holds.
    pub bytes: u64,
    /// ΔT: predicted extra step time.
    pub extra_seconds: f64,
    /// The peak it relieves and how.
    pub why: String,
}

/// The report of each decision, in the order they were taken.
pub fn decision_reports(facts: &Facts<'_>, decisions: &[Decision]) -> Vec<DecisionReport> {
    let g = facts.g;
    let name = |step: usize| &g.node(facts.schedule[step]).name;
    decisions
        .iter()
        .map(|decision| {
            let d = &facts.droppable[facts.index[decision.tensor.index()].expect("decisions are on droppable tensors")];
            let (kind, how) = match &decision.kind {
                Kind::Swap { trigger } => {
                    ("swap", format!("swapped out after '{}', in after '{}'", name(d.last_forward), name(*trigger)))
                }
                Kind::Recompute { chain } => {
                    let ops: Vec<&str> = chain.nodes.iter().map(|&n| g.node(n).op.as_str()).collect();
                    ("recompute", format!("re-made by {} before '{}'", ops.join("→"), name(d.first_backward)))
                }
            };
            DecisionReport {
                kind,
                tensor: g.tensor(decision.tensor).name.clone(),
                bytes: decision.bytes,
                extra_seconds: decision.extra_seconds,
                why: format!("over budget at '{}': {how}", name(decision.peak_step)),
            }
        })
        .collect()
}

/// One line per decision, for people.
pub fn to_text(decisions: &[DecisionReport]) -> String {
    let mut s = String::new();
    for d in decisions {
        let _ = writeln!(
            s,
            "  {:<9} {:>12}  +{:.3} ms  {}: {}",
            d.kind,
            format_bytes(d.bytes),
            d.extra_seconds * 1e3,
            d.tensor,
            d.why
        );
    }
    s
}
