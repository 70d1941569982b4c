//! How far a split travels (TSPLIT §III-A and §V-A; Split-CNN §3.2):
//! given an op computed as p micro-ops along an axis, which of the ops after
//! it can run on the parts too, and where the parts must be merged.
//!
//! The region (the op and the ops up to `depth` read edges after it) goes
//! into an e-graph; the op's inputs are split as its family requires
//! (`split(d,i,n)(x)` for every part), which makes `x = concat_d(parts)`
//! (`split-parts`) and lets the distribution rules carry the split from op to
//! op. Saturation within the limits finds every way to compute each tensor;
//! extraction with a cost function picks, for the tensors leaving the region,
//! the form with the fewest split and merge ops and, among those, the
//! smallest micro-tensors, with the op itself forced to run in parts.
//! Extraction is greedy per e-class (each class keeps one best form), so a
//! merge shared by two readers counts once per reader.

use super::lang::{Term, TermAnalysis, TermGraph};
use super::rules::independence::family_of;
use super::rules::split::MAX_PARTS;
use super::saturate::{saturate, Limits, Stop};
use super::terms::TermBuilder;
use crate::error::{Error, Result};
use crate::ir::{Action, Attrs, Graph, NodeId, TensorId};
use crate::shape::split;
use egg::{CostFunction, Extractor, Id, Language};
use lms_proto::contract::LMS_DOMAIN;
use serde::Serialize;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::ops::Add;
use std::time::Instant;

/// A split to propagate from one op.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AxisSplit {
    /// The op to compute in parts.
    pub node: NodeId,
    /// The axis of its outputs along which the parts split them.
    pub axis: usize,
    /// How many parts: 2 to [`MAX_PARTS`], at most the axis's length.
    pub parts: usize,
    /// How many read edges after `node` the region reaches.
    pub depth: usize,
}

/// Where a split goes.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SplitPlan {
    /// The tensors split into parts before the op: its inputs that its
    /// family splits.
    pub splits: Vec<String>,
    /// The ops computed in parts: the requested op first, then the others
    /// in region order (breadth-first from the op).
    pub covered: Vec<String>,
    /// The tensors concatenated back from their parts, in region order.
    pub merges: Vec<Merge>,
    /// E-nodes after saturation.
    pub nodes: usize,
    /// E-classes after saturation.
    pub classes: usize,
    /// Rule iterations run.
    pub iterations: usize,
    /// Wall-clock time, extraction included.
    pub seconds: f64,
    /// Why saturation stopped.
    pub stop: Stop,
}

/// A merge: a tensor made whole again from its parts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Merge {
    /// The tensor.
    pub tensor: String,
    /// The ops that read it whole (also those outside the region), sorted.
    pub readers: Vec<String>,
}

/// Finds how far the split of `request` travels in `g` before merges are
/// needed. Fails when the op is a variable or input, when it is not
/// independent along the axis (naming it), when the axis cannot be split into
/// that many parts, or when the limits stop saturation before the op's split
/// form is derived.
pub fn propagate(g: &Graph, request: &AxisSplit, limits: &Limits) -> Result<SplitPlan> {
    let start = Instant::now();
    if g.node(request.node).parameterized {
        let reason = "is a variable or input: only ops can be split";
        return Err(node_error(g, request.node, reason.into()));
    }
    let region = Region::new(g, request.node, request.depth);
    let mut egraph = TermGraph::new(TermAnalysis::new(g.opset));
    let mut terms = TermBuilder::region(g, region.inside.clone());
    let mut classes: Vec<(TensorId, Id)> = Vec::new();
    for &n in &region.nodes {
        for &t in &g.node(n).outputs {
            classes.push((t, terms.tensor(&mut egraph, t)?));
        }
    }
    let seed = Seed::add(&mut egraph, &mut terms, g, request)?;

    let run = saturate(egraph, limits, |_| false);
    let egraph = run.egraph;
    let forbidden = seed.op.map_children(|c| egraph.find(c));
    let cost = SplitCost { analysis: &egraph.analysis, forbidden };
    let extractor = Extractor::new(&egraph, cost);
    let op_outputs = classes.iter().filter(|(t, _)| g.tensor(*t).producer.0 == request.node);
    if op_outputs.into_iter().any(|&(_, c)| extractor.find_best_cost(c).merges == u64::MAX) {
        let reason = format!("its split along axis {} was not derived ({})", request.axis, run.stop);
        return Err(node_error(g, request.node, reason));
    }
    let (covered, merges) = region.read_plan(g, &egraph, &extractor, &classes, request.node);
    Ok(SplitPlan {
        splits: seed.splits,
        covered,
        merges,
        nodes: egraph.total_number_of_nodes(),
        classes: egraph.number_of_classes(),
        iterations: run.iterations,
        seconds: start.elapsed().as_secs_f64(),
        stop: run.stop,
    })
}

