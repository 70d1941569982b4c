//! Running the rules on an e-graph, always within limits that are counts
//! sized from the e-graph the run starts with, and the reason a run stopped.
//!
//! A run never looks at the clock: the same terms always take the same
//! iterations and end with the same e-graph, on any machine and under any
//! load.
//!
//! Each iteration searches the rules, then applies every match (egg's simple
//! schedule). Only the first iteration searches every e-class; the next ones
//! search the classes where a new match can appear:
//! those the last iteration created, merged or gave a shape
//! ([`TermAnalysis::touched`](super::lang::TermAnalysis::touched)), and their ancestors up to [`RULE_DEPTH`]
//! levels (a rule looks at most that deep below the class it matches), and
//! for a new e-node also the other readers of its children (rules look up
//! terms over a class's children, such as the windows of its input). Facts
//! about the parts of a split travel one op per iteration, so a split along
//! a whole training graph takes about as many iterations as the graph is
//! deep, each costing what changed rather than the whole e-graph.
//!
//! Rebuilding (restoring congruence) visits every class, so it is done only
//! when nothing is left to search or when the iterations since the last one
//! have searched as many classes as the e-graph holds: its cost stays within
//! the searches'. egg searches patterns only in a rebuilt e-graph, so the
//! iterations in between run the class rules (`rules::class_rule`, which
//! read classes and add terms in any state) and leave the classes they
//! searched to the pattern rules after the next rebuild. Matches missed in
//! between (a term not yet merged with its congruent twin) are found after
//! it: what is proven is the same, sooner.

use super::lang::{Term, TermGraph, TermRewrite};
use super::rules;
use egg::{Id, Language, SearchMatches};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// Bounds on one equality-saturation run, as counts per e-node of the terms
/// the run starts with: a larger graph may take more, the same graph always
/// takes the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Most e-nodes the e-graph may hold, per e-node it starts with (and
    /// never fewer than [`MIN_NODES`]).
    pub nodes_per_term: usize,
    /// Most rule iterations, per e-node the e-graph starts with.
    pub iterations_per_term: usize,
}

/// The node limit of a run on a small e-graph.
pub const MIN_NODES: usize = 100_000;

/// How many levels below the class it matches a rule looks at (a pattern's
/// depth, or a class rule reading its inputs' concatenations and their
/// parts' shapes).
pub const RULE_DEPTH: usize = 2;

impl Default for Limits {
    /// 16 e-nodes and 4 iterations per e-node the run starts with. Proving a
    /// swap, recompute or split rewrite adds fewer e-nodes than the two
    /// graphs have, and a batch split along a training graph's whole depth
    /// needs about as many iterations as the graph is deep (facts about parts
    /// travel one op per iteration, a few rules per op).
    fn default() -> Limits {
        Limits { nodes_per_term: 16, iterations_per_term: 4 }
    }
}

