//! The plan as a [`Patch`] on the training graph: each decision spliced in.
//!
//! - A swap: a `SwapOut` right after the tensor's producer (for its first
//!   gap; for a later one, after the use that starts the gap, reading the
//!   copy there), a `SwapIn` right after the node at its trigger position
//!   with a control edge from it; readers after the trigger are rewired to
//!   the swap-in.
//! - A recompute: copies of the chain's nodes right before the tensor's
//!   first reader after its gap, in the phase of that reader, with a control edge from
//!   the node just before them (so the copies cannot run early and the
//!   tensor's memory is really free in between) and control edges to the
//!   writers of the variables they read (as every reader of a variable has);
//!   readers from there on are rewired to the copy. Copies read the copy of
//!   each source resident at that point (the original, a swap-in, an earlier
//!   copy).
//!
//! Nodes are added in schedule order, so each reads only nodes added before
//! it, and the patched schedule is the planner's schedule with the new nodes
//! in place.

use super::facts::{Droppable, Facts};
use super::{Decision, Kind};
use crate::ir::{Attrs, Device, Graph, Node, NodeId, TensorId, SWAP_IN_OP, SWAP_OUT_OP};
use crate::pipeline::{NewNode, NodeRef, Patch, Position, TensorRef};
use lms_proto::contract::LMS_DOMAIN;
use std::collections::{HashMap, HashSet};

/// Name of the planner's pass (`--dump-after plan`).
pub const PASS: &str = "plan";

/// The patch that carries out `decisions` on the training graph of `facts`.
pub fn patch(facts: &Facts<'_>, decisions: &[Decision]) -> Patch {
    patch_named(facts, &Names::of(facts.g), decisions)
}

/// The names of a graph's nodes and of its tensors (borrowed), which the
/// names of added ones must differ from: gathered once for a graph a search
/// plans many times.
pub struct Names<'g> {
    nodes: HashSet<&'g str>,
    tensors: HashSet<&'g str>,
}

impl<'g> Names<'g> {
    /// The names in `g`.
    pub fn of(g: &'g Graph) -> Names<'g> {
        Names {
            nodes: g.node_ids().map(|id| g.node(id).name.as_str()).collect(),
            tensors: g.tensors().map(|(_, t)| t.name.as_str()).collect(),
        }
    }
}

/// [`patch`], with the names of the graph of `facts` gathered.
pub(super) fn patch_named<'f, 'g>(facts: &'f Facts<'g>, names: &'f Names<'g>, decisions: &'f [Decision]) -> Patch {
    let mut b = Builder::new(facts, names, decisions);
    let steps = facts.schedule.len();
    let (mut clone_groups, mut swap_outs, mut swap_ins) =
        (vec![Vec::new(); steps], vec![Vec::new(); steps], vec![Vec::new(); steps]);
    for (k, decision) in decisions.iter().enumerate() {
        let d = b.droppable(k);
        match decision.kind {
            Kind::Swap { trigger } => {
                swap_outs[d.out_at].push(k);
                swap_ins[trigger].push(k);
            }
            Kind::Recompute { .. } => clone_groups[d.gap_end].push(k),
        }
    }
    // A chain may read an earlier recomputed ancestor re-made at the same point.
    for group in &mut clone_groups {
        group.sort_by_key(|&k| (b.droppable(k).made, decisions[k].tensor));
    }
    for (step, &id) in facts.schedule.iter().enumerate() {
        for &k in &clone_groups[step] {
            b.add_clones(k, step);
        }
        b.rewire(id, step);
        for &k in &swap_outs[step] {
            b.add_swap_out(k, step);
        }
        for &k in &swap_ins[step] {
            b.add_swap_in(k, step);
        }
    }
    b.patch
}

/// The decisions on each tensor, in the order of their gaps.
fn decided(facts: &Facts<'_>, decisions: &[Decision]) -> HashMap<TensorId, Vec<usize>> {
    let mut decided: HashMap<TensorId, Vec<usize>> = HashMap::new();
    for (k, d) in decisions.iter().enumerate() {
        decided.entry(d.tensor).or_default().push(k);
    }
    for ks in decided.values_mut() {
        ks.sort_by_key(|&k| facts.droppable[decisions[k].droppable].gap_start);
    }
    decided
}

/// The patch under construction.
struct Builder<'f, 'g> {
    facts: &'f Facts<'g>,
    decisions: &'f [Decision],
    patch: Patch,
    /// Names of the graph's nodes and tensors, and of those added, so added
    /// ones get new names.
    names: &'f Names<'g>,
    added_node_names: HashSet<String>,
    added_tensor_names: HashSet<String>,
    /// Decisions on each tensor (one per gap at most), in schedule order.
    decided: HashMap<TensorId, Vec<usize>>,
    /// Per decision: the swap-out and the copy it reads, and the swap-in's
    /// or last copy's output.
    swap_out: Vec<Option<NewNode>>,
    swapped: Vec<Option<TensorRef>>,
    device_copy: Vec<Option<TensorRef>>,
}

impl<'f, 'g> Builder<'f, 'g> {
    fn new(facts: &'f Facts<'g>, names: &'f Names<'g>, decisions: &'f [Decision]) -> Builder<'f, 'g> {
        Builder {
            facts,
            decisions,
            patch: Patch::new(PASS),
            names,
            added_node_names: HashSet::new(),
            added_tensor_names: HashSet::new(),
            decided: decided(facts, decisions),
            swap_out: vec![None; decisions.len()],
            swapped: vec![None; decisions.len()],
            device_copy: vec![None; decisions.len()],
        }
    }

