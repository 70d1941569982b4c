//! Rewrites edited by hand: a correct split of a forward op into micro-ops
//! is proven, and broken rewrites are rejected with the output named — a
//! swap-in wired to another tensor's swap-out, a split missing a part, a
//! concatenation in the wrong order, spatial (halo) splits with a shifted
//! window, wrong pads or misplaced gradient windows, and batch splits of the
//! loss whose parts divide by their own count instead of the whole batch's.

use lms_compiler::analysis::order;
use lms_compiler::egraph::{self, Limits, Status};
use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::ir::{Action, Attr, Attrs, Graph, Node, NodeId, Phase, TensorId, SWAP_IN_OP, SWAP_OUT_OP};
use lms_compiler::passes::split::{self, SplitRequest};
use lms_compiler::passes::tflms::{self, TflmsConfig};
use lms_compiler::pipeline::apply_checked;
use lms_compiler::shape::split::Dim;
use lms_compiler::train::{self, Loss, Optimizer, TrainOptions};
use lms_compiler::Error;
use lms_tests::fixture;
use std::collections::HashMap;

fn training_graph(model: &str) -> Graph {
    let path = fixture(&format!("models/{model}.onnx"));
    let model = frontend::load(&path, &FrontendOptions { batch: Some(2), ..Default::default() }).unwrap();
    let options = TrainOptions {
        loss: Loss::SoftmaxCrossEntropy,
        optimizer: Optimizer::Sgd { lr: 0.01 },
        trainable: vec![],
        frozen: vec![],
        running_variance: None,
    };
    train::build(&model.graph, &options).unwrap()
}

/// A copy of a graph, node by node in schedule order. `replace` may add
/// nodes of its own in place of a node (returning the tensors that stand for
/// its outputs) and may rewire reads through `rewire` (the input tensors of a
/// node, by the original graph's ids).
struct Copier<'a> {
    g: &'a Graph,
    out: Graph,
    tensors: HashMap<TensorId, TensorId>,
    nodes: HashMap<NodeId, NodeId>,
}

impl<'a> Copier<'a> {
    fn run(g: &'a Graph, mut edit: impl FnMut(&mut Copier<'a>, NodeId) -> Option<Vec<TensorId>>) -> Graph {
        let mut copy =
            Copier { g, out: Graph::new(g.name.clone(), g.opset), tensors: HashMap::new(), nodes: HashMap::new() };
        for id in order::schedule(g).unwrap() {
            let outputs = match edit(&mut copy, id) {
                Some(outputs) => outputs,
                None => {
                    let node = g.node(id);
                    let inputs = node.inputs.clone();
                    copy.add(node.clone(), &inputs, id)
                }
            };
            for (&old, new) in g.node(id).outputs.iter().zip(outputs) {
                copy.tensors.insert(old, new);
            }
        }
        let mut edges = Vec::new();
        for (src, dst, e) in g.edges() {
            match (e.action, e.tensor) {
                (Action::Control, _) => edges.push((None, src, dst)),
                (Action::Update, Some(t)) => edges.push((Some(t), src, dst)),
                _ => {}
            }
        }
        for (tensor, src, dst) in edges {
            let dst = copy.nodes[&dst];
            match tensor {
                Some(t) => copy.out.add_update_edge(copy.tensors[&t], dst),
                None => copy.out.add_control_edge(copy.nodes[&src], dst),
            };
        }
        copy.out.inputs = g.inputs.iter().map(|t| copy.tensors[t]).collect();
        copy.out.outputs = g.outputs.iter().map(|t| copy.tensors[t]).collect();
        copy.out.verify().unwrap();
        copy.out
    }

    /// Adds `node` reading `inputs` (original ids) with the outputs of the
    /// original node `like`.
    fn add(&mut self, node: Node, inputs: &[Option<TensorId>], like: NodeId) -> Vec<TensorId> {
        let outputs = self
            .g
            .node(like)
            .outputs
            .iter()
            .map(|&t| (self.g.tensor(t).name.clone(), self.g.tensor(t).ty.clone()))
            .collect();
        let inputs = inputs.iter().map(|t| t.map(|t| self.tensors[&t])).collect();
        let id = self.out.add_node(Node { inputs, outputs: vec![], ..node }, outputs);
        for (&old, &new) in self.g.node(like).outputs.iter().zip(&self.out.node(id).outputs.clone()) {
            self.out.tensor_mut(new).data = self.g.tensor(old).data.clone();
        }
        if self.nodes.insert(like, id).is_some() {
            panic!("node copied twice");
        }
        self.out.node(id).outputs.clone()
    }

    /// Adds an ONNX op on new tensors (inputs are copy's ids) with the given
    /// outputs.
    fn add_new(
        &mut self,
        like: NodeId,
        name: &str,
        op: &str,
        attrs: Attrs,
        inputs: &[TensorId],
        outputs: Vec<Vec<usize>>,
    ) -> Vec<TensorId> {
        let template = self.g.node(like).clone();
        let dtype = self.g.tensor(template.outputs[0]).ty.dtype;
        let node = Node {
            name: name.into(),
            op: op.into(),
            domain: String::new(),
            attrs,
            inputs: inputs.iter().map(|&t| Some(t)).collect(),
            outputs: vec![],
            ..template
        };
        let outputs = outputs
            .into_iter()
            .enumerate()
            .map(|(i, shape)| (format!("{name}.{i}"), lms_compiler::ir::TensorType::new(dtype, shape)))
            .collect();
        let id = self.out.add_node(node, outputs);
        self.out.node(id).outputs.clone()
    }
}

