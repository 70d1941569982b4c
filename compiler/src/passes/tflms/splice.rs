//! The rewrite as a patch: each swap-out placed right after its producer,
//! each swap-in right after its control op (or after the swapped tensor's
//! producer and its swap-out, when that comes later) or, without a control
//! op, right before its first consumer; the swapped consumers rewired to
//! read their swap-in. At one anchor the swap-outs come first, then the
//! swap-ins, each in plan order.

use super::{Order, SwapInReport, SwapPlan, SwappedTensor, TflmsReport, Trigger};
use crate::ir::{Attrs, Device, Graph, Node, Phase, SWAP_IN_OP, SWAP_OUT_OP};
use crate::pipeline::{NewNode, NodeRef, Patch, Position, TensorRef};
use lms_proto::contract::LMS_DOMAIN;
use std::collections::HashSet;

/// Name of the TFLMS pass (on patches and in the pipeline).
pub const PASS: &str = "tflms";

/// The patch that splices the swaps of `plans` into `g`, and its report.
/// `queue` lists every swap-in once, as (plan, swap-in) indices, in the
/// order they are added: at one anchor, the order they run in.
pub(super) fn splice(
    g: &Graph,
    order: &Order,
    plans: &[SwapPlan<'_>],
    queue: &[(usize, usize)],
) -> (Patch, TflmsReport) {
    let names = Names::new(g, plans);
    let mut patch = Patch::new(PASS);
    let swap_outs: Vec<NewNode> = plans
        .iter()
        .enumerate()
        .map(|(i, plan)| {
            let (tensor, producer) = (plan.candidate.tensor, plan.candidate.producer);
            let phase = g.node(producer).phase;
            let node = swap_op(&names.swap_outs[i], SWAP_OUT_OP, phase);
            let ty = g.tensor(tensor).ty.clone();
            let outputs = vec![(names.swap_outs[i].clone(), ty)];
            patch.add_node(node, vec![Some(TensorRef::Existing(tensor))], outputs, Position::After(producer))
        })
        .collect();
    let mut swap_ins: Vec<Vec<Option<NewNode>>> = plans.iter().map(|p| vec![None; p.swap_ins.len()]).collect();
    for &(i, j) in queue {
        let (tensor, producer) = (plans[i].candidate.tensor, plans[i].candidate.producer);
        let swap_in = &plans[i].swap_ins[j];
        let position = match swap_in.control {
            Some(c) if order.position(c) > order.position(producer) => Position::After(c),
            Some(_) => Position::After(producer),
            None => Position::Before(swap_in.consumers[0]),
        };
        let name = &names.swap_ins[i][j];
        let node = swap_op(name, SWAP_IN_OP, g.node(swap_in.consumers[0]).phase);
        let outputs = vec![(name.clone(), g.tensor(tensor).ty.clone())];
        let new = patch.add_node(node, vec![Some(TensorRef::New(swap_outs[i], 0))], outputs, position);
        if let Some(c) = swap_in.control {
            patch.add_control_edge(NodeRef::Existing(c), NodeRef::New(new));
        }
        for &consumer in &swap_in.consumers {
            for (slot, _) in g.node(consumer).inputs.iter().enumerate().filter(|(_, t)| **t == Some(tensor)) {
                patch.rewire(consumer, slot, TensorRef::New(new, 0));
            }
        }
        swap_ins[i][j] = Some(new);
    }
    for (i, plan) in plans.iter().enumerate() {
        let added = plan.swap_ins.iter().zip(&swap_ins[i]).map(|(s, new)| (new.expect("queued"), s.control)).collect();
        patch.record_swap(TensorRef::Existing(plan.candidate.tensor), swap_outs[i], added);
    }
    (patch, report(g, order, plans, &names))
}

/// A swap op on the CPU device (its output is given to the patch).
fn swap_op(name: &str, op: &str, phase: Phase) -> Node {
    Node {
        name: name.to_string(),
        op: op.to_string(),
        domain: LMS_DOMAIN.to_string(),
        attrs: Attrs::new(),
        parameterized: false,
        phase,
        device: Device::Cpu,
        inputs: Vec::new(),
        outputs: Vec::new(),
    }
}

/// The names of the new nodes (and of their output tensors): the swapped
/// tensor's name with `/swap_out` or `/swap_in`, made unique among node and
/// tensor names, in plan order.
struct Names {
    swap_outs: Vec<String>,
    swap_ins: Vec<Vec<String>>,
}

impl Names {
    fn new(g: &Graph, plans: &[SwapPlan<'_>]) -> Names {
        // Borrowed, so a plan does not copy every name of the graph.
        let mut taken: HashSet<&str> = g.node_ids().map(|id| g.node(id).name.as_str()).collect();
        taken.extend(g.tensors().map(|(_, t)| t.name.as_str()));
        let mut added: HashSet<String> = HashSet::new();
        let mut unique = |wanted: String| {
            let mut name = wanted.clone();
            let mut n = 1;
            while taken.contains(name.as_str()) || !added.insert(name.clone()) {
                n += 1;
                name = format!("{wanted}_{n}");
            }
            name
        };
        let mut names = Names { swap_outs: Vec::new(), swap_ins: Vec::new() };
        for plan in plans {
            let base: &str = &g.tensor(plan.candidate.tensor).name;
            names.swap_outs.push(unique(format!("{base}/swap_out")));
            names.swap_ins.push(plan.swap_ins.iter().map(|_| unique(format!("{base}/swap_in"))).collect());
        }
        names
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
