//! The forward graph in training mode.
//!
//! Initializers become `Variable`s that keep their values; weights the model
//! only describes by shape (the `ConstantOfShape` weights of the model-zoo
//! graphs, see [`super::trainable`]) become `Variable`s with a seeded
//! initialisation: He for rank ≥ 3 weights, Xavier for matrices, ones for
//! per-channel scales and variances, zeros otherwise. Constant chains that
//! only produced such weights are dropped; other constant chains (masks,
//! buffers) are copied and keep their values. BatchNormalization becomes `BatchNormTrain` (batch statistics,
//! running statistics written back through update edges), Dropout becomes
//! `DropoutTrain` (the mask is kept for the backward pass), and
//! LayerNormalization also returns its mean and inverse standard deviation.

use super::builder::Builder;
use super::trainable::{is_initializer, Selection};
use super::RunningVariance;
use crate::analysis::classify::{classify, TensorClass};
use crate::analysis::order;
use crate::error::{Error, Result};
use crate::ir::{Attr, Attrs, DType, Graph, NodeId, TensorId, TensorType, INPUT_OP, VARIABLE_OP};
use crate::shape::SoftmaxAxis;
use std::collections::HashMap;

/// The training-mode forward graph inside a [`Builder`].
pub struct Forward {
    /// The model's outputs in the new graph.
    pub outputs: Vec<TensorId>,
    /// When the first output came from a Softmax that the loss folds in: its
    /// input and axis.
    pub logits: Option<Logits>,
    /// Variables to train.
    pub trainable: Vec<TensorId>,
}

/// The input of a Softmax that the loss folds in.
pub struct Logits {
    pub tensor: TensorId,
    /// The Softmax's axis, non-negative.
    pub axis: usize,
    /// Softmax over the input coerced to 2-D at `axis` (before opset 13).
    pub coerced: bool,
}

/// Copies `f` into `b` in training mode; `select` says which tensors are
/// trained and which weights get a seeded initialisation.
pub fn build(
    b: &mut Builder,
    f: &Graph,
    select: &Selection,
    fold_softmax: bool,
    running_variance: RunningVariance,
) -> Result<Forward> {
    let schedule = order::schedule(f)?;
    let classes = classify(f, &schedule);
    let class = |t: TensorId| classes[t.index()];
    // A final Softmax folded into the loss is not copied.
    let softmax =
        f.outputs.first().map(|&t| f.tensor(t).producer.0).filter(|&p| fold_softmax && f.node(p).op == "Softmax");
    // Parameters that become variables directly: initializers and seeded weights.
    let leaf = |t: TensorId| class(t) == TensorClass::Parameter && (is_initializer(f, t) || select.seeded[t.index()]);
    // Constant nodes are copied only when a data op needs them other than as such a variable.
    let mut needed = vec![false; f.node_bound()];
    for &id in schedule.iter().rev() {
        let node = f.node(id);
        let data_op = node.outputs.iter().any(|&t| !matches!(class(t), TensorClass::Constant | TensorClass::Parameter));
        if !(data_op || needed[id.index()]) || Some(id) == softmax {
            continue;
        }
        needed[id.index()] = true;
        for &t in copied_inputs(node).iter().flatten() {
            if !leaf(t) {
                needed[f.tensor(t).producer.0.index()] = true;
            }
        }
    }

    let mut map: HashMap<TensorId, TensorId> = HashMap::new();
    let mut out = Forward { outputs: vec![], logits: None, trainable: vec![] };
    // Parameters first, in tensor order, so their order does not depend on the schedule.
    for (t, tensor) in f.tensors() {
        if !leaf(t) {
            continue;
        }
        let attrs = if is_initializer(f, t) {
            Attrs::new().with("init", Attr::String("data".into()))
        } else {
            initialisation(f, t)
        };
        let v = b.add_leaf(&tensor.name, VARIABLE_OP, attrs, tensor.ty.clone());
        b.graph.tensor_mut(v).data = tensor.data.clone();
        map.insert(t, v);
    }
    for &id in &schedule {
        if !needed[id.index()] || f.node(id).outputs.iter().all(|t| map.contains_key(t)) {
            continue;
        }
        copy_node(b, f, id, &mut map, running_variance)?;
    }
    out.trainable =
        f.tensors().filter(|(t, _)| select.trained[t.index()]).filter_map(|(t, _)| map.get(&t).copied()).collect();
    if let Some(s) = softmax {
        let node = f.node(s);
        let x = map[&node.inputs[0].expect("Softmax has an input")];
        let rank = b.ty(x).rank() as i64;
        let SoftmaxAxis { default, coerced } = SoftmaxAxis::at_opset(f.opset);
        let axis = node.attrs.int("axis", default).map_err(|e| Error::Node {
            node: node.name.clone(),
            op: node.op.clone(),
            reason: e.to_string(),
        })?;
        let axis = if axis < 0 { axis + rank } else { axis };
        out.logits = Some(Logits { tensor: x, axis: usize::try_from(axis).unwrap_or(0), coerced });
    }
    for (i, &t) in f.outputs.iter().enumerate() {
        match map.get(&t) {
            Some(&m) => out.outputs.push(m),
            None if i == 0 && out.logits.is_some() => out.outputs.push(out.logits.as_ref().map_or(t, |l| l.tensor)),
            None => return Err(Error::UnknownOutput(f.tensor(t).name.clone())),
        }
    }
    Ok(out)
}

