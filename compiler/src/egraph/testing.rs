//! Test helpers: terms built by hand, and runs of chosen rules.

use super::lang::{Term, TermAnalysis, TermGraph, TermRewrite};
use super::saturate::{self, Limits};
use crate::ir::{Attrs, DType, Device, Graph, Node, NodeId, Phase, TensorId, TensorType, INPUT_OP, VARIABLE_OP};
use egg::Id;
use lms_proto::contract::LMS_DOMAIN;

/// An e-graph of hand-built terms (f32 tensors, opset 17).
pub struct Terms {
    pub egraph: TermGraph,
}

impl Terms {
    pub fn new() -> Terms {
        Terms { egraph: TermGraph::new(TermAnalysis::new(17)) }
    }

    pub fn leaf(&mut self, name: &str, shape: &[usize]) -> Id {
        let leaf = self.egraph.analysis.leaf(name, &f32(shape));
        self.egraph.add(leaf)
    }

    pub fn int(&mut self, v: i64) -> Id {
        self.egraph.add(Term::Int(v))
    }

    /// A single-output op.
    pub fn op(&mut self, op: &str, attrs: Attrs, inputs: &[Id], shape: &[usize]) -> Id {
        self.ops(op, "", attrs, inputs, &[shape])
    }

    /// An op of any domain with one or more outputs: the op's class.
    pub fn ops(&mut self, op: &str, domain: &str, attrs: Attrs, inputs: &[Id], shapes: &[&[usize]]) -> Id {
        let head = self.egraph.analysis.head(op, domain, &attrs, shapes.iter().map(|s| f32(s)).collect());
        self.egraph.add(Term::Op(head, inputs.to_vec()))
    }

    /// `(out i node)`.
    pub fn out(&mut self, i: i64, node: Id) -> Id {
        let i = self.int(i);
        self.egraph.add(Term::Out([i, node]))
    }

    pub fn split(&mut self, d: i64, i: i64, n: i64, x: Id) -> Id {
        let (d, i, n) = (self.int(d), self.int(i), self.int(n));
        self.egraph.add(Term::Split([d, i, n, x]))
    }

    /// Every part of `x` split along `d` into `n`.
    pub fn splits(&mut self, d: i64, n: i64, x: Id) -> Vec<Id> {
        (0..n).map(|i| self.split(d, i, n, x)).collect()
    }

    pub fn concat(&mut self, d: i64, parts: &[Id]) -> Id {
        let d = self.int(d);
        self.egraph.add(Term::Concat(std::iter::once(d).chain(parts.iter().copied()).collect()))
    }

    /// Runs `rules` to saturation, as verification runs them.
    pub fn run(&mut self, rules: &[TermRewrite]) {
        let egraph = std::mem::replace(&mut self.egraph, TermGraph::new(TermAnalysis::default()));
        self.egraph = saturate::run(egraph, rules, &Limits::default(), |_| false).egraph;
    }

    pub fn equal(&self, a: Id, b: Id) -> bool {
        self.egraph.find(a) == self.egraph.find(b)
    }
}

pub fn f32(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F32, shape.to_vec())
}

/// A graph built by hand (opset 17, f32 tensors named after their node,
/// `name.i` for multi-output nodes).
pub struct Net {
    pub g: Graph,
}

impl Net {
    pub fn new() -> Net {
        Net { g: Graph::new("net", 17) }
    }

    /// An op of any domain with any outputs (one output is named like the op, several
    /// `{name}.{i}`).
    pub fn ops(
        &mut self,
        name: &str,
        op: &str,
        domain: &str,
        attrs: Attrs,
        inputs: &[TensorId],
        outputs: &[&[usize]],
    ) -> Vec<TensorId> {
        let parameterized = op == INPUT_OP || op == VARIABLE_OP;
        let node = Node {
            name: name.into(),
            op: op.into(),
            domain: domain.into(),
            attrs,
            parameterized,
            phase: Phase::Forward,
            device: Device::Gpu,
            inputs: inputs.iter().map(|&t| Some(t)).collect(),
            outputs: vec![],
        };
        let names: Vec<String> = if outputs.len() == 1 {
            vec![name.to_string()]
        } else {
            (0..outputs.len()).map(|i| format!("{name}.{i}")).collect()
        };
        let id = self.g.add_node(node, names.into_iter().zip(outputs).map(|(n, s)| (n, f32(s))).collect());
        self.g.node(id).outputs.clone()
    }

    pub fn input(&mut self, name: &str, shape: &[usize]) -> TensorId {
        self.ops(name, INPUT_OP, "", Attrs::new(), &[], &[shape])[0]
    }

    pub fn variable(&mut self, name: &str, shape: &[usize]) -> TensorId {
        self.ops(name, VARIABLE_OP, "", Attrs::new(), &[], &[shape])[0]
    }

    /// An ONNX op with one output.
    pub fn op(&mut self, name: &str, op: &str, attrs: Attrs, inputs: &[TensorId], shape: &[usize]) -> TensorId {
        self.ops(name, op, "", attrs, inputs, &[shape])[0]
    }

    /// A swap-out or swap-in of `x`.
    pub fn swap(&mut self, name: &str, op: &str, x: TensorId) -> TensorId {
        let shape = self.g.tensor(x).ty.shape.clone();
        self.ops(name, op, LMS_DOMAIN, Attrs::new(), &[x], &[&shape])[0]
    }

    /// The node that makes `t`.
    pub fn node(&self, t: TensorId) -> NodeId {
        self.g.tensor(t).producer.0
    }
}
