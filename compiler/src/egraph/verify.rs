//! Proving that a rewritten graph computes what its original computes
//! (`lms verify`, and after every rewrite in `lms compile`).
//!
//! The terms of every output and of every variable update (the value an
//! update edge writes into its variable) of both graphs go into one e-graph;
//! the rules run to saturation within explicit limits; an output or update is
//! proven when its two terms end in the same e-class. Outputs are matched by
//! position, updates by the variable's name. Control edges carry no meaning
//! for the terms: the rewritten graph, control edges included, is checked
//! separately to be acyclic. The terms do not see the bytes of variables
//! and constants: [`values`](super::values) compares those by content hash,
//! and a proof needs both.

use super::lang::{TermAnalysis, TermGraph};
use super::saturate::{saturate, Limits, Stop};
use super::terms::TermBuilder;
use super::values::{self, ValueItem, Verdict};
use crate::analysis::order;
use crate::error::{Error, Result};
use crate::ir::{Action, Graph};
use crate::shape::declared;
use egg::Id;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write};
use std::time::Instant;

/// What is compared: an output or a variable's update.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub enum What {
    /// A graph output.
    Output {
        /// Its position among the outputs.
        index: usize,
        /// Its tensor's name in the original (in the rewritten graph when
        /// the original has no such output).
        name: String,
    },
    /// The value an update edge writes into a variable.
    Update {
        /// The variable's name.
        variable: String,
    },
}

impl fmt::Display for What {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            What::Output { index, name } => write!(f, "output {index} '{name}'"),
            What::Update { variable } => write!(f, "the update of variable '{variable}'"),
        }
    }
}

/// The verdict on one output or update.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Status {
    /// Both graphs compute it by terms proven equal.
    Proven,
    /// Both graphs compute it, but the terms were not proven equal.
    Unproven,
    /// Only the original has it.
    MissingInRewritten,
    /// Only the rewritten graph has it.
    MissingInOriginal,
}

/// One output or update and its verdict.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Item {
    /// The output or update.
    pub what: What,
    /// Its verdict.
    pub status: Status,
}

/// How many unproven items [`VerifyReport::to_text`] lists when not verbose.
pub const UNPROVEN_LISTED: usize = 10;

/// What [`check`] found.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct VerifyReport {
    /// The outputs by position, then the updates by variable name.
    pub items: Vec<Item>,
    /// Variables' initial values and constants, compared by content hash.
    pub values: Vec<ValueItem>,
    /// E-nodes after saturation.
    pub nodes: usize,
    /// E-classes after saturation.
    pub classes: usize,
    /// Rule iterations run.
    pub iterations: usize,
    /// E-class searches over the iterations (each searches every rule).
    pub searched: usize,
    /// Wall-clock time, building the terms included.
    pub seconds: f64,
    /// Why saturation stopped.
    pub stop: Stop,
    /// How often each rule changed the e-graph.
    pub applied: BTreeMap<String, usize>,
}