    fn droppable(&self, k: usize) -> &'f Droppable {
        &self.facts.droppable[self.decisions[k].droppable]
    }

    /// `wanted`, or `wanted_2`, `wanted_3`, ...: a name no node (with
    /// `node`) and no tensor (with `tensor`) has yet; taken from then on.
    fn unique(&mut self, wanted: String, node: bool, tensor: bool) -> String {
        let free = |b: &Self, name: &String| {
            let taken =
                |graph: &HashSet<&str>, added: &HashSet<String>| graph.contains(name.as_str()) || added.contains(name);
            !(node && taken(&b.names.nodes, &b.added_node_names)
                || tensor && taken(&b.names.tensors, &b.added_tensor_names))
        };
        let mut name = wanted.clone();
        let mut n = 1;
        while !free(self, &name) {
            n += 1;
            name = format!("{wanted}_{n}");
        }
        if node {
            self.added_node_names.insert(name.clone());
        }
        if tensor {
            self.added_tensor_names.insert(name.clone());
        }
        name
    }

    /// The copy of tensor `t` that a reader at schedule position `step`
    /// reads: that of the last of its gaps decided before `step` (a swap-in
    /// after its trigger, a recomputed copy from the first reader after the
    /// gap on), else the original.
    fn read(&self, t: TensorId, step: usize) -> TensorRef {
        let made_by = |k: usize| match self.decisions[k].kind {
            Kind::Swap { trigger } => step > trigger,
            Kind::Recompute { .. } => step >= self.droppable(k).gap_end,
        };
        let decided = self.decided.get(&t).map_or(&[][..], |ks| &ks[..]);
        match decided.iter().rev().find(|&&k| made_by(k)) {
            Some(&k) => self.device_copy[k].expect("a swap-in or copy precedes its readers"),
            None => TensorRef::Existing(t),
        }
    }

    /// Rewires the inputs of node `id`, at schedule position `step`, that read a moved tensor.
    fn rewire(&mut self, id: NodeId, step: usize) {
        for (slot, t) in self.facts.g.node(id).inputs.iter().enumerate() {
            let Some(t) = *t else { continue };
            let copy = self.read(t, step);
            if copy != TensorRef::Existing(t) {
                self.patch.rewire(id, slot, copy);
            }
        }
    }

