//! One split run: the ops it covers, each with the axis its parts slice,
//! planned from the op family's split rule and the e-graph, and emitted as
//! `SplitPart` ops, micro-ops and `Concat` merges into a patch.

use super::blocks::Emitted;
use super::halo::Halo;
use super::{SplitReport, SplitRequest};
use crate::egraph::lang::{part_len, TermAnalysis};
use crate::egraph::rules::independence::{family_of, InputSplits};
use crate::egraph::{self, Limits};
use crate::error::{Error, Result};
use crate::ir::{Action, Attr, Attrs, Graph, Node, NodeId, TensorId, TensorType, SPLIT_PART_OP};
use crate::pipeline::{NewNode, Patch, Position, TensorRef};
use crate::shape::cost::CostNode;
use crate::shape::split::{self, Combine};
use lms_proto::contract::LMS_DOMAIN;
use std::collections::{HashMap, HashSet};

/// How the parts of an op of a run make its outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MergeKind {
    /// Each part makes a slice of the outputs along this axis (`Concat`).
    Concat(usize),
    /// Each part makes a partial result of the whole shape (`Sum`).
    Sum,
    /// A spatial split with halos ([`Run::halo`] says how it merges).
    Halo,
    /// Batch normalization by merged statistics (`batch_norm`).
    Statistics,
}

/// An op of a run.
#[derive(Clone, Debug)]
pub(super) struct Covered {
    /// The op.
    pub node: NodeId,
    /// How its parts' outputs are merged.
    pub merge: MergeKind,
    /// For each input slot, the axis its parts slice, or `None` (read whole).
    pub inputs: InputSplits,
    /// How many parts it runs in.
    pub parts: usize,
}

/// A run that adds its own ops instead of going through `blocks`.
pub(super) enum OwnEmission<'a> {
    /// Parts with halos (`halo`).
    Halo(&'a Halo),
    /// Batch normalization by merged statistics (`batch_norm`).
    Statistics,
}

/// A planned split run.
pub(super) struct Run<'r> {
    /// The request it carries out.
    pub request: &'r SplitRequest,
    /// Its ops, in schedule order.
    pub covered: Vec<Covered>,
    /// The plan of a spatial split with halos (its one op).
    pub halo: Option<Halo>,
}

impl<'r> Run<'r> {
    /// Plans the run of `request` from `node`.
    pub fn plan(g: &Graph, node: NodeId, request: &'r SplitRequest) -> Result<Run<'r>> {
        let fail = |reason: String| node_error(g, node, reason);
        let n = g.node(node);
        let inputs: Vec<Option<&TensorType>> = n.inputs.iter().map(|t| t.map(|t| &g.tensor(t).ty)).collect();
        let outputs: Vec<&TensorType> = n.outputs.iter().map(|&t| &g.tensor(t).ty).collect();
        let cost = CostNode { op: &n.op, attrs: &n.attrs, inputs: &inputs, outputs: &outputs };
        let rule = split::rule_along(&cost, request.dim).map_err(fail)?;
        let axis = match rule.combine {
            Combine::Concat { axis } => axis,
            Combine::Sum => {
                // The op alone: what reads its sum reads a whole tensor.
                if let Some(reason) = writes_variable(g, node) {
                    return Err(fail(reason));
                }
                let covered = vec![Covered { node, merge: MergeKind::Sum, inputs: rule.inputs, parts: request.parts }];
                return Ok(Run { request, covered, halo: None });
            }
            Combine::Halo { axis, output } => {
                let halo = Halo::plan(g, node, axis, output, &rule.inputs, request.parts)?;
                let covered = vec![Covered { node, merge: MergeKind::Halo, inputs: rule.inputs, parts: request.parts }];
                return Ok(Run { request, covered, halo: Some(halo) });
            }
            Combine::Statistics => {
                super::batch_norm::check(g, node)?;
                if let Some(reason) = unsplittable_outputs(g, node) {
                    return Err(fail(reason));
                }
                let covered =
                    vec![Covered { node, merge: MergeKind::Statistics, inputs: rule.inputs, parts: request.parts }];
                return Ok(Run { request, covered, halo: None });
            }
        };
        let extent = egraph::AxisSplit { node, axis, parts: request.parts, depth: request.depth };
        let plan = egraph::propagate(g, &extent, &Limits::default())?;
        let names: HashSet<&str> = plan.covered.iter().map(String::as_str).collect();
        let mut analysis = TermAnalysis::new(g.opset);
        let mut axes: HashMap<TensorId, usize> = HashMap::new();
        let mut covered = Vec::new();
        for &m in g.schedule().iter().filter(|&&m| names.contains(g.node(m).name.as_str())) {
            let want = if m == node { Some(axis) } else { None };
            let Some((axis, inputs)) = part_axis(g, &mut analysis, m, &axes, want) else {
                if m == node {
                    return Err(fail(format!("is not independent along axis {axis}")));
                }
                continue;
            };
            if let Some(reason) = writes_variable(g, m) {
                if m == node {
                    return Err(fail(reason));
                }
                continue;
            }
            axes.extend(g.node(m).outputs.iter().map(|&t| (t, axis)));
            covered.push(Covered { node: m, merge: MergeKind::Concat(axis), inputs, parts: request.parts });
        }
        Ok(Run { request, covered, halo: None })
    }

    /// How the run is emitted when not in `blocks`: a halo run and a
    /// batch-norm run add their own ops.
    pub fn emits_itself(&self) -> Option<OwnEmission<'_>> {
        match (&self.halo, self.covered[0].merge) {
            (Some(halo), _) => Some(OwnEmission::Halo(halo)),
            (None, MergeKind::Statistics) => Some(OwnEmission::Statistics),
            _ => None,
        }
    }

