//! Building the IR from a decoded `ModelProto`.

use super::einsum::{self, Step};
use super::{attr, tensor, FrontendOptions, Model, OPSETS};
use crate::error::{Error, Result};
use crate::flags;
use crate::ir::{
    Attr, Attrs, DType, Device, Graph, Node, Phase, TensorData, TensorId, TensorType, INPUT_OP, VARIABLE_OP,
};
use crate::shape::{self, Value};
use lms_proto::escape::Escaped;
use lms_proto::onnx::{type_proto, GraphProto, ModelProto, NodeProto, ValueInfoProto};
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, HashSet};
use std::path::Path;

/// Imports a decoded model. `base_dir` is where external data files live.
pub fn import(model: &ModelProto, base_dir: Option<&Path>, options: &FrontendOptions) -> Result<Model> {
    let proto = model.graph.as_ref().ok_or(Error::NoGraph)?;
    let opset = default_opset(model)?;
    let mut builder = Builder::new(proto, opset);
    builder.add_initializers(base_dir)?;
    builder.add_inputs(options)?;
    builder.add_nodes()?;
    builder.set_outputs()?;
    Ok(Model { graph: builder.graph, ir_version: model.ir_version, producer: model.producer_name.clone() })
}

fn default_opset(model: &ModelProto) -> Result<i64> {
    let version = model
        .opset_import
        .iter()
        .find(|o| o.domain.is_empty() || o.domain == "ai.onnx")
        .map(|o| o.version)
        .ok_or(Error::NoOpset)?;
    if OPSETS.contains(&version) {
        Ok(version)
    } else {
        Err(Error::UnsupportedOpset(version))
    }
}

struct Builder<'a> {
    proto: &'a GraphProto,
    graph: Graph,
    /// Tensor of every name produced so far.
    tensors: HashMap<&'a str, TensorId>,
    /// Inference values of produced tensors, indexed by `TensorId::index()`.
    values: Vec<Value>,
    names: HashSet<String>,
    /// `(declared, requested)` leading dimension when `--batch` changed it.
    batch_change: Option<(usize, usize)>,
}

