//! Which tensors of a forward graph training writes, and how each weight starts.
//!
//! A tensor is in a *parameter position* when an op depending on data reads it
//! as a weight: the weight or bias of Conv, ConvTranspose and Gemm, a MatMul
//! operand whose other operand is an activation, the scale and bias of a
//! normalisation, a PRelu slope, an embedding table (Gather data), a rank-1
//! bias or scale added to or multiplying an activation, and a table added to
//! an embedding lookup (a position embedding).
//!
//! By default the trained tensors are the float initializers that reach a
//! parameter position through ops on constants only (a weight stored
//! transposed is trained through its Transpose), and the weights a model only
//! describes by shape (a `ConstantOfShape` in a parameter position, as in the
//! model-zoo "light" graphs), which get a seeded He/Xavier initialisation.
//! Everything else keeps its value: masks and other buffers, BatchNorm's
//! running statistics (which the optimizer does not write; BatchNormTrain
//! updates them). `--trainable` globs replace the default set, `--frozen`
//! globs remove from it.

use super::TrainOptions;
use crate::analysis::classify::TensorClass;
use crate::error::Result;
use crate::glob::Globs;
use crate::ir::{Attr, Graph, NodeId, TensorId, VARIABLE_OP};
use serde::Serialize;

/// How training treats each tensor of the forward graph.
pub struct Selection {
    /// Per tensor: a weight or running statistic the model describes only by
    /// shape, made a variable with a seeded initialisation.
    pub seeded: Vec<bool>,
    /// Per tensor: an initializer or seeded weight the optimizer writes.
    pub trained: Vec<bool>,
    /// Per tensor: a BatchNormalization running statistic.
    pub running_stat: Vec<bool>,
}

/// What the trained set is, for the compile summary.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
pub struct TrainSummary {
    /// Names of the trained tensors, in tensor order.
    pub trained: Vec<String>,
    /// Number of trained values (elements).
    pub trained_values: u64,
    /// Float initializers and weights that keep their values (masks, buffers,
    /// frozen weights); running statistics are not listed.
    pub frozen: Vec<String>,
    /// Things about the model that make training it doubtful.
    pub warnings: Vec<String>,
}

/// Decides the trained set of `f`; `classes` from [`crate::analysis::classify`]
/// and `schedule` a topological order of `f`.
pub fn select(f: &Graph, schedule: &[NodeId], classes: &[TensorClass], options: &TrainOptions) -> Result<Selection> {
    let n = f.tensor_count();
    let class = |t: TensorId| classes[t.index()];
    let mut data_dependent = vec![false; f.node_bound()];
    for &id in schedule {
        data_dependent[id.index()] = f
            .node(id)
            .outputs
            .iter()
            .any(|&t| matches!(class(t), TensorClass::Input | TensorClass::Activation | TensorClass::Other));
    }
    let mut running_stat = vec![false; n];
    for &id in schedule {
        let node = f.node(id);
        if node.op == "BatchNormalization" {
            for t in node.inputs.iter().skip(3).flatten() {
                running_stat[t.index()] = true;
            }
        }
    }
    // Float tensors that reach a parameter position through constant ops only.
    let mut feeds = vec![false; n];
    for &id in schedule.iter().rev() {
        if data_dependent[id.index()] {
            continue;
        }
        for &t in &f.node(id).outputs {
            feeds[t.index()] = f.tensor(t).ty.dtype.is_float()
                && (parameter_position(f, t, &data_dependent)
                    || f.readers(t).any(|(r, _)| {
                        !data_dependent[r.index()] && f.node(r).outputs.iter().any(|o| feeds[o.index()])
                    }));
        }
    }
    // Nodes whose value comes from a float initializer.
    let mut from_initializer = vec![false; f.node_bound()];
    for &id in schedule {
        let node = f.node(id);
        from_initializer[id.index()] = if node.op == VARIABLE_OP {
            node.outputs.iter().any(|&t| is_initializer(f, t) && f.tensor(t).ty.dtype.is_float())
        } else {
            node.inputs.iter().flatten().any(|t| from_initializer[f.tensor(*t).producer.0.index()])
        };
    }
    let mut seeded = vec![false; n];
    let mut candidate = vec![false; n];
    for (t, tensor) in f.tensors() {
        let float = tensor.ty.dtype.is_float();
        if is_initializer(f, t) {
            candidate[t.index()] = float;
        } else if class(t) == TensorClass::Parameter
            && !from_initializer[tensor.producer.0.index()]
            && (parameter_position(f, t, &data_dependent) || running_stat[t.index()])
        {
            seeded[t.index()] = true;
            candidate[t.index()] = true;
        }
    }
    let (trainable, frozen) =
        (Globs::new("--trainable", &options.trainable)?, Globs::new("--frozen", &options.frozen)?);
    let mut trained = vec![false; n];
    let mut names = Vec::new();
    for (t, tensor) in f.tensors() {
        let i = t.index();
        if !candidate[i] || running_stat[i] {
            continue;
        }
        names.push(tensor.name.as_str());
        let wanted = if trainable.is_empty() { seeded[i] || feeds[i] } else { trainable.matches(&tensor.name) };
        trained[i] = wanted && !frozen.matches(&tensor.name);
    }
    for globs in [&trainable, &frozen] {
        globs.require_each_matches("weight or buffer of the model", &names)?;
    }
    Ok(Selection { seeded, trained, running_stat })
}