    /// A swap op of decision `k`'s tensor reading `input`, in `phase`.
    fn swap_op(
        &mut self,
        k: usize,
        op: &str,
        suffix: &str,
        input: TensorRef,
        phase_of: NodeId,
        at: Position,
    ) -> NewNode {
        let g = self.facts.g;
        let t = g.tensor(self.decisions[k].tensor);
        let name = self.unique(format!("{}/{suffix}", t.name), true, true);
        let node = Node {
            name: name.clone(),
            op: op.to_string(),
            domain: LMS_DOMAIN.to_string(),
            attrs: Attrs::new(),
            parameterized: false,
            phase: g.node(phase_of).phase,
            device: Device::Cpu,
            inputs: Vec::new(),
            outputs: Vec::new(),
        };
        self.patch.add_node(node, vec![Some(input)], vec![(name, t.ty.clone())], at)
    }

    /// The swap-out of decision `k`, right after the node at `step` (the
    /// tensor's producer for its first gap), reading the copy there.
    fn add_swap_out(&mut self, k: usize, step: usize) {
        let copy = self.read(self.decisions[k].tensor, step);
        let after = self.facts.schedule[step];
        let out = self.swap_op(k, SWAP_OUT_OP, "swap_out", copy, after, Position::After(after));
        self.swap_out[k] = Some(out);
        self.swapped[k] = Some(copy);
    }

    /// The swap-in of decision `k`, right after its trigger at `step`, with a control edge from it.
    fn add_swap_in(&mut self, k: usize, step: usize) {
        let out = self.swap_out[k].expect("the swap-out precedes its swap-in");
        let reader = self.facts.schedule[self.droppable(k).gap_end];
        let trigger = self.facts.schedule[step];
        let into = self.swap_op(k, SWAP_IN_OP, "swap_in", TensorRef::New(out, 0), reader, Position::After(trigger));
        self.patch.add_control_edge(NodeRef::Existing(trigger), NodeRef::New(into));
        let copy = self.swapped[k].expect("the swap-out records what it reads");
        self.patch.record_swap(copy, out, vec![(into, Some(trigger))]);
        self.device_copy[k] = Some(TensorRef::New(into, 0));
    }

    /// The copies of decision `k`'s chain, right before the node at `step`.
    fn add_clones(&mut self, k: usize, step: usize) {
        let Kind::Recompute { chain } = &self.decisions[k].kind else { return };
        let g = self.facts.g;
        let reader = self.facts.schedule[step];
        let before = NodeRef::Existing(self.facts.schedule[step - 1]);
        let mut local: HashMap<TensorId, TensorRef> = HashMap::new();
        let mut copies = Vec::with_capacity(chain.nodes.len());
        for &n in &chain.nodes {
            let node = g.node(n);
            let inputs: Vec<Option<TensorRef>> = node
                .inputs
                .iter()
                .map(|slot| slot.map(|u| local.get(&u).copied().unwrap_or_else(|| self.read(u, step))))
                .collect();
            let starts = node.inputs.iter().flatten().all(|u| !local.contains_key(u));
            let name = self.unique(format!("{}/recompute", node.name), true, false);
            let names = node
                .outputs
                .iter()
                .map(|&t| self.unique(format!("{}/recompute", g.tensor(t).name), false, true))
                .collect();
            let copy =
                Node { name, phase: g.node(reader).phase, inputs: Vec::new(), outputs: Vec::new(), ..node.clone() };
            let new = self.patch.add_copy(g, n, copy, inputs, names, Position::Before(reader));
            if starts {
                self.patch.add_control_edge(before, NodeRef::New(new));
            }
            for &u in node.inputs.iter().flatten() {
                if let Some(w) = self.facts.writer[u.index()].filter(|&w| w > step) {
                    self.patch.add_control_edge(NodeRef::New(new), NodeRef::Existing(self.facts.schedule[w]));
                }
            }
            for (slot, &old) in node.outputs.iter().enumerate() {
                local.insert(old, TensorRef::New(new, slot));
            }
            copies.push(new);
        }
        let t = self.decisions[k].tensor;
        self.device_copy[k] = Some(local[&t]);
        self.patch.record_recompute(t, copies, reader);
    }
}