/// Initialisation attributes for a parameter the model does not give values for.
fn initialisation(f: &Graph, t: TensorId) -> Attrs {
    let shape = &f.tensor(t).ty.shape;
    let big_dims = shape.iter().filter(|&&d| d > 1).count();
    let reader_is_scale = f.readers(t).any(|(r, slot)| {
        let op = f.node(r).op.as_str();
        op == "Mul"
            || (op == "BatchNormalization" && (slot == 1 || slot == 4))
            || (op == "LayerNormalization" && slot == 1)
    });
    let init = if big_dims >= 2 && shape.len() >= 3 {
        "he"
    } else if big_dims >= 2 {
        "xavier"
    } else if reader_is_scale {
        "ones"
    } else {
        "zeros"
    };
    let fan_in: usize = shape.iter().skip(1).product();
    let fan_out = shape.first().copied().unwrap_or(1) * shape.iter().skip(2).product::<usize>();
    Attrs::new()
        .with("init", Attr::String(init.into()))
        .with("fan_in", Attr::Int(fan_in as i64))
        .with("fan_out", Attr::Int(fan_out as i64))
}

/// Copies one node, in training mode where that differs.
fn copy_node(
    b: &mut Builder,
    f: &Graph,
    id: NodeId,
    map: &mut HashMap<TensorId, TensorId>,
    running_variance: RunningVariance,
) -> Result<()> {
    let node = f.node(id);
    let fail = |reason: String| Error::Node { node: node.name.clone(), op: node.op.clone(), reason };
    let inputs: Vec<Option<TensorId>> = copied_inputs(node)
        .iter()
        .map(|t| {
            t.map(|t| map.get(&t).copied().ok_or_else(|| fail(format!("input '{}' was not copied", f.tensor(t).name))))
                .transpose()
        })
        .collect::<Result<_>>()?;
    let types: Vec<TensorType> = node.outputs.iter().map(|&t| f.tensor(t).ty.clone()).collect();
    let new_outputs: Vec<TensorId> = match (node.op.as_str(), node.parameterized) {
        (INPUT_OP, _) => {
            let t = node.outputs[0];
            let attrs = input_range(f, t).map_or_else(Attrs::new, |r| Attrs::new().with("range", Attr::Int(r as i64)));
            let v = b.add_leaf(&node.name, INPUT_OP, attrs, types[0].clone());
            b.graph.inputs.push(v);
            vec![v]
        }
        (_, true) => {
            let v = b.add_leaf(
                &node.name,
                VARIABLE_OP,
                Attrs::new().with("init", Attr::String("data".into())),
                types[0].clone(),
            );
            b.graph.tensor_mut(v).data = f.tensor(node.outputs[0]).data.clone();
            vec![v]
        }
        ("BatchNormalization", _) => batch_norm(b, f, id, &inputs, &types, running_variance).map_err(fail)?,
        ("Dropout", _) => {
            let ratio = dropout_ratio(f, id).map_err(fail)?;
            let x = inputs[0].ok_or_else(|| fail("has no input".into()))?;
            let attrs = Attrs::new().with("ratio", Attr::Float(ratio)).with("seed", Attr::Int(id.index() as i64));
            let mask = TensorType::new(DType::Bool, types[0].shape.clone());
            b.lms(&node.name, "DropoutTrain", attrs, &[Some(x)], vec![types[0].clone(), mask])
        }
        ("LayerNormalization", _) => b.onnx(&node.name, "LayerNormalization", node.attrs.clone(), &inputs, 3)?,
        _ => {
            let new = b.add(&node.name, &node.op, &node.domain, node.attrs.clone(), inputs, types);
            let outs = b.graph.node(new).outputs.clone();
            for (&old, &t) in node.outputs.iter().zip(&outs) {
                b.graph.tensor_mut(t).data = f.tensor(old).data.clone();
            }
            outs
        }
    };
    for (&old, &new) in node.outputs.iter().zip(&new_outputs) {
        map.insert(old, new);
    }
    Ok(())
}

