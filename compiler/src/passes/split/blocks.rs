//! Depth-first emission of ops run in parts (TSPLIT §IV): consecutive ops
//! of the schedule run in the same number of parts form a block, and the
//! block runs part 0 through every one of its ops, then part 1, and so on,
//! so that one part's intermediates are made (and can be swapped or dropped)
//! before the next part starts. A tensor made in parts is read part by part
//! wherever its reader runs in as many parts along the same axis, in this
//! block or a later one; it is merged (`Concat`) after its block's last
//! part only where something reads it whole. Partial results (an op that
//! reduces over the split axis) are added up as they are made. A block ends where an op outside it, or the next op in parts,
//! needs one of its outputs whole, is ordered after one of its ops, or
//! writes a variable one of its ops reads.

use super::emit::{slice_type, split_part, Covered, MergeKind, Piece};
use crate::egraph::rules::batch_norm::{Form, Source};
use crate::ir::{Action, Attr, Attrs, Graph, Node, NodeId, TensorId, TensorType};
use crate::pipeline::{NewNode, NodeRef, Patch, Position, TensorRef};
use crate::shape::split;
use std::collections::{HashMap, HashSet};

/// What the emission split and merged, each with the covered op it was for.
#[derive(Default)]
pub(super) struct Emitted {
    /// (op, tensor): a tensor split by `SplitPart`s for the op.
    pub splits: Vec<(NodeId, String)>,
    /// (op, tensor): an output of the op merged from its parts.
    pub merges: Vec<(NodeId, String)>,
}

/// Adds the micro-ops, splits and merges of `covered` (disjoint ops, any
/// order) to `patch`, block by block, and removes the covered ops. `removed`
/// holds every op the patch removes (these and others, which `covered` does
/// not touch).
pub(super) fn emit(g: &Graph, covered: &[Covered], removed: &HashSet<NodeId>, patch: &mut Patch) -> Emitted {
    let mut emitter = Emitter::new(g, covered, removed);
    let mut pending: Vec<(usize, Phase)> = Vec::new();
    let mut last_kept: Option<NodeId> = None;
    for &n in g.schedule() {
        match emitter.index.get(&n) {
            Some(&ci) => {
                if emitter.must_flush_before_covered(&pending, ci) {
                    emitter.flush(&std::mem::take(&mut pending), last_kept, patch);
                }
                if covered[ci].merge == MergeKind::Statistics {
                    // Its statistics end the block; its apply op starts the next.
                    pending.push((ci, Phase::Statistics));
                    emitter.flush(&std::mem::take(&mut pending), last_kept, patch);
                    pending.push((ci, Phase::Apply));
                } else {
                    pending.push((ci, Phase::Each));
                }
            }
            None if removed.contains(&n) => {}
            None => {
                if emitter.must_flush_before(&pending, n) {
                    emitter.flush(&std::mem::take(&mut pending), last_kept, patch);
                }
                last_kept = Some(n);
            }
        }
    }
    emitter.flush(&pending, last_kept, patch);
    for c in covered {
        patch.remove_node(c.node);
    }
    emitter.emitted
}

/// What a block entry emits for a covered op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A micro-op per part (a clone of the op on its part).
    Each,
    /// A batch norm's per-part statistics, then their merge.
    Statistics,
    /// A batch norm's per-part apply ops, reading the merged statistics.
    Apply,
}