impl<'a> Builder<'a> {
    fn new(proto: &'a GraphProto, opset: i64) -> Builder<'a> {
        Builder {
            proto,
            graph: Graph::new(proto.name.clone(), opset),
            tensors: HashMap::new(),
            values: Vec::new(),
            names: HashSet::new(),
            batch_change: None,
        }
    }

    /// A node name not used yet: `wanted`, else `wanted_2`, `wanted_3`, ...
    fn unique_name(&mut self, wanted: String) -> String {
        let mut name = wanted.clone();
        let mut n = 1;
        while !self.names.insert(name.clone()) {
            n += 1;
            name = format!("{wanted}_{n}");
        }
        name
    }

    /// Adds a parameterized vertex producing one tensor.
    fn add_leaf(&mut self, name: &'a str, op: &str, value: Value) -> Result<()> {
        if self.tensors.contains_key(name) {
            return Err(Error::Tensor { tensor: name.into(), reason: "is declared twice".into() });
        }
        let node_name = self.unique_name(name.to_string());
        let node = vertex(node_name, op, Attrs::new(), true, vec![]);
        let id = self.graph.add_node(node, vec![(name.to_string(), value.ty.clone())]);
        let t = self.graph.node(id).outputs[0];
        self.graph.tensor_mut(t).data = value.data.clone();
        self.tensors.insert(name, t);
        self.values.push(value);
        Ok(())
    }

    fn add_initializers(&mut self, base_dir: Option<&Path>) -> Result<()> {
        for init in &self.proto.initializer {
            let data = tensor::decode(init, base_dir).map_err(|reason| Error::Tensor {
                tensor: init.name.clone(),
                reason: format!("initializer {reason}"),
            })?;
            self.add_leaf(&init.name, VARIABLE_OP, Value::constant(data))?;
        }
        Ok(())
    }

    fn add_inputs(&mut self, options: &FrontendOptions) -> Result<()> {
        self.check_dims(options)?;
        for input in &self.proto.input {
            if self.tensors.contains_key(input.name.as_str()) {
                continue; // an initializer listed as an input (IR version < 4)
            }
            let ty = input_type(input, options).map_err(|reason| Error::Input { input: input.name.clone(), reason })?;
            if let (Some(declared), Some(batch)) = (declared_batch(input, options), options.batch) {
                if declared != batch && self.batch_change.is_none() {
                    self.batch_change = Some((declared, batch));
                }
            }
            self.add_leaf(&input.name, INPUT_OP, Value::of_type(ty))?;
            let t = self.tensors[input.name.as_str()];
            self.graph.inputs.push(t);
        }
        Ok(())
    }

    fn add_nodes(&mut self) -> Result<()> {
        let nodes = &self.proto.node;
        let names: Vec<String> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| if n.name.is_empty() { format!("{}_{i}", n.op_type) } else { n.name.clone() })
            .collect();
        // Which node produces each name, to order nodes and find dangling reads.
        let mut producer: HashMap<&str, usize> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            for out in n.output.iter().filter(|o| !o.is_empty()) {
                let first = producer.get(out.as_str()).map(|&j| names[j].clone());
                let first = first.or_else(|| self.tensors.contains_key(out.as_str()).then(|| out.clone()));
                if let Some(first) = first {
                    return Err(Error::Duplicate { tensor: out.clone(), first, second: names[i].clone() });
                }
                producer.insert(out, i);
            }
        }
        let mut dependents: Vec<Vec<usize>> = vec![Vec::new(); nodes.len()];
        let mut waiting = vec![0usize; nodes.len()];
        for (i, n) in nodes.iter().enumerate() {
            for input in n.input.iter().filter(|s| !s.is_empty()) {
                if let Some(&j) = producer.get(input.as_str()) {
                    dependents[j].push(i);
                    waiting[i] += 1;
                } else if !self.tensors.contains_key(input.as_str()) {
                    return Err(Error::Dangling {
                        node: names[i].clone(),
                        op: n.op_type.clone(),
                        tensor: input.clone(),
                    });
                }
            }
        }
        // Kahn's algorithm, earliest file position first: the file's order
        // when valid. Ordering completes before inference so that a cycle is
        // reported as such.
        let mut ready: BinaryHeap<Reverse<usize>> =
            (0..nodes.len()).filter(|&i| waiting[i] == 0).map(Reverse).collect();
        let mut order = Vec::with_capacity(nodes.len());
        while let Some(Reverse(i)) = ready.pop() {
            order.push(i);
            for &d in &dependents[i] {
                waiting[d] -= 1;
                if waiting[d] == 0 {
                    ready.push(Reverse(d));
                }
            }
        }
        if let Some(stuck) = (0..nodes.len()).find(|&i| waiting[i] > 0) {
            return Err(crate::ir::CycleError { node: names[stuck].clone() }.into());
        }
        for i in order {
            self.add_node(&nodes[i], names[i].clone())?;
        }
        Ok(())
    }

    fn add_node(&mut self, n: &'a NodeProto, name: String) -> Result<()> {
        let op = n.op_type.clone();
        let fail = |reason: String| Error::Node { node: name.clone(), op: op.clone(), reason };
        if !(n.domain.is_empty() || n.domain == "ai.onnx") {
            return Err(fail(format!("op domain '{}' is not supported", n.domain)));
        }
        let attrs = attr::convert(&n.attribute).map_err(fail)?;
        let mut inputs: Vec<Option<TensorId>> =
            n.input.iter().map(|s| (!s.is_empty()).then(|| self.tensors[s.as_str()])).collect();
        if op == "Reshape" {
            self.rebatch_reshape(&mut inputs);
        }
        if op == "Einsum" {
            return self.add_einsum(n, name, &attrs, &inputs);
        }
        let input_values: Vec<Option<&Value>> = inputs.iter().map(|t| t.map(|t| &self.values[t.index()])).collect();
        // Trailing unnamed outputs are not produced.
        let num_outputs = n.output.iter().rposition(|o| !o.is_empty()).map_or(0, |p| p + 1);
        let request =
            shape::Node { op: &op, opset: self.graph.opset, attrs: &attrs, inputs: &input_values, num_outputs };
        let outputs =
            shape::infer(&request).map_err(|source| Error::Shape { node: name.clone(), op: op.clone(), source })?;
        if outputs.len() != num_outputs {
            return Err(fail(format!("declares {num_outputs} outputs, but the op makes {}", outputs.len())));
        }
        let name = self.unique_name(name);
        let out_names: Vec<String> = n.output[..num_outputs]
            .iter()
            .enumerate()
            .map(|(slot, o)| if o.is_empty() { format!("{name}.{slot}") } else { o.clone() })
            .collect();
        let typed = out_names.iter().cloned().zip(outputs.iter().map(|v| v.ty.clone())).collect();
        let id = self.graph.add_node(vertex(name, &op, attrs, false, inputs), typed);
        for (slot, value) in outputs.into_iter().enumerate() {
            let t = self.graph.node(id).outputs[slot];
            self.graph.tensor_mut(t).data = value.data.clone();
            self.values.push(value);
            if !n.output[slot].is_empty() {
                self.tensors.insert(&n.output[slot], t);
            }
        }
        Ok(())
    }

    /// Einsum as the ops [`einsum::lower`] gives, each named `NAME/op` (the last one's output
    /// carries the Einsum's output name).
    fn add_einsum(&mut self, n: &'a NodeProto, name: String, attrs: &Attrs, inputs: &[Option<TensorId>]) -> Result<()> {
        let fail = |reason: String| Error::Node { node: name.clone(), op: n.op_type.clone(), reason };
        let equation = attrs.string_opt("equation").map_err(|e| fail(e.to_string()))?;
        let equation = equation.ok_or_else(|| fail("has no equation".into()))?;
        let operands: Vec<TensorId> =
            inputs.iter().map(|t| t.ok_or_else(|| fail("has an omitted operand".into()))).collect::<Result<_>>()?;
        if n.output.len() != 1 || n.output[0].is_empty() {
            return Err(fail("must have one output".into()));
        }
        let shapes: Vec<Vec<usize>> = operands.iter().map(|t| self.values[t.index()].ty.shape.clone()).collect();
        let shape_refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        let lowering = einsum::lower(&equation, &shape_refs)
            .map_err(|why| fail(format!("equation '{}' {}", Escaped(&equation), Escaped(&why))))?;
        let out_name = n.output[0].as_str();
        let single = operands.len() == 1;
        let mut products = Vec::new();
        for (&operand, steps) in operands.iter().zip(&lowering.operands) {
            let mut t = operand;
            for (i, step) in steps.iter().enumerate() {
                let last = single && i + 1 == steps.len();
                t = self.add_step(&name, step, vec![t], last.then_some(out_name))?;
            }
            products.push(t);
        }
        let mut t = products[0];
        if let [a, b] = products[..] {
            let last = lowering.after.is_empty();
            t = self.add_lowered(&name, "MatMul", Attrs::new(), vec![a, b], last.then_some(out_name))?;
            for (i, step) in lowering.after.iter().enumerate() {
                let last = i + 1 == lowering.after.len();
                t = self.add_step(&name, step, vec![t], last.then_some(out_name))?;
            }
        }
        self.tensors.insert(out_name, t);
        Ok(())
    }

    /// One step of an Einsum's lowering on `inputs`.
    fn add_step(&mut self, name: &str, step: &Step, mut inputs: Vec<TensorId>, out: Option<&str>) -> Result<TensorId> {
        let ints = |v: &[i64]| Attr::Ints(v.to_vec());
        let (op, attrs) = match step {
            Step::Transpose(perm) => ("Transpose", Attrs::new().with("perm", ints(perm))),
            Step::Reshape(target) => {
                inputs.push(self.add_ints(&format!("{name}/shape"), target));
                ("Reshape", Attrs::new())
            }
            Step::ReduceSum(axes) if self.graph.opset < 13 => {
                ("ReduceSum", Attrs::new().with("axes", ints(axes)).with("keepdims", Attr::Int(0)))
            }
            Step::ReduceSum(axes) => {
                inputs.push(self.add_ints(&format!("{name}/axes"), axes));
                ("ReduceSum", Attrs::new().with("keepdims", Attr::Int(0)))
            }
            Step::Identity => ("Identity", Attrs::new()),
        };
        self.add_lowered(name, op, attrs, inputs, out)
    }

    /// A constant int64 vector, as initializers are held.
    fn add_ints(&mut self, name: &str, values: &[i64]) -> TensorId {
        let data = TensorData::from_i64(vec![values.len()], values);
        let name = self.unique_name(name.to_string());
        let id = self
            .graph
            .add_node(vertex(name.clone(), VARIABLE_OP, Attrs::new(), true, vec![]), vec![(name, data.ty.clone())]);
        let t = self.graph.node(id).outputs[0];
        self.graph.tensor_mut(t).data = Some(data.clone());
        self.values.push(Value::constant(data));
        t
    }

    /// An ONNX op of a lowering, named `NAME/op`, its output typed by shape inference and
    /// named `out` when given (else after the node).
    fn add_lowered(
        &mut self,
        name: &str,
        op: &str,
        attrs: Attrs,
        inputs: Vec<TensorId>,
        out: Option<&str>,
    ) -> Result<TensorId> {
        let node = self.unique_name(format!("{name}/{}", op.to_lowercase()));
        let values: Vec<Option<&Value>> = inputs.iter().map(|t| Some(&self.values[t.index()])).collect();
        let request = shape::Node { op, opset: self.graph.opset, attrs: &attrs, inputs: &values, num_outputs: 1 };
        let mut outputs =
            shape::infer(&request).map_err(|source| Error::Shape { node: node.clone(), op: op.into(), source })?;
        let value = outputs.remove(0);
        let tensor = out.map_or_else(|| node.clone(), str::to_string);
        let id = self.graph.add_node(
            vertex(node, op, attrs, false, inputs.into_iter().map(Some).collect()),
            vec![(tensor, value.ty.clone())],
        );
        let t = self.graph.node(id).outputs[0];
        self.graph.tensor_mut(t).data = value.data.clone();
        self.values.push(value);
        Ok(t)
    }

    /// Model-zoo exports fix the batch in Reshape targets (`[1, 2048]`). When
    /// `--batch` changed the batch and a Reshape's constant target starts with
    /// the declared batch while its data starts with the requested one, the
    /// Reshape reads a copy of the target with the requested batch instead.
    fn rebatch_reshape(&mut self, inputs: &mut [Option<TensorId>]) {
        let (Some((declared, batch)), [Some(data), Some(target), ..]) = (self.batch_change, &*inputs) else { return };
        let Some(target_values) = self.values[target.index()].data.as_ref().and_then(|d| d.to_i64()) else { return };
        let data_shape = &self.values[data.index()].ty.shape;
        let elements: usize = data_shape.iter().product();
        let rest: i64 = target_values.iter().skip(1).product();
        let fixed = target_values.first() == Some(&(declared as i64))
            && data_shape.first() == Some(&batch)
            && rest > 0
            && elements as i64 == batch as i64 * rest;
        if !fixed {
            return;
        }
        let mut values = target_values;
        values[0] = batch as i64;
        let name = format!("{}.batch{batch}", self.graph.tensor(*target).name);
        let existing = self.graph.tensors().find(|(_, t)| t.name == name).map(|(t, _)| t);
        let t = match existing {
            Some(t) => t,
            None => {
                let data = TensorData::from_i64(vec![values.len()], &values);
                let node = vertex(self.unique_name(name.clone()), VARIABLE_OP, Attrs::new(), true, vec![]);
                let id = self.graph.add_node(node, vec![(name, data.ty.clone())]);
                let t = self.graph.node(id).outputs[0];
                self.graph.tensor_mut(t).data = Some(data.clone());
                self.values.push(Value::constant(data));
                t
            }
        };
        inputs[1] = Some(t);
    }

    fn set_outputs(&mut self) -> Result<()> {
        for out in &self.proto.output {
            let t = *self.tensors.get(out.name.as_str()).ok_or_else(|| Error::UnknownOutput(out.name.clone()))?;
            if let Some(declared) = declared_dtype(out) {
                let computed = self.graph.tensor(t).ty.dtype;
                if declared != computed {
                    return Err(Error::Tensor {
                        tensor: out.name.clone(),
                        reason: format!("graph output is declared {declared} but computed as {computed}"),
                    });
                }
            }
            self.graph.outputs.push(t);
        }
        Ok(())
    }
}

