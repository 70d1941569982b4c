//! Running the rules on an e-graph, always within explicit limits, and the
//! reason a run stopped.

use super::lang::{Term, TermAnalysis, TermGraph};
use super::rules;
use egg::{Runner, SimpleScheduler, StopReason};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// Bounds on one equality-saturation run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Most e-nodes the e-graph may hold.
    pub nodes: usize,
    /// Most rule iterations.
    pub iterations: usize,
    /// Most wall-clock time.
    pub time: Duration,
}

impl Default for Limits {
    /// One million e-nodes, 1024 iterations, 60 seconds: more than proving
    /// a swap, recompute or split rewrite of a ResNet-50 training graph
    /// takes (a batch split in parts along its whole depth needs a few
    /// hundred iterations: facts about parts travel one op per iteration).
    fn default() -> Limits {
        Limits { nodes: 1_000_000, iterations: 1024, time: Duration::from_secs(60) }
    }
}

/// Why a run stopped.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub enum Stop {
    /// What the run was for was reached (every pair proven equal).
    Goal,
    /// No rule changes the e-graph any more.
    Saturated,
    /// The iteration limit was reached after this many iterations.
    IterationLimit(usize),
    /// The node limit was passed with this many e-nodes.
    NodeLimit(usize),
    /// The time limit was passed after this many seconds.
    TimeLimit(f64),
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::Goal => f.write_str("goal reached"),
            Stop::Saturated => f.write_str("saturated"),
            Stop::IterationLimit(n) => write!(f, "stopped at the iteration limit ({n})"),
            Stop::NodeLimit(n) => write!(f, "stopped at the node limit ({n} e-nodes)"),
            Stop::TimeLimit(s) => write!(f, "stopped at the time limit ({s:.1} s)"),
        }
    }
}

/// The e-graph after a run, and how the run went.
pub struct Saturation {
    /// The saturated e-graph.
    pub egraph: TermGraph,
    /// Why the run stopped.
    pub stop: Stop,
    /// Iterations that ran the rules.
    pub iterations: usize,
    /// How often each rule changed the e-graph.
    pub applied: BTreeMap<String, usize>,
}

/// Runs every rule on `egraph` within `limits` until it saturates, a limit
/// is hit, or `goal` holds at the start of an iteration. The scheduler is
/// egg's simple one: the rules only add terms for splits already present,
/// so no rule needs to be banned for growing the e-graph.
pub fn saturate(egraph: TermGraph, limits: &Limits, mut goal: impl FnMut(&TermGraph) -> bool + 'static) -> Saturation {
    let rules = rules::all();
    let runner: Runner<Term, TermAnalysis> = Runner::new(TermAnalysis::default())
        .with_egraph(egraph)
        .with_node_limit(limits.nodes)
        .with_iter_limit(limits.iterations)
        .with_time_limit(limits.time)
        .with_scheduler(SimpleScheduler)
        .with_hook(move |runner| if goal(&runner.egraph) { Err("goal reached".into()) } else { Ok(()) })
        .run(&rules);
    let stop = match runner.stop_reason {
        Some(StopReason::Saturated) => Stop::Saturated,
        Some(StopReason::IterationLimit(n)) => Stop::IterationLimit(n),
        Some(StopReason::NodeLimit(n)) => Stop::NodeLimit(n),
        Some(StopReason::TimeLimit(s)) => Stop::TimeLimit(s),
        // The hook is the only other way to stop.
        Some(StopReason::Other(_)) | None => Stop::Goal,
    };
    let mut applied = BTreeMap::new();
    for iteration in &runner.iterations {
        for (rule, count) in &iteration.applied {
            *applied.entry(rule.to_string()).or_insert(0) += count;
        }
    }
    // A run stopped by its goal ends with an iteration that ran no rule.
    let iterations = runner.iterations.len() - usize::from(stop == Stop::Goal);
    Saturation { stop, iterations, applied, egraph: runner.egraph }
}