/// How the parts of the split Relu are concatenated back.
#[derive(Clone, Copy)]
enum Merge {
    InOrder,
    MissingPart,
    WrongOrder,
}

/// The mlp training graph with its first forward Relu computed as two
/// micro-Relus on the halves of the batch: Split → Relu, Relu → Concat.
fn split_first_relu(merge: Merge) -> (Graph, Graph) {
    let g = training_graph("mlp");
    let relu = g
        .node_ids()
        .find(|&n| g.node(n).op == "Relu" && g.node(n).phase == Phase::Forward)
        .expect("the mlp has a Relu");
    let x = g.node(relu).inputs[0].unwrap();
    let mut half = g.tensor(x).ty.shape.clone();
    assert_eq!(half[0], 2, "batch 2");
    half[0] = 1;
    let split = Copier::run(&g, |copy, id| {
        if id != relu {
            return None;
        }
        let x = copy.tensors[&x];
        let halves = copy.add_new(
            id,
            "relu/split",
            "Split",
            Attrs::new().with("axis", Attr::Int(0)),
            &[x],
            vec![half.clone(); 2],
        );
        let parts: Vec<TensorId> = halves
            .iter()
            .enumerate()
            .map(|(i, &h)| {
                copy.add_new(id, &format!("relu/part{i}"), "Relu", Attrs::new(), &[h], vec![half.clone()])[0]
            })
            .collect();
        let order = match merge {
            Merge::InOrder => vec![parts[0], parts[1]],
            Merge::MissingPart => vec![parts[0], parts[0]],
            Merge::WrongOrder => vec![parts[1], parts[0]],
        };
        let full = copy.g.tensor(copy.g.node(id).outputs[0]).ty.shape.clone();
        let concat =
            copy.add_new(id, "relu/concat", "Concat", Attrs::new().with("axis", Attr::Int(0)), &order, vec![full]);
        copy.nodes.insert(id, copy.out.tensor(concat[0]).producer.0);
        Some(concat)
    });
    (g, split)
}

#[test]
fn a_split_of_a_relu_into_micro_relus_is_proven() {
    let (original, split) = split_first_relu(Merge::InOrder);
    let report = egraph::verify(&original, &split, &Limits::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.proven(), report.items.len());
    assert!(report.applied.contains_key("split-parts"), "{:?}", report.applied);
    assert!(report.applied.contains_key("distribute-elementwise"), "{:?}", report.applied);
}