/// The state of one emission.
struct Emitter<'g, 'c> {
    g: &'g Graph,
    covered: &'c [Covered],
    /// Covered op → its index in `covered`.
    index: HashMap<NodeId, usize>,
    /// The nodes the patch removes (the covered ops among them): their
    /// reads need no merge.
    removed: &'c HashSet<NodeId>,
    /// Covered op → its micro-ops, once emitted.
    made: HashMap<NodeId, Vec<NewNode>>,
    /// Output of a covered op → its merge, once emitted.
    merged: HashMap<TensorId, TensorRef>,
    /// Output of a covered op summing partial results → the running sum of
    /// its parts so far.
    sums: HashMap<TensorId, TensorRef>,
    /// (tensor, axis, parts) → its `SplitPart`s made so far.
    pieces: HashMap<(TensorId, usize, usize), Vec<NewNode>>,
    /// Batch norm → its merge of the parts' statistics, once emitted.
    statistics: HashMap<NodeId, NewNode>,
    /// Batch norm → its parts' statistics ops, as they are emitted.
    partial_statistics: HashMap<NodeId, Vec<NewNode>>,
    /// Names given to `SplitPart`s, to keep them unique.
    names: HashSet<String>,
    emitted: Emitted,
}

impl<'g, 'c> Emitter<'g, 'c> {
    fn new(g: &'g Graph, covered: &'c [Covered], removed: &'c HashSet<NodeId>) -> Self {
        let index = covered.iter().enumerate().map(|(i, c)| (c.node, i)).collect();
        Emitter {
            g,
            covered,
            index,
            removed,
            made: HashMap::new(),
            merged: HashMap::new(),
            sums: HashMap::new(),
            statistics: HashMap::new(),
            partial_statistics: HashMap::new(),
            pieces: HashMap::new(),
            names: HashSet::new(),
            emitted: Emitted::default(),
        }
    }