/// The inputs the training-mode copy of a node reads: Dropout takes its
/// ratio as an attribute, so only its data input.
fn copied_inputs(node: &crate::ir::Node) -> &[Option<TensorId>] {
    if node.op == "Dropout" {
        &node.inputs[..1.min(node.inputs.len())]
    } else {
        &node.inputs
    }
}

/// BatchNormTrain in place of BatchNormalization, with update edges that
/// write the running statistics back (the variance by `running_variance`'s
/// convention: attribute `unbiased`).
fn batch_norm(
    b: &mut Builder,
    f: &Graph,
    id: NodeId,
    inputs: &[Option<TensorId>],
    types: &[TensorType],
    running_variance: RunningVariance,
) -> std::result::Result<Vec<TensorId>, String> {
    let node = f.node(id);
    if inputs.len() != 5 || inputs.iter().any(Option::is_none) {
        return Err("training needs all five inputs".into());
    }
    if node.outputs.len() > 1 && node.outputs[1..].iter().any(|&t| f.readers(t).next().is_some()) {
        return Err("its optional outputs are read; lms computes them itself when training".into());
    }
    let stats: Vec<TensorId> = inputs[3..].iter().flatten().copied().collect();
    let mut vars = Vec::new();
    for &s in &stats {
        let producer = b.graph.tensor(s).producer.0;
        if !b.graph.node(producer).parameterized {
            return Err(format!("running statistic '{}' must be a constant", b.graph.tensor(s).name));
        }
        vars.push(producer);
    }
    let stat_ty = b.ty(stats[0]);
    let epsilon = node.attrs.float("epsilon", 1e-5).map_err(|e| e.to_string())?;
    let momentum = node.attrs.float("momentum", 0.9).map_err(|e| e.to_string())?;
    let mut attrs = Attrs::new().with("epsilon", Attr::Float(epsilon)).with("momentum", Attr::Float(momentum));
    if running_variance == RunningVariance::Unbiased {
        attrs = attrs.with("unbiased", Attr::Int(1));
    }
    let outs = b.lms(
        &node.name,
        "BatchNormTrain",
        attrs,
        inputs,
        vec![types[0].clone(), stat_ty.clone(), stat_ty.clone(), stat_ty.clone(), stat_ty],
    );
    b.graph.add_update_edge(outs[1], vars[0]);
    b.graph.add_update_edge(outs[2], vars[1]);
    Ok(vec![outs[0]])
}

/// Dropout's ratio: the `ratio` attribute (opset < 12) or its constant second input.
fn dropout_ratio(f: &Graph, id: NodeId) -> std::result::Result<f32, String> {
    let node = f.node(id);
    if let Some(t) = node.inputs.get(1).copied().flatten() {
        let data = f.tensor(t).data.as_ref().ok_or("ratio must be a constant")?;
        return data.to_f64().first().map(|&r| r as f32).ok_or_else(|| "ratio is empty".to_string());
    }
    node.attrs.float("ratio", 0.5).map_err(|e| e.to_string())
}

/// For an integer input that indexes a Gather or GatherElements: the size of the gathered axis.
fn input_range(f: &Graph, t: TensorId) -> Option<usize> {
    if !f.tensor(t).ty.dtype.is_int() {
        return None;
    }
    f.readers(t).find_map(|(r, slot)| {
        let node = f.node(r);
        if !matches!(node.op.as_str(), "Gather" | "GatherElements") || slot != 1 {
            return None;
        }
        let data = f.tensor(node.inputs[0]?);
        let rank = data.ty.rank() as i64;
        let axis = node.attrs.int("axis", 0).ok()?;
        let axis = if axis < 0 { axis + rank } else { axis };
        data.ty.shape.get(usize::try_from(axis).ok()?).copied()
    })
}
