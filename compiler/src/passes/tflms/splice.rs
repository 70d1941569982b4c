//! Building the rewritten graph: a copy of the input, node by node in the
//! input's schedule, with each swap-out inserted right after its producer,
//! each swap-in right after its control op (and its swap-out) or, without
//! one, right before its first consumer. That order is topological, so it
//! is the copy's own default schedule ([`crate::analysis::order::schedule`]
//! runs ready nodes in insertion order).

use super::{Order, SwapInReport, SwapPlan, SwappedTensor, TflmsReport, Trigger};
use crate::analysis::order;
use crate::error::Result;
use crate::ir::{Action, Attrs, Device, Graph, Node, NodeId, Phase, TensorId, SWAP_IN_OP, SWAP_OUT_OP};
use crate::train::LMS_DOMAIN;
use std::collections::{HashMap, HashSet};

/// A swap-in: (index of its plan, index among the plan's swap-ins).
type SwapInRef = (usize, usize);

/// Copies `g` with the swaps of `plans` spliced in; checks that the result
/// is well formed and acyclic.
pub(super) fn splice(g: &Graph, order: &Order, plans: &[SwapPlan<'_>]) -> Result<(Graph, TflmsReport)> {
    let mut splicer = Splicer::new(g, order, plans);
    for &id in &order.schedule {
        // Each input node is visited once, so its slots can be taken.
        for r in std::mem::take(&mut splicer.slots.before[id.index()]) {
            splicer.add_swap_in(r);
        }
        splicer.copy(id);
        for i in std::mem::take(&mut splicer.slots.swap_outs[id.index()]) {
            splicer.add_swap_out(i);
        }
        for r in std::mem::take(&mut splicer.slots.after[id.index()]) {
            splicer.add_swap_in(r);
        }
    }
    splicer.copy_edges_and_signature();
    let report = report(g, order, plans, &splicer.names);
    let out = splicer.out;
    out.verify()?;
    order::schedule(&out)?;
    Ok((out, report))
}

/// The names of the new nodes (and of their output tensors).
struct Names {
    swap_outs: Vec<String>,
    swap_ins: Vec<Vec<String>>,
}

/// Where each new node goes, by the input node it follows or precedes;
/// indexed by `NodeId::index()` of the input.
struct Slots {
    /// Swap-outs (plan indices) right after the node.
    swap_outs: Vec<Vec<usize>>,
    /// Swap-ins right before the node (no control op: before the consumer).
    before: Vec<Vec<SwapInRef>>,
    /// Swap-ins right after the node (the later of the control op and the
    /// swapped tensor's producer).
    after: Vec<Vec<SwapInRef>>,
}

/// The copy under construction.
struct Splicer<'a> {
    g: &'a Graph,
    plans: &'a [SwapPlan<'a>],
    names: Names,
    slots: Slots,
    /// (consumer, tensor) pairs that read a swap-in instead of the tensor.
    redirect: HashMap<(NodeId, TensorId), SwapInRef>,
    out: Graph,
    /// New id of each copied input node, indexed by `NodeId::index()`.
    node_map: Vec<Option<NodeId>>,
    /// New id of each copied input tensor, indexed by `TensorId::index()`.
    tensor_map: Vec<Option<TensorId>>,
    /// Output of each plan's swap-out, once added.
    swap_out_tensors: Vec<Option<TensorId>>,
    /// Output of each swap-in, once added.
    swap_in_tensors: HashMap<SwapInRef, TensorId>,
}