    /// The covered producer of `t`, if `t` is made in parts.
    fn covered_producer(&self, t: TensorId) -> Option<&'c Covered> {
        self.index.get(&self.g.tensor(t).producer.0).map(|&i| &self.covered[i])
    }

    /// Whether covered op `reader` reads its input `slot` (tensor `t`) part by part.
    fn reads_parts(&self, reader: &Covered, slot: usize, t: TensorId) -> bool {
        let Some(producer) = self.covered_producer(t) else { return false };
        let axis = match producer.merge {
            MergeKind::Concat(axis) => Some(axis),
            // A batch norm's apply parts make output 0 along the batch.
            MergeKind::Statistics => (self.g.node(producer.node).outputs[0] == t).then_some(0),
            MergeKind::Sum | MergeKind::Halo => None,
        };
        axis.is_some() && reader.inputs[slot] == axis && producer.parts == reader.parts
    }

    /// Whether output `t` of a covered op has a reader that reads it whole.
    fn needs_merge(&self, t: TensorId) -> bool {
        self.g.readers(t).any(|(r, slot)| match self.index.get(&r) {
            Some(&ci) => !self.reads_parts(&self.covered[ci], slot, t),
            None => !self.removed.contains(&r),
        }) || self.g.outputs.contains(&t)
    }

    /// Whether the pending block must be emitted before covered op `ci` joins it.
    fn must_flush_before_covered(&self, pending: &[(usize, Phase)], ci: usize) -> bool {
        let Some(&(first, _)) = pending.first() else { return false };
        let c = &self.covered[ci];
        if self.covered[first].parts != c.parts {
            return true;
        }
        let node = self.g.node(c.node);
        let in_block: HashSet<NodeId> = pending.iter().map(|&(i, _)| self.covered[i].node).collect();
        let whole_read = node.inputs.iter().enumerate().any(|(slot, t)| {
            t.is_some_and(|t| in_block.contains(&self.g.tensor(t).producer.0) && !self.reads_parts(c, slot, t))
        });
        whole_read || self.ordered_after(c.node, &in_block)
    }

    /// Whether the pending block must be emitted before op `n` (not covered).
    fn must_flush_before(&self, pending: &[(usize, Phase)], n: NodeId) -> bool {
        if pending.is_empty() {
            return false;
        }
        let g = self.g;
        let in_block: HashSet<NodeId> = pending.iter().map(|&(i, _)| self.covered[i].node).collect();
        let node = g.node(n);
        let reads = node.inputs.iter().flatten().any(|&t| in_block.contains(&g.tensor(t).producer.0));
        let writes_read_variable = g.out_edges(n).any(|(v, e)| {
            e.action == Action::Update
                && in_block.iter().any(|&b| g.node(b).inputs.iter().flatten().any(|&t| g.tensor(t).producer.0 == v))
        });
        reads || writes_read_variable || self.ordered_after(n, &in_block)
    }

    /// Whether `n` has a control edge from an op of `block`.
    fn ordered_after(&self, n: NodeId, block: &HashSet<NodeId>) -> bool {
        self.g.in_edges(n).any(|(from, e)| e.action == Action::Control && block.contains(&from))
    }

    /// Emits `block` after `anchor`: its parts depth-first, then its merges.
    fn flush(&mut self, block: &[(usize, Phase)], anchor: Option<NodeId>, patch: &mut Patch) {
        let Some(&(first, _)) = block.first() else { return };
        let at = Position::After(anchor.expect("an op in parts runs after the nodes it reads"));
        let parts = self.covered[first].parts;
        for i in 0..parts {
            for &(ci, phase) in block {
                match phase {
                    Phase::Each => self.micro_op(ci, i, at, patch),
                    Phase::Statistics => self.statistics_part(ci, i, at, patch),
                    Phase::Apply => self.apply_part(ci, i, at, patch),
                }
            }
        }
        for &(ci, phase) in block {
            match phase {
                Phase::Statistics => self.merge_statistics(ci, at, patch),
                Phase::Each | Phase::Apply => self.merge(ci, at, patch),
            }
        }
    }

    /// The whole of tensor `t`: its merge when a covered op makes it.
    fn whole(&self, t: TensorId) -> TensorRef {
        match self.covered_producer(t) {
            Some(_) => self.merged.get(&t).copied().expect("a tensor is merged before it is read whole"),
            None => TensorRef::Existing(t),
        }
    }

    /// Adds part `i` of covered op `ci`, after the `SplitPart`s it reads.
    fn micro_op(&mut self, ci: usize, i: usize, at: Position, patch: &mut Patch) {
        let (g, c) = (self.g, &self.covered[ci]);
        let node = g.node(c.node);
        // A Reshape's parts are ReshapeTos of its data alone.
        let part_op = split::part_op(&node.op, &node.domain);
        let read = if part_op.is_some() { 1 } else { node.inputs.len() };
        let mut inputs = Vec::with_capacity(read);
        for (slot, input) in node.inputs.iter().enumerate().take(read) {
            let Some(t) = *input else {
                inputs.push(None);
                continue;
            };
            if self.reads_parts(c, slot, t) {
                let producer = g.tensor(t).producer;
                inputs.push(Some(TensorRef::New(self.made[&producer.0][i], producer.1)));
                continue;
            }
            let whole = self.whole(t);
            inputs.push(Some(match c.inputs[slot] {
                Some(axis) => TensorRef::New(self.split_part(c.node, t, whole, axis, i, c.parts, at, patch), 0),
                None => whole,
            }));
        }
        let outputs = node
            .outputs
            .iter()
            .map(|&t| (format!("{}.part{i}", g.tensor(t).name), part_type(&g.tensor(t).ty, c.merge, i, c.parts)))
            .collect();
        let input0 = node.inputs.first().copied().flatten().map_or(&[][..], |t| &g.tensor(t).ty.shape[..]);
        let attrs = split::whole_count_attrs(&node.op, &node.attrs, input0).unwrap_or_else(|| node.attrs.clone());
        let name = format!("{}.part{i}", node.name);
        let micro = match part_op {
            Some(op) => super::emit::lms_node(node, name, op, Attrs::new()),
            None => Node { name, attrs, inputs: vec![], outputs: vec![], ..node.clone() },
        };
        let micro = patch.add_node(micro, inputs, outputs, at);
        let kept = |n: &NodeId| !self.index.contains_key(n);
        for (before, e) in g.in_edges(c.node) {
            if e.action == Action::Control && kept(&before) {
                patch.add_control_edge(NodeRef::Existing(before), NodeRef::New(micro));
            }
        }
        for (after, e) in g.out_edges(c.node) {
            if e.action == Action::Control && kept(&after) {
                patch.add_control_edge(NodeRef::New(micro), NodeRef::Existing(after));
            }
        }
        if c.merge == MergeKind::Sum && i > 0 {
            self.accumulate(c.node, micro, i, c.parts, at, patch);
        }
        self.made.entry(c.node).or_default().push(micro);
    }

    /// Adds part `i` (`micro`) of a covered op's partial results to the
    /// running sum of the parts before it: `Add(sum, part)` right after the
    /// part, so that at most one partial result waits beside the sum.
    fn accumulate(&mut self, op: NodeId, micro: NewNode, i: usize, parts: usize, at: Position, patch: &mut Patch) {
        let node = self.g.node(op);
        for (slot, &t) in node.outputs.iter().enumerate() {
            let tensor = self.g.tensor(t);
            let sum = match i {
                1 => TensorRef::New(self.made[&op][0], slot),
                _ => self.sums[&t],
            };
            let name =
                if i + 1 == parts { format!("{}.merged", tensor.name) } else { format!("{}.sum{i}", tensor.name) };
            let add = Node {
                name: name.clone(),
                op: "Add".into(),
                domain: String::new(),
                attrs: Attrs::new(),
                inputs: vec![],
                outputs: vec![],
                ..node.clone()
            };
            let inputs = vec![Some(sum), Some(TensorRef::New(micro, slot))];
            let add = patch.add_node(add, inputs, vec![(name, tensor.ty.clone())], at);
            self.sums.insert(t, TensorRef::New(add, 0));
        }
    }

    /// Adds the merges of covered op `ci`'s outputs that something reads
    /// whole, and rewires the readers outside the covered ops to them.
    fn merge(&mut self, ci: usize, at: Position, patch: &mut Patch) {
        let (g, c) = (self.g, &self.covered[ci]);
        let node = g.node(c.node);
        for (slot, &t) in node.outputs.iter().enumerate() {
            // A batch norm's outputs after the first come from its statistics' merge.
            if !self.needs_merge(t) || (c.merge == MergeKind::Statistics && slot > 0) {
                continue;
            }
            let tensor = g.tensor(t);
            let merged = match c.merge {
                MergeKind::Concat(_) | MergeKind::Statistics => {
                    let axis = match c.merge {
                        MergeKind::Concat(axis) => axis,
                        _ => 0,
                    };
                    let merge = Node {
                        name: format!("{}.merge", tensor.name),
                        op: "Concat".into(),
                        domain: String::new(),
                        attrs: Attrs::new().with("axis", Attr::Int(axis as i64)),
                        inputs: vec![],
                        outputs: vec![],
                        ..node.clone()
                    };
                    let pieces = self.made[&c.node].iter().map(|&m| Some(TensorRef::New(m, slot))).collect();
                    let out = vec![(format!("{}.merged", tensor.name), tensor.ty.clone())];
                    TensorRef::New(patch.add_node(merge, pieces, out, at), 0)
                }
                MergeKind::Sum => self.sums[&t],
                MergeKind::Halo => unreachable!("a halo run emits itself"),
            };
            self.stand_in(t, merged, patch);
            self.emitted.merges.push((c.node, tensor.name.clone()));
        }
    }

    /// Makes `merged` stand in for the whole tensor `t`: for its readers
    /// that stay, as a graph output, and for later merges.
    fn stand_in(&mut self, t: TensorId, merged: TensorRef, patch: &mut Patch) {
        let g = self.g;
        for (reader, input) in g.readers(t) {
            if !self.removed.contains(&reader) {
                patch.rewire(reader, input, merged);
            }
        }
        if g.outputs.contains(&t) {
            patch.replace_output(t, merged);
        }
        self.merged.insert(t, merged);
    }

    /// Part `i` of input `slot` of covered op `c` (sliced along the batch).
    fn input_part(&mut self, c: &Covered, slot: usize, i: usize, at: Position, patch: &mut Patch) -> TensorRef {
        let t = self.g.node(c.node).inputs[slot].expect("a batch norm reads all its inputs");
        if self.reads_parts(c, slot, t) {
            let producer = self.g.tensor(t).producer;
            return TensorRef::New(self.made[&producer.0][i], producer.1);
        }
        let whole = self.whole(t);
        TensorRef::New(self.split_part(c.node, t, whole, 0, i, c.parts, at, patch), 0)
    }

    /// The inputs of a batch norm's statistics or apply op for part `i`.
    fn form_inputs(
        &mut self,
        ci: usize,
        sources: &[Source],
        i: usize,
        at: Position,
        patch: &mut Patch,
    ) -> Vec<Option<TensorRef>> {
        let c = &self.covered[ci];
        let node = self.g.node(c.node);
        sources
            .iter()
            .map(|&source| match source {
                Source::Part(slot) => Some(self.input_part(c, slot, i, at, patch)),
                Source::Whole(slot) => node.inputs[slot].map(|t| self.whole(t)),
                Source::Merged => {
                    let merge = self.statistics[&c.node];
                    Some(TensorRef::New(merge, node.outputs.len() - 1))
                }
            })
            .collect()
    }

    /// A batch-norm node of the decomposition, named `name`.
    fn form_node(&self, ci: usize, name: String, op: &str, attrs: Attrs) -> Node {
        let node = self.g.node(self.covered[ci].node);
        super::emit::lms_node(node, name, op, attrs)
    }

    /// Adds part `i`'s statistics of batch norm `ci`.
    fn statistics_part(&mut self, ci: usize, i: usize, at: Position, patch: &mut Patch) {
        let (g, c) = (self.g, &self.covered[ci]);
        let node = g.node(c.node);
        let form = Form::of(&node.op).expect("a Statistics op has a Form");
        let x = g.tensor(node.inputs[0].expect("a batch norm reads X"));
        let outputs: Vec<TensorType> = node.outputs.iter().map(|&t| g.tensor(t).ty.clone()).collect();
        let (statistics_ty, _) = form.types(x.ty.shape[1], &outputs);
        let inputs = self.form_inputs(ci, form.statistics_inputs, i, at, patch);
        let name = format!("{}.part{i}.statistics", node.name);
        let part = patch.add_node(
            self.form_node(ci, name.clone(), form.statistics, Attrs::new()),
            inputs,
            vec![(name, statistics_ty)],
            at,
        );
        for (before, e) in g.in_edges(c.node) {
            if e.action == Action::Control && !self.index.contains_key(&before) {
                patch.add_control_edge(NodeRef::Existing(before), NodeRef::New(part));
            }
        }
        self.partial_statistics.entry(c.node).or_default().push(part);
    }

    /// Adds the merge of batch norm `ci`'s statistics; its outputs replace
    /// the op's outputs after the first (running-statistic updates included).
    fn merge_statistics(&mut self, ci: usize, at: Position, patch: &mut Patch) {
        let (g, c) = (self.g, &self.covered[ci]);
        let node = g.node(c.node);
        let form = Form::of(&node.op).expect("a Statistics op has a Form");
        let x = g.tensor(node.inputs[0].expect("a batch norm reads X"));
        let outputs: Vec<TensorType> = node.outputs.iter().map(|&t| g.tensor(t).ty.clone()).collect();
        let (_, merged_tys) = form.types(x.ty.shape[1], &outputs);
        let mut inputs: Vec<Option<TensorRef>> =
            form.merge_inputs.iter().map(|&slot| node.inputs[slot].map(|t| self.whole(t))).collect();
        inputs.extend(self.partial_statistics[&c.node].iter().map(|&p| Some(TensorRef::New(p, 0))));
        let merge_name = format!("{}.merge", node.name);
        let names = node.outputs[1..].iter().map(|&t| format!("{}.merged", g.tensor(t).name));
        let names = names.chain([format!("{merge_name}.statistics")]);
        let merge_node = self.form_node(ci, merge_name, form.merge, form.merge_attrs(&node.attrs));
        let merge = patch.add_node(merge_node, inputs, names.zip(merged_tys).collect(), at);
        for (slot, &t) in node.outputs.iter().enumerate().skip(1) {
            self.stand_in(t, TensorRef::New(merge, slot - 1), patch);
        }
        for (after, e) in g.out_edges(c.node) {
            match e.action {
                Action::Update => patch.add_update_edge(TensorRef::New(merge, e.src_slot - 1), after),
                Action::Control if !self.index.contains_key(&after) => {
                    patch.add_control_edge(NodeRef::New(merge), NodeRef::Existing(after))
                }
                _ => {}
            }
        }
        self.statistics.insert(c.node, merge);
        self.emitted.merges.push((c.node, format!("{} statistics", node.name)));
    }

    /// Adds part `i` of batch norm `ci`'s output 0 from the merged statistics.
    fn apply_part(&mut self, ci: usize, i: usize, at: Position, patch: &mut Patch) {
        let (g, c) = (self.g, &self.covered[ci]);
        let node = g.node(c.node);
        let form = Form::of(&node.op).expect("a Statistics op has a Form");
        let y = g.tensor(node.outputs[0]);
        let inputs = self.form_inputs(ci, form.apply_inputs, i, at, patch);
        let output = (format!("{}.part{i}", y.name), slice_type(&y.ty, 0, i, c.parts));
        let apply = patch.add_node(
            self.form_node(ci, format!("{}.part{i}", node.name), form.apply, Attrs::new()),
            inputs,
            vec![output],
            at,
        );
        for (after, e) in g.out_edges(c.node) {
            if e.action == Action::Control && !self.index.contains_key(&after) {
                patch.add_control_edge(NodeRef::New(apply), NodeRef::Existing(after));
            }
        }
        self.made.entry(c.node).or_default().push(apply);
    }

    /// The `SplitPart` making part `i` of `t` (whole: `whole`) along `axis`
    /// for `reader`, added before its first reader.
    #[allow(clippy::too_many_arguments)]
    fn split_part(
        &mut self,
        reader: NodeId,
        t: TensorId,
        whole: TensorRef,
        axis: usize,
        i: usize,
        parts: usize,
        at: Position,
        patch: &mut Patch,
    ) -> NewNode {
        if let Some(&made) = self.pieces.get(&(t, axis, parts)).and_then(|p| p.get(i)) {
            return made;
        }
        let tensor = self.g.tensor(t);
        if i == 0 {
            self.emitted.splits.push((reader, tensor.name.clone()));
        }
        let mut name = format!("{}.split{i}of{parts}", tensor.name);
        if self.names.contains(&name) {
            name = format!("{}.axis{axis}.split{i}of{parts}", tensor.name);
        }
        self.names.insert(name.clone());
        let piece = Piece { ty: &tensor.ty, whole, name, axis, index: i, parts };
        let made = split_part(self.g.node(reader), piece, at, patch);
        self.pieces.entry((t, axis, parts)).or_default().push(made);
        made
    }
}

/// The type of part `i` of `parts` of an output of type `ty` merged by `merge`.
fn part_type(ty: &TensorType, merge: MergeKind, i: usize, parts: usize) -> TensorType {
    let MergeKind::Concat(axis) = merge else { return ty.clone() };
    slice_type(ty, axis, i, parts)
}