    /// What the run did, from what the emission split and merged for its
    /// ops (halo and batch-norm runs report through their own emission).
    pub fn report(&self, g: &Graph, emitted: &Emitted) -> SplitReport {
        let mine: HashSet<NodeId> = self.covered.iter().map(|c| c.node).collect();
        let of_mine = |list: &[(NodeId, String)]| {
            let mut names: Vec<String> = Vec::new();
            for (op, name) in list {
                if mine.contains(op) && !names.contains(name) {
                    names.push(name.clone());
                }
            }
            names
        };
        SplitReport {
            request: self.request.clone(),
            merge: match self.covered[0].merge {
                MergeKind::Concat(axis) => format!("concat along axis {axis}"),
                MergeKind::Sum => "sum of partial results".into(),
                MergeKind::Halo | MergeKind::Statistics => unreachable!("halo and batch-norm runs report themselves"),
            },
            covered: self.covered.iter().map(|c| g.node(c.node).name.clone()).collect(),
            splits: of_mine(&emitted.splits),
            merges: of_mine(&emitted.merges),
        }
    }

    /// Whether two runs share an op or one reads what the other makes.
    pub fn touches(&self, g: &Graph, other: &Run<'_>) -> bool {
        let mine: HashSet<NodeId> = self.covered.iter().map(|c| c.node).collect();
        let theirs: HashSet<NodeId> = other.covered.iter().map(|c| c.node).collect();
        let feeds = |from: &HashSet<NodeId>, to: &HashSet<NodeId>| {
            from.iter().any(|&n| g.node(n).outputs.iter().any(|&t| g.readers(t).any(|(r, _)| to.contains(&r))))
        };
        !mine.is_disjoint(&theirs) || feeds(&mine, &theirs) || feeds(&theirs, &mine)
    }
}

/// The output axis along which `m` can run in parts given the axes of its
/// inputs made in parts (`axes`), and how its inputs are split; `want`
/// fixes the axis. `None` when its family does not split it so.
pub(super) fn part_axis(
    g: &Graph,
    analysis: &mut TermAnalysis,
    m: NodeId,
    axes: &HashMap<TensorId, usize>,
    want: Option<usize>,
) -> Option<(usize, InputSplits)> {
    let node = g.node(m);
    let types = node.outputs.iter().map(|&t| g.tensor(t).ty.clone()).collect();
    // A Reshape's parts are ReshapeTos (their shape input unread).
    let symbol = match split::part_op(&node.op, &node.domain) {
        Some(op) => analysis.head(op, LMS_DOMAIN, &Attrs::new(), types),
        None => analysis.head(&node.op, &node.domain, &node.attrs, types),
    };
    let head = analysis.lookup(symbol)?.clone();
    let Some(family) = family_of(&head) else {
        return concat_axis(g, m, axes, want);
    };
    let shapes: Vec<_> = node.inputs.iter().map(|slot| slot.map(|t| &g.tensor(t).ty.shape)).collect();
    let rank = g.tensor(*node.outputs.first()?).ty.rank();
    let fits = |splits: &InputSplits| {
        node.inputs.iter().zip(splits).all(|(slot, s)| match slot.and_then(|t| axes.get(&t)) {
            Some(&axis) => *s == Some(axis),
            None => true,
        })
    };
    let candidates: Vec<usize> = want.map_or_else(|| (0..rank).collect(), |a| vec![a]);
    candidates
        .into_iter()
        .filter_map(|a| family.split_inputs(&head, &shapes, a, g.opset).map(|s| (a, s)))
        .find(|(_, s)| fits(s))
}

/// The batch split of an ONNX Concat along another axis (the terms build
/// it as a concatenation, proven by rule `concat-of-concats`), from its
/// split rule: every input sliced along the batch.
fn concat_axis(
    g: &Graph,
    m: NodeId,
    axes: &HashMap<TensorId, usize>,
    want: Option<usize>,
) -> Option<(usize, InputSplits)> {
    let node = g.node(m);
    if node.op != "Concat" || !node.domain.is_empty() || want.is_some_and(|a| a != 0) {
        return None;
    }
    let inputs: Vec<_> = node.inputs.iter().map(|t| t.map(|t| &g.tensor(t).ty)).collect();
    let outputs: Vec<_> = node.outputs.iter().map(|&t| &g.tensor(t).ty).collect();
    let cost = CostNode { op: &node.op, attrs: &node.attrs, inputs: &inputs, outputs: &outputs };
    let rule = split::rules(&cost).into_iter().find(|r| r.combine == Combine::Concat { axis: 0 })?;
    let fits = node.inputs.iter().flatten().all(|t| axes.get(t).is_none_or(|&a| a == 0));
    fits.then_some((0, rule.inputs))
}