impl Limits {
    /// The e-node and iteration limits of a run starting from `terms` e-nodes.
    pub fn counts(&self, terms: usize) -> (usize, usize) {
        let nodes = self.nodes_per_term.saturating_mul(terms).max(MIN_NODES);
        (nodes, self.iterations_per_term.saturating_mul(terms))
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
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::Goal => f.write_str("goal reached"),
            Stop::Saturated => f.write_str("saturated"),
            Stop::IterationLimit(n) => write!(f, "stopped at the iteration limit ({n})"),
            Stop::NodeLimit(n) => write!(f, "stopped at the node limit ({n} e-nodes)"),
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
    /// E-class searches, summed over the iterations: the run's work.
    pub searched: usize,
    /// How often each rule changed the e-graph.
    pub applied: BTreeMap<String, usize>,
}

/// Runs every rule on `egraph` within `limits` until it saturates, a limit
/// is hit, or `goal` holds at the start of an iteration.
pub fn saturate(egraph: TermGraph, limits: &Limits, goal: impl FnMut(&TermGraph) -> bool) -> Saturation {
    run(egraph, &rules::all(), limits, goal)
}

/// Runs `rules` on `egraph` as [`saturate`] runs every rule.
pub fn run(
    mut egraph: TermGraph,
    rules: &[TermRewrite],
    limits: &Limits,
    mut goal: impl FnMut(&TermGraph) -> bool,
) -> Saturation {
    egraph.rebuild();
    let (node_limit, iteration_limit) = limits.counts(egraph.total_size());
    egraph.analysis.touched.clear();
    let mut frontier: Vec<Id> = egraph.classes().map(|c| c.id).collect();
    frontier.sort_unstable();
    // Classes searched since the last rebuild by the class rules alone: the
    // pattern rules search them after the next one.
    let mut backlog: Vec<Id> = Vec::new();
    let mut applied = BTreeMap::new();
    let (mut iterations, mut searched, mut since_rebuild) = (0, 0, 0);
    let stop = loop {
        if goal(&egraph) {
            break Stop::Goal;
        }
        if !egraph.clean && (frontier.is_empty() || since_rebuild >= egraph.number_of_classes()) {
            egraph.rebuild();
            since_rebuild = 0;
            let known = egraph.nodes().len();
            frontier.extend(next_frontier(&mut egraph, known));
            frontier.append(&mut backlog);
            frontier = frontier.into_iter().map(|c| egraph.find(c)).collect();
            frontier.sort_unstable();
            frontier.dedup();
            continue;
        }
        if frontier.is_empty() {
            break Stop::Saturated;
        }
        if iterations >= iteration_limit {
            break Stop::IterationLimit(iterations);
        }
        let clean = egraph.clean;
        if !clean {
            backlog.extend(&frontier);
        }
        searched += frontier.len();
        since_rebuild += frontier.len();
        // egg searches patterns only in a rebuilt e-graph.
        let matches: Vec<Vec<SearchMatches<Term>>> = rules
            .iter()
            .map(|rule| {
                if !clean && rule.searcher.get_pattern_ast().is_some() {
                    return Vec::new();
                }
                frontier
                    .iter()
                    .filter_map(|&c| rule.searcher.search_eclass_with_limit(&egraph, c, usize::MAX))
                    .collect()
            })
            .collect();
        let known = egraph.nodes().len();
        for (rule, matches) in rules.iter().zip(&matches) {
            if matches.is_empty() {
                continue;
            }
            let changed = rule.apply(&mut egraph, matches).len();
            if changed > 0 {
                *applied.entry(rule.name.to_string()).or_insert(0) += changed;
            }
        }
        iterations += 1;
        if egraph.total_size() > node_limit {
            break Stop::NodeLimit(egraph.total_size());
        }
        frontier = next_frontier(&mut egraph, known);
    };
    egraph.rebuild();
    Saturation { stop, iterations, searched, applied, egraph }
}

/// The classes the next iteration searches, sorted: every class touched
/// since the last call and its ancestors up to [`RULE_DEPTH`] levels; for
/// each e-node added (those from `known` on), the other readers of its
/// tensor children (not of the integers, which nearly every split reads);
/// every class when a leaf was added (rules look up integers by value).
fn next_frontier(egraph: &mut TermGraph, known: usize) -> Vec<Id> {
    let touched = std::mem::take(&mut egraph.analysis.touched);
    let mut level: Vec<Id> = touched.iter().map(|&id| egraph.find(id)).collect();
    for node in &egraph.nodes()[known..] {
        if node.is_leaf() {
            let mut every: Vec<Id> = egraph.classes().map(|c| c.id).collect();
            every.sort_unstable();
            return every;
        }
        for &child in node.children().iter().filter(|&&c| egraph[c].data.shape().is_some()) {
            level.extend(egraph[child].parents().map(|p| egraph.find(p)));
        }
    }
    level.sort_unstable();
    level.dedup();
    let mut frontier = level.clone();
    for _ in 0..RULE_DEPTH {
        let mut parents: Vec<Id> = level.iter().flat_map(|&c| egraph[c].parents()).map(|p| egraph.find(p)).collect();
        parents.sort_unstable();
        parents.dedup();
        frontier.extend(&parents);
        level = parents;
    }
    frontier.sort_unstable();
    frontier.dedup();
    frontier
}