impl<'a> Splicer<'a> {
    fn new(g: &'a Graph, order: &Order, plans: &'a [SwapPlan<'a>]) -> Splicer<'a> {
        let mut taken: HashSet<String> = g.node_ids().map(|id| g.node(id).name.clone()).collect();
        taken.extend(g.tensors().map(|(_, t)| t.name.clone()));
        let mut unique = |wanted: String| {
            let mut name = wanted.clone();
            let mut n = 1;
            while !taken.insert(name.clone()) {
                n += 1;
                name = format!("{wanted}_{n}");
            }
            name
        };
        let bound = g.node_bound();
        let mut names = Names { swap_outs: Vec::new(), swap_ins: Vec::new() };
        let mut slots = Slots {
            swap_outs: vec![Vec::new(); bound],
            before: vec![Vec::new(); bound],
            after: vec![Vec::new(); bound],
        };
        let mut redirect = HashMap::new();
        for (i, plan) in plans.iter().enumerate() {
            let (tensor, producer) = (plan.candidate.tensor, plan.candidate.producer);
            let base = &g.tensor(tensor).name;
            names.swap_outs.push(unique(format!("{base}/swap_out")));
            names.swap_ins.push(plan.swap_ins.iter().map(|_| unique(format!("{base}/swap_in"))).collect());
            slots.swap_outs[producer.index()].push(i);
            for (j, swap_in) in plan.swap_ins.iter().enumerate() {
                match swap_in.control {
                    Some(control) => {
                        let anchor =
                            if order.position(control) > order.position(producer) { control } else { producer };
                        slots.after[anchor.index()].push((i, j));
                    }
                    None => slots.before[swap_in.consumers[0].index()].push((i, j)),
                }
                for &consumer in &swap_in.consumers {
                    redirect.insert((consumer, tensor), (i, j));
                }
            }
        }
        Splicer {
            g,
            plans,
            names,
            slots,
            redirect,
            out: Graph::new(g.name.clone(), g.opset),
            node_map: vec![None; bound],
            tensor_map: vec![None; g.tensor_count()],
            swap_out_tensors: vec![None; plans.len()],
            swap_in_tensors: HashMap::new(),
        }
    }

    /// Copies an input node; its qualifying reads go to their swap-ins.
    fn copy(&mut self, id: NodeId) {
        let node = self.g.node(id);
        let inputs = node.inputs.iter().map(|slot| slot.map(|t| self.read(id, t))).collect();
        let outputs =
            node.outputs.iter().map(|&t| (self.g.tensor(t).name.clone(), self.g.tensor(t).ty.clone())).collect();
        let new = self.out.add_node(Node { inputs, outputs: Vec::new(), ..node.clone() }, outputs);
        let new_outputs = self.out.node(new).outputs.clone();
        for (&old, &t) in node.outputs.iter().zip(&new_outputs) {
            self.out.tensor_mut(t).data = self.g.tensor(old).data.clone();
            self.tensor_map[old.index()] = Some(t);
        }
        self.node_map[id.index()] = Some(new);
    }

    /// The copy's tensor that `consumer` reads in place of input tensor `t`.
    fn read(&self, consumer: NodeId, t: TensorId) -> TensorId {
        match self.redirect.get(&(consumer, t)) {
            Some(r) => self.swap_in_tensors[r],
            None => self.mapped(t),
        }
    }

    /// The copy of input tensor `t`; its producer precedes every reader in
    /// the schedule, so it has been copied.
    fn mapped(&self, t: TensorId) -> TensorId {
        self.tensor_map[t.index()].expect("a tensor is copied before its readers (schedule order)")
    }

    /// Adds the swap-out of plan `i`, reading the copied tensor.
    fn add_swap_out(&mut self, i: usize) {
        let candidate = self.plans[i].candidate;
        let input = self.mapped(candidate.tensor);
        let phase = self.g.node(candidate.producer).phase;
        let name = self.names.swap_outs[i].clone();
        let id = self.add_lms_op(name, SWAP_OUT_OP, phase, input);
        self.swap_out_tensors[i] = Some(self.out.node(id).outputs[0]);
    }

    /// Adds a swap-in reading its plan's swap-out, with its control edge.
    fn add_swap_in(&mut self, (i, j): SwapInRef) {
        let plan = &self.plans[i].swap_ins[j];
        let input = self.swap_out_tensors[i].expect("a swap-in is placed after its swap-out");
        let phase = self.g.node(plan.consumers[0]).phase;
        let name = self.names.swap_ins[i][j].clone();
        let id = self.add_lms_op(name, SWAP_IN_OP, phase, input);
        if let Some(control) = plan.control {
            let before = self.node_map[control.index()].expect("a swap-in is placed after its control op");
            self.out.add_control_edge(before, id);
        }
        self.swap_in_tensors.insert((i, j), self.out.node(id).outputs[0]);
    }

    /// Adds a swap op on the CPU device whose one output is a copy of `input`
    /// named like the node.
    fn add_lms_op(&mut self, name: String, op: &str, phase: Phase, input: TensorId) -> NodeId {
        let ty = self.out.tensor(input).ty.clone();
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
        self.out.add_node(node, vec![(name, ty)])
    }

    /// Copies the input's control and update edges, inputs and outputs.
    fn copy_edges_and_signature(&mut self) {
        let node = |id: NodeId| self.node_map[id.index()].expect("every node is copied");
        let mut control = Vec::new();
        let mut update = Vec::new();
        for (src, dst, e) in self.g.edges() {
            match (e.action, e.tensor) {
                (Action::Control, _) => control.push((node(src), node(dst))),
                (Action::Update, Some(t)) => update.push((self.mapped(t), node(dst))),
                (Action::Update, None) | (Action::Read, _) => {}
            }
        }
        for (before, after) in control {
            self.out.add_control_edge(before, after);
        }
        for (value, variable) in update {
            self.out.add_update_edge(value, variable);
        }
        self.out.inputs = self.g.inputs.iter().map(|&t| self.mapped(t)).collect();
        self.out.outputs = self.g.outputs.iter().map(|&t| self.mapped(t)).collect();
    }
}

/// The report of a splice.
fn report(g: &Graph, order: &Order, plans: &[SwapPlan<'_>], names: &Names) -> TflmsReport {
    let mut report = TflmsReport::default();
    for (i, plan) in plans.iter().enumerate() {
        let (tensor, producer) = (plan.candidate.tensor, plan.candidate.producer);
        let last = plan.candidate.consumers.iter().map(|&c| order.gamma(c)).max().unwrap_or(0);
        let swap_ins = plan
            .swap_ins
            .iter()
            .zip(&names.swap_ins[i])
            .map(|(swap_in, name)| SwapInReport {
                node: name.clone(),
                consumers: swap_in.consumers.iter().map(|&c| g.node(c).name.clone()).collect(),
                trigger: swap_in.control.map_or(Trigger::Consumer, |c| Trigger::After(g.node(c).name.clone())),
            })
            .collect::<Vec<_>>();
        report.ops_added += 1 + swap_ins.len();
        report.swap_ins_without_control += swap_ins.iter().filter(|s| s.trigger == Trigger::Consumer).count();
        report.tensors.push(SwappedTensor {
            tensor: g.tensor(tensor).name.clone(),
            bytes: g.tensor(tensor).ty.bytes(),
            distance: last.saturating_sub(order.gamma(producer)),
            swap_out: names.swap_outs[i].clone(),
            swap_ins,
        });
    }
    report
}