#[test]
fn a_split_missing_a_part_is_rejected_naming_the_output() {
    let (original, broken) = split_first_relu(Merge::MissingPart);
    let err = egraph::verify(&original, &broken, &Limits::default()).unwrap_err();
    let loss = original.tensor(original.outputs[0]).name.clone();
    assert!(matches!(&err, Error::Unproven { what, .. } if *what == format!("output 0 '{loss}'")), "{err}");
}

#[test]
fn a_concat_in_the_wrong_order_is_rejected_naming_the_output() {
    let (original, broken) = split_first_relu(Merge::WrongOrder);
    let report = egraph::check(&original, &broken, &Limits::default()).unwrap();
    assert_eq!(report.items[0].status, Status::Unproven, "the loss");
    let err = report.require_proven().unwrap_err();
    assert!(err.to_string().starts_with("rewrite not proven equivalent: output 0 '"), "{err}");
}

#[test]
fn a_swap_in_wired_to_another_tensor_is_rejected_naming_the_output() {
    let original = training_graph("cnn_residual");
    let (rewritten, _) = tflms::rewrite(&original, &TflmsConfig::default()).unwrap();
    assert!(egraph::verify(&original, &rewritten, &Limits::default()).is_ok());
    // A swap-in, and an earlier swap-out of another tensor of the same type.
    let schedule = order::schedule(&rewritten).unwrap();
    let (swap_in, other) = schedule
        .iter()
        .filter(|&&n| rewritten.node(n).op == SWAP_IN_OP)
        .find_map(|&n| {
            let source = rewritten.node(n).inputs[0]?;
            let ty = &rewritten.tensor(source).ty;
            let before = schedule.iter().take_while(|&&m| m != n);
            let other = before
                .filter(|&&m| rewritten.node(m).op == SWAP_OUT_OP)
                .map(|&m| rewritten.node(m).outputs[0])
                .find(|&t| t != source && rewritten.tensor(t).ty == *ty)?;
            Some((n, other))
        })
        .expect("two swapped tensors of one type");
    let broken = Copier::run(&rewritten, |copy, id| {
        if id != swap_in {
            return None;
        }
        let node = copy.g.node(id).clone();
        Some(copy.add(node, &[Some(other)], id))
    });
    // The swap-in feeds the backward pass: the loss is still proven, the
    // updates that depend on the wrong tensor are not.
    let report = egraph::check(&original, &broken, &Limits::default()).unwrap();
    assert_eq!(report.items[0].status, Status::Proven, "the loss");
    let first = report.first_unproven().expect("an update is not proven").what.to_string();
    assert!(first.starts_with("the update of variable '"), "{first}");
    let err = report.require_proven().unwrap_err();
    assert!(matches!(&err, Error::Unproven { what, .. } if *what == first), "{err}");
}

/// The cnn_residual training graph (batch 2) with `op` split by the split
/// pass along `dim` in `parts`, then `edit` applied to the split graph.
fn halo_split(op: &str, dim: Dim, parts: usize, edit: impl FnOnce(&mut Graph)) -> (Graph, Graph) {
    let g = training_graph("cnn_residual");
    let request = SplitRequest { op: op.into(), dim, parts, depth: 0 };
    let (patch, _) = split::patch(&g, &[request]).unwrap();
    let (mut rewritten, _) = apply_checked(&g, &patch).unwrap();
    edit(&mut rewritten);
    (g, rewritten)
}

/// Sets integer list or integer attributes of the node named `name`.
fn set_attr(g: &mut Graph, name: &str, attr: &str, value: Attr) {
    let id = g.node_ids().find(|&n| g.node(n).name == name).unwrap_or_else(|| panic!("no node '{name}'"));
    g.node_mut(id).attrs.set(attr, value);
}