/// Compares `rewritten` with `original` and reports each output and update.
/// Fails when the rewritten graph has a cycle (control edges included), when
/// a graph reads a tensor that depends on itself, when a variable is written
/// twice, or when the graphs use different opsets; an unproven item is not an
/// error here (see [`verify`]).
pub fn check(original: &Graph, rewritten: &Graph, limits: &Limits) -> Result<VerifyReport> {
    let start = Instant::now();
    order::schedule(rewritten)?;
    if original.opset != rewritten.opset {
        return Err(Error::Unproven {
            what: "the graphs".into(),
            reason: format!("use different opsets ({} and {})", original.opset, rewritten.opset),
        });
    }
    if let Some(difference) = original.input_difference(rewritten, ["the original", "the rewritten graph"]) {
        return Err(Error::Unproven { what: "the graphs".into(), reason: format!("differ: {difference}") });
    }
    if let Some((id, why)) = declared::first_mismatch(rewritten) {
        let node = rewritten.node(id);
        return Err(Error::Unproven {
            what: format!("node '{}' ({}) of the rewritten graph", node.name, node.op),
            reason: format!("does not fit its tensors: {why}"),
        });
    }
    let mut egraph = TermGraph::new(TermAnalysis::new(original.opset));
    let a = Signature::add(&mut egraph, original)?;
    let b = Signature::add(&mut egraph, rewritten)?;

    let pairs = Signature::pairs(&a, &b);
    let goal: Vec<(Id, Id)> = pairs.iter().filter_map(|(_, x, y)| Some(((*x)?, (*y)?))).collect();
    let run = saturate(egraph, limits, move |egraph| goal.iter().all(|&(x, y)| egraph.find(x) == egraph.find(y)));
    let items = pairs
        .into_iter()
        .map(|(what, x, y)| {
            let status = match (x, y) {
                (Some(x), Some(y)) if run.egraph.find(x) == run.egraph.find(y) => Status::Proven,
                (Some(_), Some(_)) => Status::Unproven,
                (Some(_), None) => Status::MissingInRewritten,
                (None, _) => Status::MissingInOriginal,
            };
            Item { what, status }
        })
        .collect();
    Ok(VerifyReport {
        items,
        values: values::compare(original, rewritten),
        nodes: run.egraph.total_number_of_nodes(),
        classes: run.egraph.number_of_classes(),
        iterations: run.iterations,
        searched: run.searched,
        seconds: start.elapsed().as_secs_f64(),
        stop: run.stop,
        applied: run.applied,
    })
}

/// [`check`], failing with [`Error::Unproven`] naming the first output or
/// update that is not proven equal.
pub fn verify(original: &Graph, rewritten: &Graph, limits: &Limits) -> Result<VerifyReport> {
    check(original, rewritten, limits)?.require_proven()
}

/// The outputs and updates of one graph as e-classes.
struct Signature {
    /// (tensor name, class) of each output.
    outputs: Vec<(String, Id)>,
    /// Class of the value written into each variable, by variable name.
    updates: BTreeMap<String, Id>,
}

impl Signature {
    /// Adds the terms of `g`'s outputs and updates to `egraph`.
    fn add(egraph: &mut TermGraph, g: &Graph) -> Result<Signature> {
        let mut terms = TermBuilder::new(g);
        let mut outputs = Vec::with_capacity(g.outputs.len());
        for &t in &g.outputs {
            outputs.push((g.tensor(t).name.clone(), terms.tensor(egraph, t)?));
        }
        let mut updates = BTreeMap::new();
        for (_, variable, edge) in g.edges() {
            let (Action::Update, Some(value)) = (edge.action, edge.tensor) else {
                continue;
            };
            let node = g.node(variable);
            if updates.insert(node.name.clone(), terms.tensor(egraph, value)?).is_some() {
                return Err(Error::Node {
                    node: node.name.clone(),
                    op: node.op.clone(),
                    reason: "is written by two update edges".into(),
                });
            }
        }
        Ok(Signature { outputs, updates })
    }

    /// The items to compare, outputs by position then updates by variable
    /// name: (what, original's class, rewritten's class).
    fn pairs(a: &Signature, b: &Signature) -> Vec<(What, Option<Id>, Option<Id>)> {
        let mut pairs = Vec::new();
        for index in 0..a.outputs.len().max(b.outputs.len()) {
            let (x, y) = (a.outputs.get(index), b.outputs.get(index));
            let name = x.or(y).map(|(name, _)| name.clone()).unwrap_or_default();
            pairs.push((What::Output { index, name }, x.map(|o| o.1), y.map(|o| o.1)));
        }
        let variables: BTreeSet<&String> = a.updates.keys().chain(b.updates.keys()).collect();
        for variable in variables {
            let what = What::Update { variable: variable.clone() };
            pairs.push((what, a.updates.get(variable).copied(), b.updates.get(variable).copied()));
        }
        pairs
    }
}

impl VerifyReport {
    /// Number of items proven.
    pub fn proven(&self) -> usize {
        self.items.iter().filter(|i| i.status == Status::Proven).count()
    }

    /// The first item not proven.
    pub fn first_unproven(&self) -> Option<&Item> {
        self.items.iter().find(|i| i.status != Status::Proven)
    }

