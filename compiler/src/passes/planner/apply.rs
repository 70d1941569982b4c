//! Building the planned graph: a copy of the training graph in its schedule
//! with each decision spliced in.
//!
//! - A swap: a `SwapOut` right after the tensor's producer, a `SwapIn` right
//!   after the node at its trigger position with a control edge from it;
//!   readers after the trigger read the swap-in.
//! - A recompute: clones of the chain's nodes right before the tensor's first
//!   backward reader, in the phase of that reader, with a control edge from
//!   the node just before them (so the clones cannot run early and the
//!   tensor's memory is really free in between) and control edges to the
//!   writers of the variables they read (as every reader of a variable has);
//!   readers from there on read the clone. Clones read the copy of each
//!   source resident at that point (the original, a swap-in, an earlier clone).
//!
//! The copy lists its nodes in execution order, so that order is its
//! default schedule; the result is checked to be well formed and acyclic.

use super::facts::Facts;
use super::{Decision, Kind};
use crate::analysis::order;
use crate::error::Result;
use crate::ir::{Action, Attrs, Device, Graph, Node, NodeId, Phase, TensorId, SWAP_IN_OP, SWAP_OUT_OP};
use crate::train::LMS_DOMAIN;
use std::collections::{HashMap, HashSet};

/// The training graph of `facts` with `decisions` applied.
pub fn apply(facts: &Facts<'_>, decisions: &[Decision]) -> Result<Graph> {
    let mut copy = Copy::new(facts, decisions);
    let mut clone_groups: Vec<Vec<usize>> = vec![Vec::new(); facts.schedule.len()];
    for (k, decision) in decisions.iter().enumerate() {
        let d = copy.droppable(k);
        match decision.kind {
            Kind::Swap { trigger } => {
                copy.swap_outs_after[d.made].push(k);
                copy.swap_ins_after[trigger].push(k);
            }
            Kind::Recompute { .. } => clone_groups[d.first_backward].push(k),
        }
    }
    // A chain may read an earlier recomputed ancestor re-made at the same point.
    for group in &mut clone_groups {
        group.sort_by_key(|&k| (copy.droppable(k).made, decisions[k].tensor));
    }
    for (step, &id) in facts.schedule.iter().enumerate() {
        for &k in &clone_groups[step] {
            copy.add_clones(k, step);
        }
        copy.copy(id, step);
        for k in std::mem::take(&mut copy.swap_outs_after[step]) {
            copy.add_swap_op(k, SWAP_OUT_OP, step);
        }
        for k in std::mem::take(&mut copy.swap_ins_after[step]) {
            copy.add_swap_op(k, SWAP_IN_OP, step);
        }
    }
    copy.finish()
}

/// The copy under construction.
struct Copy<'f, 'g> {
    facts: &'f Facts<'g>,
    decisions: &'f [Decision],
    out: Graph,
    taken: HashSet<String>,
    /// Decision on each tensor, by tensor.
    decided: HashMap<TensorId, usize>,
    swap_outs_after: Vec<Vec<usize>>,
    swap_ins_after: Vec<Vec<usize>>,
    /// New id of each copied node and tensor of the input.
    node_map: Vec<Option<NodeId>>,
    tensor_map: Vec<Option<TensorId>>,
    /// Per decision: the swap-out's output, and the swap-in's or clone's.
    host_copy: Vec<Option<TensorId>>,
    device_copy: Vec<Option<TensorId>>,
    /// Control edges to add at the end: (new clone, input writer).
    to_writers: Vec<(NodeId, NodeId)>,
}

impl<'f, 'g> Copy<'f, 'g> {
    fn new(facts: &'f Facts<'g>, decisions: &'f [Decision]) -> Copy<'f, 'g> {
        let g = facts.g;
        let mut taken: HashSet<String> = g.node_ids().map(|id| g.node(id).name.clone()).collect();
        taken.extend(g.tensors().map(|(_, t)| t.name.clone()));
        Copy {
            facts,
            decisions,
            out: Graph::new(g.name.clone(), g.opset),
            taken,
            decided: decisions.iter().enumerate().map(|(k, d)| (d.tensor, k)).collect(),
            swap_outs_after: vec![Vec::new(); facts.schedule.len()],
            swap_ins_after: vec![Vec::new(); facts.schedule.len()],
            node_map: vec![None; g.node_bound()],
            tensor_map: vec![None; g.tensor_count()],
            host_copy: vec![None; decisions.len()],
            device_copy: vec![None; decisions.len()],
            to_writers: Vec::new(),
        }
    }