#[test]
fn halo_splits_of_a_conv_its_gradients_and_a_pool_are_proven() {
    for (op, dim, parts) in [
        ("block.conv1", Dim::Height, 2),
        ("block.conv1/grad/data", Dim::Width, 3),
        ("block.conv1/grad/weight", Dim::Height, 2),
        ("pool", Dim::Height, 4),
        ("pool/grad/maxpool", Dim::Width, 2),
    ] {
        let (original, split) = halo_split(op, dim, parts, |_| {});
        let report = egraph::verify(&original, &split, &Limits::default()).unwrap_or_else(|e| panic!("{op}: {e}"));
        assert_eq!(report.proven(), report.items.len(), "{op}");
        assert!(report.applied.contains_key("distribute-halo"), "{op}: {:?}", report.applied);
    }
}

#[test]
fn a_halo_split_with_a_shifted_window_or_wrong_pads_is_not_proven() {
    // Part 1 of a 3x3 pad-1 conv over 32 rows reads rows 15..32 with pads
    // (0, 1). The same lengths one row earlier, or with the pads swapped,
    // make tensors of the right types and the wrong values.
    let shifted = |g: &mut Graph| {
        set_attr(g, "block.conv1.part1.in0", "begin", Attr::Int(14));
        set_attr(g, "block.conv1.part1.in0", "end", Attr::Int(31));
    };
    let swapped = |g: &mut Graph| set_attr(g, "block.conv1.part1", "pads", Attr::Ints(vec![1, 1, 0, 1]));
    // The input-gradient windows added one row off.
    let offset = |g: &mut Graph| set_attr(g, "block.conv1/grad/data.merge", "begins", Attr::Ints(vec![0, 14]));
    for (what, op, edit) in [
        ("shifted window", "block.conv1", &shifted as &dyn Fn(&mut Graph)),
        ("swapped pads", "block.conv1", &swapped),
        ("overlap-add offset", "block.conv1/grad/data", &offset),
    ] {
        let (original, broken) = halo_split(op, Dim::Height, 2, edit);
        let report = egraph::check(&original, &broken, &Limits::default()).unwrap();
        assert!(report.items.iter().any(|i| i.status == Status::Unproven), "{what}: proven");
        // A forward part changes the loss; an input gradient only the updates.
        let named = if op == "block.conv1" { "output 0 '" } else { "the update of variable '" };
        let err = report.require_proven().unwrap_err().to_string();
        assert!(err.starts_with(&format!("rewrite not proven equivalent: {named}")), "{what}: {err}");
    }
}

#[test]
fn batch_splits_of_the_loss_are_proven_and_parts_dividing_by_their_own_count_are_not() {
    // At batch 2, each of 2 parts holds 1 of the 2 positions the whole loss divides by.
    for (op, rule) in [("loss", "distribute-sum"), ("loss/grad/loss", "distribute-loss")] {
        let (original, split) = halo_split(op, Dim::Batch, 2, |_| {});
        let report = egraph::verify(&original, &split, &Limits::default()).unwrap_or_else(|e| panic!("{op}: {e}"));
        assert_eq!(report.proven(), report.items.len(), "{op}");
        assert!(report.applied.contains_key(rule), "{op}: {:?}", report.applied);
        let own_count = |g: &mut Graph| set_attr(g, &format!("{op}.part1"), "positions", Attr::Int(1));
        let (original, broken) = halo_split(op, Dim::Batch, 2, own_count);
        let report = egraph::check(&original, &broken, &Limits::default()).unwrap();
        assert!(report.items.iter().any(|i| i.status == Status::Unproven), "{op}: wrong divisor proven");
        // The loss is output 0; its gradient reaches only the updates.
        let named = if op == "loss" { "output 0 '" } else { "the update of variable '" };
        let err = report.require_proven().unwrap_err().to_string();
        assert!(err.starts_with(&format!("rewrite not proven equivalent: {named}")), "{op}: {err}");
    }
}