/// The requested op's split added to the e-graph.
struct Seed {
    /// The op applied to its whole inputs: the form extraction must avoid.
    op: Term,
    /// Names of the inputs split.
    splits: Vec<String>,
}

impl Seed {
    /// Adds `split(d, i, n)(x)` for every part of every input `x` the op's
    /// family splits; fails naming the op when it cannot be split so.
    fn add(egraph: &mut TermGraph, terms: &mut TermBuilder<'_>, g: &Graph, request: &AxisSplit) -> Result<Seed> {
        let node = g.node(request.node);
        let fail = |reason: String| Err(node_error(g, request.node, reason));
        let mut children = Vec::with_capacity(node.inputs.len());
        for slot in &node.inputs {
            children.push(match slot {
                Some(t) => terms.tensor(egraph, *t)?,
                None => egraph.add(Term::Absent),
            });
        }
        let types = node.outputs.iter().map(|&t| g.tensor(t).ty.clone()).collect();
        // A Reshape is seeded as the ReshapeTo of its data (rule `reshape-to`).
        let symbol = match split::part_op(&node.op, &node.domain) {
            Some(op) => {
                children.truncate(1);
                egraph.analysis.head(op, LMS_DOMAIN, &Attrs::new(), types)
            }
            None => egraph.analysis.head(&node.op, &node.domain, &node.attrs, types),
        };
        let head = egraph.analysis.lookup(symbol).cloned().expect("head() registers its symbol");
        let Some(family) = family_of(&head) else {
            return fail("does not distribute over a concatenation of its inputs".into());
        };
        let shapes: Vec<_> =
            node.inputs.iter().take(children.len()).map(|slot| slot.map(|t| &g.tensor(t).ty.shape)).collect();
        let Some(splits) = family.split_inputs(&head, &shapes, request.axis, g.opset) else {
            return fail(format!(
                "is not independent along axis {} of its output: its parts would need a merge first",
                request.axis
            ));
        };
        let len = head.outputs.first().and_then(|t| t.shape.get(request.axis)).copied().unwrap_or(0);
        if !(2..=MAX_PARTS).contains(&request.parts) || request.parts > len {
            return fail(format!(
                "cannot split axis {} (length {len}) into {} parts (2 to {MAX_PARTS}, at most the length)",
                request.axis, request.parts
            ));
        }
        let mut names = Vec::new();
        for ((slot, axis), &x) in splits.iter().enumerate().zip(&children) {
            let (Some(axis), Some(t)) = (axis, node.inputs[slot]) else {
                continue;
            };
            names.push(g.tensor(t).name.clone());
            let d = egraph.add(Term::Int(*axis as i64));
            let n = egraph.add(Term::Int(request.parts as i64));
            for i in 0..request.parts {
                let i = egraph.add(Term::Int(i as i64));
                egraph.add(Term::Split([d, i, n, x]));
            }
        }
        Ok(Seed { op: Term::Op(symbol, children), splits: names })
    }
}

/// An error about a node of `g`.
fn node_error(g: &Graph, id: NodeId, reason: String) -> Error {
    let node = g.node(id);
    Error::Node { node: node.name.clone(), op: node.op.clone(), reason }
}

/// The op and the ops after it that the e-graph holds.
struct Region {
    /// Breadth-first from the op.
    nodes: Vec<NodeId>,
    /// Membership, indexed by `NodeId::index()`.
    inside: Vec<bool>,
}

impl Region {
    /// The op and the ops up to `depth` read edges after it (variables and
    /// inputs excluded).
    fn new(g: &Graph, start: NodeId, depth: usize) -> Region {
        let mut inside = vec![false; g.node_bound()];
        inside[start.index()] = true;
        let mut nodes = vec![start];
        let mut queue = VecDeque::from([(start, 0)]);
        while let Some((n, d)) = queue.pop_front() {
            if d == depth {
                continue;
            }
            let mut next: Vec<NodeId> =
                g.out_edges(n).filter(|(_, e)| e.action == Action::Read).map(|(m, _)| m).collect();
            next.sort();
            for m in next {
                if !g.node(m).parameterized && !inside[m.index()] {
                    inside[m.index()] = true;
                    nodes.push(m);
                    queue.push_back((m, d + 1));
                }
            }
        }
        Region { nodes, inside }
    }