    /// The report when every item is proven and every stored value equal,
    /// else [`Error::Unproven`] naming the first value that differs, or else
    /// the first item not proven.
    pub fn require_proven(self) -> Result<VerifyReport> {
        if let Some((item, reason)) = self.values.iter().find_map(|v| Some((v, v.reason()?))) {
            return Err(Error::Unproven { what: item.what.to_string(), reason });
        }
        let Some(item) = self.first_unproven() else {
            return Ok(self);
        };
        let reason = match item.status {
            Status::MissingInRewritten => "is missing in the rewritten graph".to_string(),
            Status::MissingInOriginal => "is not in the original graph".to_string(),
            Status::Proven | Status::Unproven => format!(
                "is not proven equal to the original's ({} of {} outputs and updates unproven; e-graph {} after {} iteration(s))",
                self.items.len() - self.proven(),
                self.items.len(),
                self.stop,
                self.iterations
            ),
        };
        Err(Error::Unproven { what: item.what.to_string(), reason })
    }

    /// The report for people: a summary, then with `verbose` the rules
    /// applied and every item, else the first [`UNPROVEN_LISTED`] items not
    /// proven.
    pub fn to_text(&self, verbose: bool) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "proven equal: {} of {} outputs and variable updates (e-graph {} nodes, {} classes; {} after {} iteration(s), {} class searches, {:.2} s)",
            self.proven(),
            self.items.len(),
            self.nodes,
            self.classes,
            self.stop,
            self.iterations,
            self.searched,
            self.seconds
        );
        let equal = self.values.iter().filter(|v| v.verdict == Verdict::Equal).count();
        let _ = writeln!(s, "equal content: {equal} of {} variables' initial values and constants", self.values.len());
        for value in &self.values {
            if let Some(reason) = value.reason() {
                let _ = writeln!(s, "  {} {reason}", value.what);
            }
        }
        if verbose && !self.applied.is_empty() {
            let rules: Vec<String> = self.applied.iter().map(|(rule, n)| format!("{rule} ×{n}")).collect();
            let _ = writeln!(s, "rules applied: {}", rules.join(", "));
        }
        let listed = self.items.iter().filter(|i| verbose || i.status != Status::Proven);
        let limit = if verbose { usize::MAX } else { UNPROVEN_LISTED };
        for item in listed.clone().take(limit) {
            let verdict = match item.status {
                Status::Proven => "proven",
                Status::Unproven => "NOT PROVEN",
                Status::MissingInRewritten => "MISSING in the rewritten graph",
                Status::MissingInOriginal => "NOT IN the original graph",
            };
            let _ = writeln!(s, "  {}: {verdict}", item.what);
        }
        let more = listed.count().saturating_sub(limit);
        if more > 0 {
            let _ = writeln!(s, "  ... and {more} more not proven");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::{check, verify, Status, What};
    use crate::egraph::lang::{TermAnalysis, TermGraph};
    use crate::egraph::saturate::saturate;
    use crate::egraph::testing::Net;
    use crate::egraph::{Limits, Stop, TermBuilder};
    use crate::error::Error;
    use crate::ir::{Attr, Attrs, Graph, TensorId, SPLIT_PART_OP, SWAP_IN_OP, SWAP_OUT_OP};
    use lms_proto::contract::LMS_DOMAIN;
    use std::time::Duration;

    /// out = relu(x) + neg(relu(x)), with the add reading `a` through `a_read`,
    /// and the SGD update of a weight w from a gradient of `a`.
    fn net(swap: impl Fn(&mut Net, TensorId, TensorId) -> TensorId) -> Graph {
        let mut net = Net::new();
        let x = net.input("x", &[2, 3]);
        let w = net.variable("w", &[2, 3]);
        let xw = net.op("xw", "Mul", Attrs::new(), &[x, w], &[2, 3]);
        let a = net.op("a", "Relu", Attrs::new(), &[xw], &[2, 3]);
        let b = net.op("b", "Neg", Attrs::new(), &[a], &[2, 3]);
        let a_read = swap(&mut net, a, x);
        let out = net.op("out", "Add", Attrs::new(), &[a_read, b], &[2, 3]);
        let grad = net.op("grad", "Mul", Attrs::new(), &[out, a_read], &[2, 3]);
        let lr = Attrs::new().with("lr", Attr::Float(0.1));
        let w_next = net.ops("w/update", "SgdUpdate", LMS_DOMAIN, lr, &[w, grad], &[&[2, 3]])[0];
        let w_node = net.node(w);
        net.g.add_update_edge(w_next, w_node);
        net.g.outputs = vec![out];
        net.g
    }

    fn no_swap(_: &mut Net, a: TensorId, _: TensorId) -> TensorId {
        a
    }

    fn swapped(net: &mut Net, a: TensorId, _: TensorId) -> TensorId {
        let host = net.swap("a/swap_out", SWAP_OUT_OP, a);
        net.swap("a/swap_in", SWAP_IN_OP, host)
    }

    #[test]
    fn a_swap_rewrite_is_proven() {
        let report = verify(&net(no_swap), &net(swapped), &Limits::default()).unwrap();
        assert_eq!(report.items.len(), 2);
        assert_eq!(report.items[0].what, What::Output { index: 0, name: "out".into() });
        assert_eq!(report.items[1].what, What::Update { variable: "w".into() });
        assert_eq!(report.proven(), 2);
        assert_eq!(report.applied.get("swap-in-of-swap-out"), Some(&1));
    }

    #[test]
    fn a_swap_in_of_another_tensor_is_rejected_naming_the_output() {
        let wrong = net(|net, _, x| {
            let host = net.swap("x/swap_out", SWAP_OUT_OP, x);
            net.swap("x/swap_in", SWAP_IN_OP, host)
        });
        let report = check(&net(no_swap), &wrong, &Limits::default()).unwrap();
        assert!(report.items.iter().all(|i| i.status == Status::Unproven));
        let err = report.require_proven().unwrap_err();
        assert!(matches!(&err, Error::Unproven { what, .. } if what == "output 0 'out'"), "{err}");
        assert!(err.to_string().contains("2 of 2 outputs and updates unproven"), "{err}");
    }

    #[test]
    fn a_missing_update_is_named() {
        let mut rewritten = net(no_swap);
        let w = rewritten.node_ids().find(|&n| rewritten.node(n).name == "w").unwrap();
        rewritten.node_mut(w).name = "w_renamed".into();
        let report = check(&net(no_swap), &rewritten, &Limits::default()).unwrap();
        let statuses: Vec<Status> = report.items.iter().map(|i| i.status).collect();
        // The renamed variable is another leaf, so the output differs too.
        assert_eq!(statuses, [Status::Unproven, Status::MissingInRewritten, Status::MissingInOriginal]);
        // The stored values are checked first: the variable itself is missing.
        let err = report.require_proven().unwrap_err();
        assert_eq!(
            err.to_string(),
            "rewrite not proven equivalent: the initial value of variable 'w' is missing in the rewritten graph"
        );
        let report = check(&net(no_swap), &rewritten, &Limits::default()).unwrap();
        let text = report.to_text(false);
        assert!(text.contains("the update of variable 'w': MISSING in the rewritten graph"), "{text}");
        assert!(text.contains("the initial value of variable 'w_renamed' is not in the original graph"), "{text}");
    }

    #[test]
    fn a_control_cycle_in_the_rewritten_graph_is_an_error() {
        let mut rewritten = net(swapped);
        let ids: Vec<_> = rewritten.node_ids().collect();
        let (first_op, last_op) = (ids[2], ids[ids.len() - 1]);
        rewritten.add_control_edge(last_op, first_op);
        let err = verify(&net(no_swap), &rewritten, &Limits::default()).unwrap_err();
        assert!(matches!(err, Error::Cycle(_)), "{err}");
    }

    #[test]
    fn graphs_of_different_opsets_are_not_compared() {
        let mut other = net(no_swap);
        other.opset = 11;
        let err = verify(&net(no_swap), &other, &Limits::default()).unwrap_err();
        assert!(err.to_string().contains("different opsets (17 and 11)"), "{err}");
    }

    /// `x` through `depth` elementwise ops, whole in the original, and with
    /// `parts > 1` cut along the batch into parts that run the whole chain
    /// and are concatenated at the end (a batch split along the whole depth).
    fn chain(depth: usize, parts: usize) -> Graph {
        let mut net = Net::new();
        let x = net.input("x", &[8, 3]);
        let run = |net: &mut Net, mut t: TensorId, suffix: &str, rows: usize| {
            for k in 0..depth {
                let op = if k % 2 == 0 { "Relu" } else { "Neg" };
                t = net.op(&format!("op{k}{suffix}"), op, Attrs::new(), &[t], &[rows, 3]);
            }
            t
        };
        let out = if parts == 1 {
            run(&mut net, x, "", 8)
        } else {
            let rows = 8 / parts;
            let ends: Vec<TensorId> = (0..parts)
                .map(|i| {
                    let attrs = Attrs::new()
                        .with("axis", Attr::Int(0))
                        .with("index", Attr::Int(i as i64))
                        .with("parts", Attr::Int(parts as i64));
                    let part = net.ops(&format!("x/part{i}"), SPLIT_PART_OP, LMS_DOMAIN, attrs, &[x], &[&[rows, 3]])[0];
                    run(&mut net, part, &format!("/part{i}"), rows)
                })
                .collect();
            net.op("merge", "Concat", Attrs::new().with("axis", Attr::Int(0)), &ends, &[8, 3])
        };
        net.g.outputs = vec![out];
        net.g
    }

    #[test]
    fn a_split_along_a_chain_deeper_than_the_old_fixed_iteration_limit_is_proven_with_work_linear_in_its_size() {
        // Facts about the parts travel one op per iteration: 1100 ops need
        // more than the 1024 iterations the limits once had.
        let (original, split) = (chain(1100, 1), chain(1100, 2));
        let report = verify(&original, &split, &Limits::default()).unwrap();
        assert_eq!(report.stop, Stop::Goal);
        assert!(report.iterations > 1024, "{} iterations", report.iterations);
        // Each iteration searches what the last one changed, not the whole e-graph.
        assert!(report.searched < 20 * report.classes, "{} searches of {} classes", report.searched, report.classes);
        // A wrong split (its parts swapped in the merge) is still not proven.
        let mut wrong = split.clone();
        let merge = wrong.node_ids().find(|&n| wrong.node(n).name == "merge").unwrap();
        wrong.node_mut(merge).inputs.reverse();
        let err = verify(&original, &wrong, &Limits::default()).unwrap_err();
        assert!(err.to_string().contains("output 0"), "{err}");
    }

    #[test]
    fn the_verdict_and_the_run_are_the_same_however_slowly_it_runs() {
        let (original, split) = (chain(60, 1), chain(60, 4));
        let run = |pause: Duration| {
            let mut egraph = TermGraph::new(TermAnalysis::new(original.opset));
            let a = TermBuilder::new(&original).tensor(&mut egraph, original.outputs[0]).unwrap();
            let b = TermBuilder::new(&split).tensor(&mut egraph, split.outputs[0]).unwrap();
            // The goal check runs once per iteration: pausing there starves the run of time.
            let run = saturate(egraph, &Limits::default(), move |g| {
                std::thread::sleep(pause);
                g.find(a) == g.find(b)
            });
            (run.stop, run.iterations, run.searched, run.egraph.total_number_of_nodes(), run.applied)
        };
        let quick = run(Duration::ZERO);
        assert_eq!(quick.0, Stop::Goal);
        assert_eq!(run(Duration::from_millis(5)), quick);
    }

    #[test]
    fn limits_bound_the_run_and_name_the_stop() {
        let limits = Limits { iterations_per_term: 0, ..Limits::default() };
        let report = check(&net(no_swap), &net(swapped), &limits).unwrap();
        assert_eq!(report.stop.to_string(), "stopped at the iteration limit (0)");
        assert!(report.require_proven().is_err(), "nothing is proven without an iteration");
    }
}