/// The nodes that only computed the shape inputs of `covered` Reshapes,
/// whose parts (`ReshapeTo`s) no longer read them (such as `Shape` of a
/// whole tensor, which would otherwise read it whole): nodes without
/// control or update edges, all of whose outputs are read only by such
/// nodes or as the shape of a covered Reshape. (An op run in parts still
/// reads its inputs, so a node it reads, such as a Dropout that stays whole
/// before a split Reshape, is kept.) Adds them to `removed` and removes them
/// in `patch`.
pub(super) fn remove_dead_shapes(g: &Graph, covered: &[Covered], removed: &mut HashSet<NodeId>, patch: &mut Patch) {
    let reshapes: HashSet<NodeId> = covered
        .iter()
        .map(|c| c.node)
        .filter(|&n| split::part_op(&g.node(n).op, &g.node(n).domain).is_some())
        .collect();
    let mut stack: Vec<NodeId> = reshapes
        .iter()
        .filter_map(|&n| g.node(n).inputs.get(1).copied().flatten())
        .map(|t| g.tensor(t).producer.0)
        .collect();
    let mut dead_shapes: HashSet<NodeId> = HashSet::new();
    while let Some(n) = stack.pop() {
        let node = g.node(n);
        let unread = |(r, slot): (NodeId, usize)| dead_shapes.contains(&r) || (slot == 1 && reshapes.contains(&r));
        let dead = !removed.contains(&n)
            && !node.parameterized
            && g.in_edges(n).chain(g.out_edges(n)).all(|(_, e)| e.action == Action::Read)
            && node.outputs.iter().all(|&t| !g.outputs.contains(&t) && g.readers(t).all(unread));
        if dead {
            dead_shapes.insert(n);
            removed.insert(n);
            patch.remove_node(n);
            stack.extend(node.inputs.iter().flatten().map(|&t| g.tensor(t).producer.0));
        }
    }
}

/// Why `m` is not run in parts: its outputs are graph outputs or written
/// into variables. (Its control edges pass to each of its micro-ops.)
pub(super) fn unsplittable(g: &Graph, m: NodeId) -> Option<String> {
    unsplittable_outputs(g, m).or_else(|| writes_variable(g, m))
}

/// Why `m` is not run in parts by `blocks` (whose merge of a graph output
/// takes the output's place): it writes a variable.
pub(super) fn writes_variable(g: &Graph, m: NodeId) -> Option<String> {
    g.out_edges(m).any(|(_, e)| e.action == Action::Update).then(|| "writes a variable".into())
}

/// Why `m`'s outputs cannot be merged from parts: they are graph outputs.
pub(super) fn unsplittable_outputs(g: &Graph, m: NodeId) -> Option<String> {
    g.node(m).outputs.iter().any(|t| g.outputs.contains(t)).then(|| "makes a graph output".into())
}

/// The type of part `i` of `parts` of a tensor of type `ty` along `axis`.
pub(super) fn slice_type(ty: &TensorType, axis: usize, i: usize, parts: usize) -> TensorType {
    let mut shape = ty.shape.clone();
    shape[axis] = part_len(shape[axis], i, parts);
    TensorType::new(ty.dtype, shape)
}

/// A part of a tensor to make with a `SplitPart`.
pub(super) struct Piece<'a> {
    /// The tensor split: its type and the name its parts are named after.
    pub ty: &'a TensorType,
    /// Where the whole tensor is read from (the tensor, or its merge).
    pub whole: TensorRef,
    /// The node's and its output's name.
    pub name: String,
    pub axis: usize,
    pub index: usize,
    pub parts: usize,
}

/// Adds the `SplitPart` making `piece` for `reader` (whose phase and
/// device it takes).
pub(super) fn split_part(reader: &Node, piece: Piece<'_>, at: Position, patch: &mut Patch) -> NewNode {
    let Piece { ty, whole, name, axis, index, parts } = piece;
    let attrs = Attrs::new()
        .with("axis", Attr::Int(axis as i64))
        .with("index", Attr::Int(index as i64))
        .with("parts", Attr::Int(parts as i64));
    let node = lms_node(reader, name.clone(), SPLIT_PART_OP, attrs);
    let output = (name, slice_type(ty, axis, index, parts));
    patch.add_node(node, vec![Some(whole)], vec![output], at)
}

/// An lms-domain op `op` named `name`, with no inputs or outputs yet, in the
/// phase and on the device of `like` (the op it stands in for or feeds).
pub(super) fn lms_node(like: &Node, name: String, op: &str, attrs: Attrs) -> Node {
    Node { name, op: op.into(), domain: LMS_DOMAIN.into(), attrs, inputs: vec![], outputs: vec![], ..like.clone() }
}

/// An error about a node of `g`.
pub(super) fn node_error(g: &Graph, id: NodeId, reason: String) -> Error {
    let node = g.node(id);
    Error::Node { node: node.name.clone(), op: node.op.clone(), reason }
}