    /// Whether a tensor made in the region is needed outside it: read by an
    /// op outside, a graph output, written into a variable, or read by nobody.
    fn exports(&self, g: &Graph, t: TensorId) -> bool {
        let (producer, _) = g.tensor(t).producer;
        g.readers(t).next().is_none()
            || g.readers(t).any(|(r, _)| !self.inside[r.index()])
            || g.outputs.contains(&t)
            || g.out_edges(producer).any(|(_, e)| e.action == Action::Update && e.tensor == Some(t))
    }

    /// Walks the extracted forms of the tensors the region exports: the
    /// ops computed in parts (`op` first, then in region order) and the
    /// merges (in region order).
    fn read_plan(
        &self,
        g: &Graph,
        egraph: &TermGraph,
        extractor: &Extractor<'_, SplitCost<'_>, Term, TermAnalysis>,
        classes: &[(TensorId, Id)],
        op: NodeId,
    ) -> (Vec<String>, Vec<Merge>) {
        let map = RegionMap::new(egraph, g, classes);
        // A merge: a class made whole by concatenating parts (an ONNX Concat
        // of whole tensors in the graph is an op like any other).
        let is_merge = |c: Id| match extractor.find_best_node(c) {
            Term::Concat(ids) => ids.iter().skip(1).any(|&p| map.parts.contains_key(&egraph.find(p))),
            _ => false,
        };
        let mut covered: HashSet<NodeId> = HashSet::from([op]);
        let mut merges: HashMap<TensorId, BTreeSet<String>> = HashMap::new();
        let roots: Vec<(TensorId, Id)> = classes.iter().copied().filter(|&(t, _)| self.exports(g, t)).collect();
        for &(t, c) in &roots {
            if is_merge(c) {
                let outside = g.readers(t).filter(|&(r, _)| !self.inside[r.index()]);
                merges.entry(t).or_default().extend(outside.map(|(r, _)| g.node(r).name.clone()));
            }
        }
        let mut stack: Vec<Id> = roots.iter().map(|&(_, c)| egraph.find(c)).collect();
        let mut seen: HashSet<Id> = stack.iter().copied().collect();
        while let Some(c) = stack.pop() {
            let best = extractor.find_best_node(c);
            if let (Term::Op(..), Some(&producer)) = (best, map.parts.get(&c)) {
                covered.insert(producer);
            }
            for &child in best.children() {
                let child = egraph.find(child);
                if is_merge(child) {
                    if let (Some(&t), Some(reader)) = (map.tensors.get(&child), map.origin(c)) {
                        merges.entry(t).or_default().insert(g.node(reader).name.clone());
                    }
                }
                if seen.insert(child) {
                    stack.push(child);
                }
            }
        }
        let position: HashMap<NodeId, usize> = self.nodes.iter().enumerate().map(|(i, &n)| (n, i)).collect();
        let rank = |n: NodeId| position.get(&n).copied().unwrap_or(usize::MAX);
        let mut covered: Vec<NodeId> = covered.into_iter().collect();
        covered.sort_by_key(|&n| rank(n));
        let mut merges: Vec<(TensorId, BTreeSet<String>)> = merges.into_iter().collect();
        merges.sort_by_key(|&(t, _)| (rank(g.tensor(t).producer.0), t));
        let covered = covered.into_iter().map(|n| g.node(n).name.clone()).collect();
        let merges = merges
            .into_iter()
            .map(|(t, readers)| Merge { tensor: g.tensor(t).name.clone(), readers: readers.into_iter().collect() })
            .collect();
        (covered, merges)
    }
}

/// Which region op each e-class belongs to.
struct RegionMap {
    /// The class of each region tensor (the first, when two are equal).
    tensors: HashMap<Id, TensorId>,
    /// Classes of whole results of a region op: its tensors and, for a
    /// multi-output op, the class of the op itself.
    whole: HashMap<Id, NodeId>,
    /// Classes of a region op's parts (and of their multi-output ops).
    parts: HashMap<Id, NodeId>,
}

