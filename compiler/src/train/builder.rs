//! Adding ops to a graph under construction: unique names, output types from
//! shape inference for ONNX ops or given for lms ops, and the phase.

use crate::error::{Error, Result};
use crate::ir::{Attrs, Device, Graph, Node, NodeId, Phase, TensorId, TensorType};
use crate::shape::{self, Value};
use std::collections::HashSet;

use lms_proto::contract::LMS_DOMAIN;

/// A graph being built, with the phase new ops get.
pub struct Builder {
    pub graph: Graph,
    pub phase: Phase,
    names: HashSet<String>,
}

impl Builder {
    /// Starts from an empty graph with `g`'s name and opset.
    pub fn new(name: &str, opset: i64) -> Builder {
        Builder { graph: Graph::new(name, opset), phase: Phase::Forward, names: HashSet::new() }
    }

    /// Continues building `graph`: new names avoid its node names.
    pub fn resume(graph: Graph) -> Builder {
        let names = graph.node_ids().map(|id| graph.node(id).name.clone()).collect();
        Builder { graph, phase: Phase::Forward, names }
    }

    /// `wanted` if unused, else `wanted_2`, `wanted_3`, ...
    pub fn unique(&mut self, wanted: &str) -> String {
        let mut name = wanted.to_string();
        let mut n = 1;
        while !self.names.insert(name.clone()) {
            n += 1;
            name = format!("{wanted}_{n}");
        }
        name
    }

    /// Adds a node with the given outputs; tensors are named after the node
    /// (`name` for one output, `name.i` for several).
    pub fn add(
        &mut self,
        name: &str,
        op: &str,
        domain: &str,
        attrs: Attrs,
        inputs: Vec<Option<TensorId>>,
        outputs: Vec<TensorType>,
    ) -> NodeId {
        let name = self.unique(name);
        let single = outputs.len() == 1;
        let outs = outputs
            .into_iter()
            .enumerate()
            .map(|(i, ty)| (if single { name.clone() } else { format!("{name}.{i}") }, ty))
            .collect();
        let node = Node {
            name,
            op: op.to_string(),
            domain: domain.to_string(),
            attrs,
            parameterized: false,
            phase: self.phase,
            device: Device::Gpu,
            inputs,
            outputs: vec![],
        };
        self.graph.add_node(node, outs)
    }

    /// Adds a parameterized vertex (`Variable` or `Input`) with one output.
    pub fn add_leaf(&mut self, name: &str, op: &str, attrs: Attrs, ty: TensorType) -> TensorId {
        let id = self.add(name, op, "", attrs, vec![], vec![ty]);
        let node = self.graph.node_mut(id);
        node.parameterized = true;
        node.phase = Phase::Forward;
        self.graph.node(id).outputs[0]
    }

    /// Adds an ONNX op whose outputs shape inference types (and folds when
    /// constant); returns its outputs.
    pub fn onnx(
        &mut self,
        name: &str,
        op: &str,
        attrs: Attrs,
        inputs: &[Option<TensorId>],
        num_outputs: usize,
    ) -> Result<Vec<TensorId>> {
        let values: Vec<Option<Value>> = inputs
            .iter()
            .map(|t| {
                t.map(|t| {
                    let tensor = self.graph.tensor(t);
                    Value { ty: tensor.ty.clone(), data: tensor.data.clone() }
                })
            })
            .collect();
        let refs: Vec<Option<&Value>> = values.iter().map(Option::as_ref).collect();
        let request = shape::Node { op, opset: self.graph.opset, attrs: &attrs, inputs: &refs, num_outputs };
        let outputs = shape::infer(&request).map_err(|source| Error::Shape {
            node: name.to_string(),
            op: op.to_string(),
            source,
        })?;
        let types = outputs.iter().map(|v| v.ty.clone()).collect();
        let id = self.add(name, op, "", attrs, inputs.to_vec(), types);
        let outs = self.graph.node(id).outputs.clone();
        for (t, v) in outs.iter().zip(outputs) {
            self.graph.tensor_mut(*t).data = v.data;
        }
        Ok(outs)
    }

    /// [`Builder::onnx`] for a single-output op.
    pub fn onnx1(&mut self, name: &str, op: &str, attrs: Attrs, inputs: &[TensorId]) -> Result<TensorId> {
        let inputs: Vec<Option<TensorId>> = inputs.iter().map(|&t| Some(t)).collect();
        Ok(self.onnx(name, op, attrs, &inputs, 1)?[0])
    }

    /// Adds an lms-domain op with the given output types; returns its outputs.
    pub fn lms(
        &mut self,
        name: &str,
        op: &str,
        attrs: Attrs,
        inputs: &[Option<TensorId>],
        outputs: Vec<TensorType>,
    ) -> Vec<TensorId> {
        let id = self.add(name, op, LMS_DOMAIN, attrs, inputs.to_vec(), outputs);
        self.graph.node(id).outputs.clone()
    }

    /// [`Builder::lms`] for a single-output op with all inputs present.
    pub fn lms1(&mut self, name: &str, op: &str, attrs: Attrs, inputs: &[TensorId], output: TensorType) -> TensorId {
        let inputs: Vec<Option<TensorId>> = inputs.iter().map(|&t| Some(t)).collect();
        self.lms(name, op, attrs, &inputs, vec![output])[0]
    }

    /// The type of a tensor.
    pub fn ty(&self, t: TensorId) -> TensorType {
        self.graph.tensor(t).ty.clone()
    }
}