    fn droppable(&self, k: usize) -> &'f super::Droppable {
        let i = self.facts.index[self.decisions[k].tensor.index()].expect("decisions are on droppable tensors");
        &self.facts.droppable[i]
    }

    /// `wanted`, or `wanted_2`, `wanted_3`, ...: a name no node or tensor has.
    fn unique(&mut self, wanted: String) -> String {
        let mut name = wanted.clone();
        let mut n = 1;
        while !self.taken.insert(name.clone()) {
            n += 1;
            name = format!("{wanted}_{n}");
        }
        name
    }

    /// The copy of input tensor `t` that a reader at schedule position `step`
    /// reads: a swap-in after its trigger, a clone from its first backward
    /// reader on, else the copied original.
    fn read(&self, t: TensorId, step: usize) -> TensorId {
        if let Some(&k) = self.decided.get(&t) {
            let later = match self.decisions[k].kind {
                Kind::Swap { trigger } => step > trigger,
                Kind::Recompute { .. } => step >= self.droppable(k).first_backward,
            };
            if later {
                return self.device_copy[k].expect("a swap-in or clone precedes its readers");
            }
        }
        self.tensor_map[t.index()].expect("a tensor is copied before its readers (schedule order)")
    }

    /// Copies input node `id`, at schedule position `step`.
    fn copy(&mut self, id: NodeId, step: usize) {
        let node = self.facts.g.node(id);
        let inputs = node.inputs.iter().map(|slot| slot.map(|t| self.read(t, step))).collect();
        let new = self.add(Node { inputs, ..node.clone() }, &node.outputs, |_, name| name.to_string());
        self.node_map[id.index()] = Some(new);
        for (&old, &t) in node.outputs.iter().zip(&self.out.node(new).outputs) {
            self.tensor_map[old.index()] = Some(t);
        }
    }

    /// Adds `node` with outputs typed and valued like `like`, named by `name`.
    fn add(&mut self, node: Node, like: &[TensorId], name: impl Fn(&mut Self, &str) -> String) -> NodeId {
        let g = self.facts.g;
        let outputs = like.iter().map(|&t| (name(self, &g.tensor(t).name), g.tensor(t).ty.clone())).collect();
        let new = self.out.add_node(Node { outputs: Vec::new(), ..node }, outputs);
        for (i, &t) in like.iter().enumerate() {
            let made = self.out.node(new).outputs[i];
            self.out.tensor_mut(made).data = g.tensor(t).data.clone();
        }
        new
    }

    /// Adds the swap-out (after the producer) or swap-in (after the trigger,
    /// with a control edge from it) of decision `k`.
    fn add_swap_op(&mut self, k: usize, op: &str, step: usize) {
        let g = self.facts.g;
        let t = self.decisions[k].tensor;
        let (input, phase, suffix) = if op == SWAP_OUT_OP {
            (self.read(t, step), g.node(g.tensor(t).producer.0).phase, "swap_out")
        } else {
            let reader = self.facts.schedule[self.droppable(k).first_backward];
            (self.host_copy[k].expect("the swap-out precedes its swap-in"), g.node(reader).phase, "swap_in")
        };
        let name = self.unique(format!("{}/{suffix}", g.tensor(t).name));
        let node = Node {
            name: name.clone(),
            op: op.to_string(),
            domain: LMS_DOMAIN.to_string(),
            attrs: Attrs::new(),
            parameterized: false,
            phase,
            device: Device::Cpu,
            inputs: vec![Some(input)],
            outputs: Vec::new(),
        };
        let ty = self.out.tensor(input).ty.clone();
        let id = self.out.add_node(node, vec![(name, ty)]);
        let made = self.out.node(id).outputs[0];
        if op == SWAP_OUT_OP {
            self.host_copy[k] = Some(made);
        } else {
            let trigger = self.node_map[self.facts.schedule[step].index()].expect("the trigger is copied");
            self.out.add_control_edge(trigger, id);
            self.device_copy[k] = Some(made);
        }
    }

    /// Adds the clones of decision `k`'s chain right before position `step`.
    fn add_clones(&mut self, k: usize, step: usize) {
        let Kind::Recompute { chain } = &self.decisions[k].kind else { return };
        let g = self.facts.g;
        let phase: Phase = g.node(self.facts.schedule[step]).phase;
        let before = self.node_map[self.facts.schedule[step - 1].index()].expect("the previous node is copied");
        let mut local: HashMap<TensorId, TensorId> = HashMap::new();
        for &n in &chain.nodes {
            let node = g.node(n);
            let inputs: Vec<Option<TensorId>> = node
                .inputs
                .iter()
                .map(|slot| slot.map(|u| local.get(&u).copied().unwrap_or_else(|| self.read(u, step))))
                .collect();
            let starts = node.inputs.iter().flatten().all(|u| !local.contains_key(u));
            let name = self.unique(format!("{}/recompute", node.name));
            let clone = Node { name, phase, inputs, ..node.clone() };
            let new = self.add(clone, &node.outputs, |copy, name| copy.unique(format!("{name}/recompute")));
            if starts {
                self.out.add_control_edge(before, new);
            }
            for &u in node.inputs.iter().flatten() {
                if let Some(w) = self.facts.writer[u.index()].filter(|&w| w > step) {
                    self.to_writers.push((new, self.facts.schedule[w]));
                }
            }
            for (&old, &t) in node.outputs.iter().zip(&self.out.node(new).outputs) {
                local.insert(old, t);
            }
        }
        self.device_copy[k] = Some(local[&self.decisions[k].tensor]);
    }

    /// Copies control and update edges, inputs and outputs; checks the result.
    fn finish(mut self) -> Result<Graph> {
        let g = self.facts.g;
        let node = |id: NodeId| self.node_map[id.index()].expect("every node is copied");
        let mut control: Vec<(NodeId, NodeId)> = Vec::new();
        let mut update = Vec::new();
        for (src, dst, e) in g.edges() {
            match (e.action, e.tensor) {
                (Action::Control, _) => control.push((node(src), node(dst))),
                (Action::Update, Some(t)) => update.push((self.tensor_map[t.index()], node(dst))),
                (Action::Update, None) | (Action::Read, _) => {}
            }
        }
        control.extend(self.to_writers.iter().map(|&(clone, writer)| (clone, node(writer))));
        for (before, after) in control {
            self.out.add_control_edge(before, after);
        }
        for (value, variable) in update {
            self.out.add_update_edge(value.expect("updates are copied"), variable);
        }
        let mapped = |t: &TensorId| self.tensor_map[t.index()].expect("every tensor is copied");
        self.out.inputs = g.inputs.iter().map(mapped).collect();
        self.out.outputs = g.outputs.iter().map(mapped).collect();
        self.out.verify()?;
        order::schedule(&self.out)?;
        Ok(self.out)
    }
}