impl RegionMap {
    fn new(egraph: &TermGraph, g: &Graph, classes: &[(TensorId, Id)]) -> RegionMap {
        let mut map = RegionMap { tensors: HashMap::new(), whole: HashMap::new(), parts: HashMap::new() };
        // The op of an `(out i op)` in a class, if any.
        let tuples = |c: Id| -> Vec<Id> {
            egraph[c]
                .nodes
                .iter()
                .filter_map(|n| match n {
                    Term::Out([_, op]) => Some(egraph.find(*op)),
                    _ => None,
                })
                .collect()
        };
        for &(t, c) in classes {
            let (c, producer) = (egraph.find(c), g.tensor(t).producer.0);
            map.tensors.entry(c).or_insert(t);
            map.whole.entry(c).or_insert(producer);
            for tuple in tuples(c) {
                map.whole.entry(tuple).or_insert(producer);
            }
        }
        // Parts are concatenated into a region tensor and are neither a whole
        // tensor nor a leaf (the inputs of an ONNX Concat in the graph are).
        for &(t, c) in classes {
            let producer = g.tensor(t).producer.0;
            for node in &egraph[c].nodes {
                let Term::Concat(ids) = node else { continue };
                for &part in ids.iter().skip(1) {
                    let part = egraph.find(part);
                    let leaf = egraph[part].nodes.iter().any(|n| matches!(n, Term::Leaf(_)));
                    if leaf || map.whole.contains_key(&part) {
                        continue;
                    }
                    map.parts.entry(part).or_insert(producer);
                    for tuple in tuples(part) {
                        map.parts.entry(tuple).or_insert(producer);
                    }
                }
            }
        }
        map
    }

    /// The region op a class belongs to, whole or as a part.
    fn origin(&self, class: Id) -> Option<NodeId> {
        self.whole.get(&class).or_else(|| self.parts.get(&class)).copied()
    }
}

/// The cost of a form: split and merge ops first, then the sum of the
/// squared byte sizes of the tensors ops make (smaller micro-tensors cost
/// less); the original op of the request costs infinitely much.
struct SplitCost<'a> {
    analysis: &'a TermAnalysis,
    forbidden: Term,
}

/// A [`SplitCost`]: compared by `merges`, then by `work`.
#[derive(Clone, Copy, Debug, PartialEq, PartialOrd)]
struct Cost {
    /// Split and concat ops (`u64::MAX` for the forbidden op).
    merges: u64,
    /// Sum of the squares of the bytes of every op's outputs.
    work: f64,
}

impl Add for Cost {
    type Output = Cost;

    fn add(self, other: Cost) -> Cost {
        Cost { merges: self.merges.saturating_add(other.merges), work: self.work + other.work }
    }
}

impl CostFunction<Term> for SplitCost<'_> {
    type Cost = Cost;

    fn cost<C>(&mut self, enode: &Term, mut costs: C) -> Cost
    where
        C: FnMut(Id) -> Cost,
    {
        if *enode == self.forbidden {
            return Cost { merges: u64::MAX, work: f64::INFINITY };
        }
        let own = match enode {
            Term::Split(_) | Term::Concat(_) => Cost { merges: 1, work: 0.0 },
            Term::Op(symbol, _) => Cost {
                merges: 0,
                work: self
                    .analysis
                    .lookup(*symbol)
                    .map_or(0.0, |h| h.outputs.iter().map(|t| (t.bytes() as f64).powi(2)).sum()),
            },
            _ => Cost { merges: 0, work: 0.0 },
        };
        enode.fold(own, |sum, id| sum + costs(id))
    }
}

#[cfg(test)]
mod tests {
    use super::{propagate, AxisSplit, Merge, SplitPlan};
    use crate::egraph::testing::Net;
    use crate::egraph::Limits;
    use crate::error::Result;
    use crate::ir::{Attr, Attrs, Graph, NodeId};

    /// Propagates a split of `node` along `axis` into `parts`, `depth` read edges deep,
    /// under the default limits.
    fn split(g: &Graph, node: NodeId, axis: usize, parts: usize, depth: usize) -> Result<SplitPlan> {
        let request = AxisSplit { node, axis, parts, depth };
        propagate(g, &request, &Limits::default())
    }

    /// A merge of `tensor`, read whole by `readers`.
    fn merge(tensor: &str, readers: &[&str]) -> Merge {
        Merge { tensor: tensor.into(), readers: readers.iter().map(|r| r.to_string()).collect() }
    }

