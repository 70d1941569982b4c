//! The planner's decisions as a report: for each, what it did (kind, tensor,
//! ΔM in bytes, ΔT in seconds) and why, in JSON and text; and the same
//! report read back from the plan a compiled graph carries.

use super::facts::Facts;
use super::{Decision, Kind};
use crate::analysis::timeline::Timeline;
use crate::ir::{Graph, NodeId};
use crate::units::format_bytes;
use serde::Serialize;
use std::fmt::Write;

/// The `kind` of a swap decision.
pub const SWAP: &str = "swap";
/// The `kind` of a recompute decision.
pub const RECOMPUTE: &str = "recompute";

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
            let d = &facts.droppable[decision.droppable];
            let (kind, how) = match &decision.kind {
                Kind::Swap { trigger } => {
                    (SWAP, format!("swapped out after '{}', in after '{}'", name(d.gap_start), name(*trigger)))
                }
                Kind::Recompute { chain } => {
                    (RECOMPUTE, remade_by(chain.nodes.iter().map(|&n| g.node(n).op.as_str()), name(d.gap_end)))
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

/// The decisions of the plan `g` carries (swaps, then recomputes), with
/// their ΔT on the predicted timeline `time`: the stall charged to a swap's
/// copies, the kernel time of a recompute's chain.
pub fn from_plan(g: &Graph, time: &Timeline) -> Vec<DecisionReport> {
    let mut event = vec![None; g.node_bound()];
    for e in &time.events {
        event[e.node.index()] = Some(e);
    }
    let stall = |n: NodeId| event[n.index()].map_or(0.0, |e| e.stall);
    let busy = |n: NodeId| event[n.index()].map_or(0.0, |e| e.end - e.start);
    let name = |n: NodeId| &g.node(n).name;
    let swaps = g.plan.swaps.iter().map(|s| {
        let swap_ins: Vec<String> = s
            .swap_ins
            .iter()
            .map(|i| match i.trigger {
                Some(t) => format!("in after '{}'", name(t)),
                None => "in when first read".to_string(),
            })
            .collect();
        DecisionReport {
            kind: SWAP,
            tensor: g.tensor(s.tensor).name.clone(),
            bytes: g.tensor(s.tensor).ty.bytes(),
            extra_seconds: stall(s.swap_out) + s.swap_ins.iter().map(|i| stall(i.node)).sum::<f64>(),
            why: format!("swapped out by '{}', {}", name(s.swap_out), swap_ins.join(", ")),
        }
    });
    let recomputes = g.plan.recomputes.iter().map(|r| DecisionReport {
        kind: RECOMPUTE,
        tensor: g.tensor(r.tensor).name.clone(),
        bytes: g.tensor(r.tensor).ty.bytes(),
        extra_seconds: r.chain.iter().map(|&n| busy(n)).sum(),
        why: remade_by(r.chain.iter().map(|&n| g.node(n).op.as_str()), name(r.before)),
    });
    swaps.chain(recomputes).collect()
}

/// Why a recompute is there, as the plan records it: the ops of its chain
/// and the op it runs before.
fn remade_by<'a>(ops: impl Iterator<Item = &'a str>, before: &str) -> String {
    format!("re-made by {} before '{before}'", ops.collect::<Vec<_>>().join("→"))
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

#[cfg(test)]
mod tests {
    #[test]
    fn a_recompute_names_the_ops_of_its_chain() {
        assert_eq!(super::remade_by(["Relu"].into_iter(), "conv2"), "re-made by Relu before 'conv2'");
        assert_eq!(super::remade_by(["Relu", "Conv"].into_iter(), "conv2"), "re-made by Relu→Conv before 'conv2'");
    }
}