fn vertex(name: String, op: &str, attrs: Attrs, parameterized: bool, inputs: Vec<Option<TensorId>>) -> Node {
    Node {
        name,
        op: op.to_string(),
        domain: String::new(),
        attrs,
        parameterized,
        phase: Phase::Forward,
        device: Device::Gpu,
        inputs,
        outputs: vec![],
    }
}

fn declared_dtype(info: &ValueInfoProto) -> Option<DType> {
    match info.r#type.as_ref()?.value.as_ref()? {
        type_proto::Value::TensorType(t) => DType::from_code(t.elem_type),
    }
}

impl Builder<'_> {
    /// Refuses a `--dim NAME=N` whose name no data input's shape uses.
    fn check_dims(&self, options: &FrontendOptions) -> Result<()> {
        use lms_proto::onnx::tensor_shape_proto::dimension::Value as D;
        let names: BTreeSet<&str> = (self.proto.input.iter())
            .filter(|input| !self.tensors.contains_key(input.name.as_str()))
            .filter_map(|input| match input.r#type.as_ref()?.value.as_ref()? {
                type_proto::Value::TensorType(t) => t.shape.as_ref(),
            })
            .flat_map(|shape| &shape.dim)
            .filter_map(|dim| match &dim.value {
                Some(D::DimParam(p)) => Some(p.as_str()),
                _ => None,
            })
            .collect();
        match options.dims.keys().find(|name| !names.contains(name.as_str())) {
            Some(name) => {
                let close = flags::close_candidates(name, names);
                Err(flags::no_match("--dim", name, "symbolic dimension of the model's inputs", &close))
            }
            None => Ok(()),
        }
    }
}