    /// x → Conv → Relu → MaxPool → BatchNormTrain → output, batch 4.
    fn cnn() -> (Graph, NodeId, NodeId) {
        let mut net = Net::new();
        let x = net.input("x", &[4, 3, 8, 8]);
        let w = net.variable("w", &[6, 3, 3, 3]);
        let conv =
            net.op("conv", "Conv", Attrs::new().with("pads", Attr::Ints(vec![1, 1, 1, 1])), &[x, w], &[4, 6, 8, 8]);
        let relu = net.op("relu", "Relu", Attrs::new(), &[conv], &[4, 6, 8, 8]);
        let pool_attrs =
            Attrs::new().with("kernel_shape", Attr::Ints(vec![2, 2])).with("strides", Attr::Ints(vec![2, 2]));
        let pool = net.op("pool", "MaxPool", pool_attrs, &[relu], &[4, 6, 4, 4]);
        let stats: Vec<_> = ["scale", "bias", "mean", "var"].iter().map(|n| net.variable(n, &[6])).collect();
        let shapes: &[&[usize]] = &[&[4, 6, 4, 4], &[6], &[6], &[6], &[6]];
        let bn = net.ops(
            "bn",
            "BatchNormTrain",
            "lms",
            Attrs::new(),
            &[pool, stats[0], stats[1], stats[2], stats[3]],
            shapes,
        );
        net.g.outputs = vec![bn[0]];
        let (conv, bn) = (net.node(conv), net.node(bn[0]));
        (net.g, conv, bn)
    }

    #[test]
    fn a_batch_split_of_a_conv_travels_to_the_batch_norm() {
        let (g, conv, _) = cnn();
        let plan = split(&g, conv, 0, 2, 8).unwrap();
        assert_eq!(plan.splits, ["x"]);
        assert_eq!(plan.covered, ["conv", "relu", "pool"]);
        assert_eq!(plan.merges, [merge("pool", &["bn"])]);
        assert_eq!(plan.stop.to_string(), "saturated");
    }

    #[test]
    fn a_short_region_merges_at_its_edge() {
        let (g, conv, _) = cnn();
        let plan = split(&g, conv, 0, 2, 1).unwrap();
        assert_eq!(plan.covered, ["conv", "relu"]);
        assert_eq!(plan.merges, [merge("relu", &["pool"])]);
    }

    #[test]
    fn ops_that_are_not_independent_along_the_axis_are_refused_by_name() {
        let (g, conv, bn) = cnn();
        let err = split(&g, bn, 0, 2, 4).unwrap_err();
        assert!(err.to_string().starts_with("node 'bn' (BatchNormTrain): does not distribute"), "{err}");
        let err = split(&g, conv, 2, 2, 4).unwrap_err();
        assert!(err.to_string().contains("not independent along axis 2"), "{err}");
        let err = split(&g, conv, 0, 5, 4).unwrap_err();
        assert!(err.to_string().contains("into 5 parts"), "{err}");
    }

    #[test]
    fn rows_of_a_matmul_travel_through_bias_activation_and_softmax_but_not_a_softmax_along_them() {
        let mut net = Net::new();
        let x = net.input("x", &[4, 8]);
        let w = net.variable("w", &[8, 6]);
        let b = net.variable("b", &[6]);
        let mm = net.op("mm", "MatMul", Attrs::new(), &[x, w], &[4, 6]);
        let add = net.op("add", "Add", Attrs::new(), &[mm, b], &[4, 6]);
        let relu = net.op("relu", "Relu", Attrs::new(), &[add], &[4, 6]);
        let rows = net.op("rows", "Softmax", Attrs::new().with("axis", Attr::Int(1)), &[relu], &[4, 6]);
        let cols = net.op("cols", "Softmax", Attrs::new().with("axis", Attr::Int(0)), &[relu], &[4, 6]);
        net.g.outputs = vec![rows, cols];
        let mm = net.node(mm);
        let plan = split(&net.g, mm, 0, 4, 8).unwrap();
        assert_eq!(plan.covered, ["mm", "add", "relu", "rows"]);
        assert_eq!(plan.merges, [merge("relu", &["cols"]), merge("rows", &[])]);
    }

    #[test]
    fn a_concat_op_of_the_graph_is_a_reader_not_a_merge() {
        let mut net = Net::new();
        let x = net.input("x", &[4, 3]);
        let y = net.input("y", &[4, 5]);
        let relu = net.op("relu", "Relu", Attrs::new(), &[x], &[4, 3]);
        let axis = Attrs::new().with("axis", Attr::Int(1));
        let cat = net.op("cat", "Concat", axis, &[relu, y], &[4, 8]);
        net.g.outputs = vec![cat];
        let relu = net.node(relu);
        let plan = split(&net.g, relu, 0, 2, 4).unwrap();
        assert_eq!(plan.covered, ["relu"]);
        assert_eq!(plan.merges, [merge("relu", &["cat"])]);
    }
}