impl Selection {
    /// The summary of this selection over `f`.
    pub fn summary(&self, f: &Graph) -> TrainSummary {
        let mut s = TrainSummary::default();
        for (t, tensor) in f.tensors() {
            let i = t.index();
            if self.trained[i] {
                s.trained.push(tensor.name.clone());
                s.trained_values += tensor.ty.shape.iter().product::<usize>() as u64;
            } else if (self.seeded[i] || (is_initializer(f, t) && tensor.ty.dtype.is_float())) && !self.running_stat[i]
            {
                s.frozen.push(tensor.name.clone());
            }
        }
        let count = |ops: &[&str]| f.node_ids().filter(|&id| ops.contains(&f.node(id).op.as_str())).count();
        let convs = count(&["Conv"]);
        if convs >= 2 && count(&NORMALISATIONS) == 0 && built_around_normalisation(f) {
            s.warnings.push(format!(
                "the model looks like a CNN ({convs} Conv) but has no normalisation layer; if it was exported \
                 from PyTorch in eval mode, BatchNorm was folded into Conv: export it with \
                 training=torch.onnx.TrainingMode.PRESERVE"
            ));
        }
        s
    }
}

/// Whether `f` has the shape of a CNN designed with normalisation, so that
/// none left means an export folded it away: a residual addition of two
/// computed tensors (ResNet) or a grouped convolution (MobileNet,
/// ShuffleNet). Plain stacks (VGG, SqueezeNet, AlexNet) train without it.
fn built_around_normalisation(f: &Graph) -> bool {
    let computed = |t: &Option<TensorId>| t.is_some_and(|t| !f.node(f.tensor(t).producer.0).parameterized);
    f.node_ids().map(|id| f.node(id)).any(|n| match n.op.as_str() {
        "Add" => n.inputs.len() == 2 && n.inputs.iter().all(computed),
        "Conv" => matches!(n.attrs.get("group"), Some(Attr::Int(groups)) if *groups > 1),
        _ => false,
    })
}

/// Normalisation ops; a CNN exported for training keeps some.
const NORMALISATIONS: [&str; 4] = ["BatchNormalization", "InstanceNormalization", "LayerNormalization", "LRN"];

/// True when `t` is an initializer (a `Variable` with stored values).
pub fn is_initializer(f: &Graph, t: TensorId) -> bool {
    f.node(f.tensor(t).producer.0).op == VARIABLE_OP && f.tensor(t).data.is_some()
}

/// True when an op depending on data reads `t` as a weight (module docs).
fn parameter_position(f: &Graph, t: TensorId, data_dependent: &[bool]) -> bool {
    let from_data = |x: Option<&Option<TensorId>>| {
        x.copied().flatten().is_some_and(|x| data_dependent[f.tensor(x).producer.0.index()])
    };
    f.readers(t).any(|(r, slot)| {
        let node = f.node(r);
        if !data_dependent[r.index()] {
            return false;
        }
        let other = node.inputs.get(1 - slot.min(1));
        match node.op.as_str() {
            "Conv" | "ConvTranspose" => slot >= 1,
            "Gemm" => true,
            "MatMul" => from_data(other),
            "BatchNormalization" | "InstanceNormalization" | "LayerNormalization" => slot == 1 || slot == 2,
            "PRelu" => slot == 1,
            "Gather" => slot == 0 && from_data(node.inputs.get(1)),
            "Add" | "Sub" | "Mul" if slot <= 1 => {
                let lookup = other
                    .copied()
                    .flatten()
                    .is_some_and(|o| node.op == "Add" && f.node(f.tensor(o).producer.0).op == "Gather");
                (f.tensor(t).ty.rank() == 1 && from_data(other)) || lookup
            }
            _ => false,
        }
    })
}