/// The leading dimension a data input declares: its value, a symbolic one's
/// `--dim` value, else 1 (the batch an export traced at, which its Reshape
/// targets may have kept).
fn declared_batch(input: &ValueInfoProto, options: &FrontendOptions) -> Option<usize> {
    use lms_proto::onnx::tensor_shape_proto::dimension::Value as D;
    let first = match input.r#type.as_ref()?.value.as_ref()? {
        type_proto::Value::TensorType(t) => t.shape.as_ref()?.dim.first()?,
    };
    match &first.value {
        Some(D::DimValue(v)) => usize::try_from(*v).ok(),
        Some(D::DimParam(p)) => Some(options.dims.get(p).copied().unwrap_or(1)),
        None => Some(1),
    }
}

/// The concrete type of a data input: its declared element type and its
/// shape with symbolic dimensions resolved.
fn input_type(input: &ValueInfoProto, options: &FrontendOptions) -> std::result::Result<TensorType, String> {
    let tensor = match input.r#type.as_ref().and_then(|t| t.value.as_ref()) {
        Some(type_proto::Value::TensorType(t)) => t,
        None => return Err("is not a tensor (lms reads dense tensor inputs only)".into()),
    };
    let dtype =
        DType::from_code(tensor.elem_type).ok_or_else(|| format!("unsupported element type {}", tensor.elem_type))?;
    let dims = tensor.shape.as_ref().ok_or("has no shape")?;
    let mut shape = Vec::with_capacity(dims.dim.len());
    for (axis, dim) in dims.dim.iter().enumerate() {
        use lms_proto::onnx::tensor_shape_proto::dimension::Value as D;
        let symbolic = match &dim.value {
            Some(D::DimParam(p)) => Some(p.as_str()),
            _ => None,
        };
        let size = match (&dim.value, axis, options.batch) {
            (_, 0, Some(batch)) => batch,
            (Some(D::DimValue(v)), _, _) => {
                usize::try_from(*v).map_err(|_| format!("dimension {axis} is negative ({v})"))?
            }
            _ => match symbolic.and_then(|p| options.dims.get(p)) {
                Some(&v) => v,
                None if axis == 0 => {
                    let label = symbolic.map_or_else(|| "unnamed".to_string(), |p| format!("'{p}'"));
                    return Err(format!("dimension 0 ({label}) is symbolic; set the batch with --batch N"));
                }
                None => {
                    let label = symbolic.map_or_else(|| "unnamed".to_string(), |p| format!("'{p}'"));
                    let hint = symbolic.unwrap_or("NAME");
                    return Err(format!("dimension {axis} ({label}) is symbolic; set it with --dim {hint}=N"));
                }
            },
        };
        shape.push(size);
    }
    Ok(TensorType::new(dtype, shape))
}
