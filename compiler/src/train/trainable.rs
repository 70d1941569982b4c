//! Which tensors of a forward graph training writes, and how each weight starts.
//!
//! A tensor is in a *parameter position* when an op depending on data reads it
//! as a weight ([`Role::Weight`]): the weight or bias of Conv, ConvTranspose
//! and Gemm, a MatMul operand whose other operand is an activation, the scale
//! and bias of a normalisation, a PRelu slope, an embedding table (Gather
//! data), a rank-1 bias or scale added to or multiplying an activation, and a
//! table added to an embedding lookup (a position embedding). It is a learned
//! *table* ([`Role::Table`]) when, of more than one element, it is added to
//! or subtracted from an activation (a position table, also one an exporter
//! folded into a constant; a per-channel bias of any rank), multiplies one
//! per channel (one axis longer than 1: a BatchNorm scale stored after the
//! normalisation), or is concatenated with one (a class token) — directly or
//! through ops that only move or broadcast its values (Expand, Reshape,
//! Unsqueeze, ...). A table is trained unless its values mark it as a buffer:
//! a mask (a value of −10⁴ or below, or not finite) or a fill of one value.
//! A table multiplying activations along several axes (rotary cos/sin
//! caches) is a buffer.
//!
//! By default the trained tensors are the float initializers that reach a
//! parameter position or a table role through ops on constants only (a weight
//! stored transposed is trained through its Transpose), and the weights a
//! model only describes by shape (a `ConstantOfShape` in a parameter
//! position, as in the model-zoo "light" graphs), which get a seeded
//! He/Xavier initialisation. Everything else keeps its value: masks and other
//! buffers, index tables and integer tensors, tensors only shape ops read,
//! BatchNorm's running statistics (which the optimizer does not write;
//! BatchNormTrain updates them). `--trainable` globs replace the default set,
//! `--frozen` globs remove from it. The summary says why each float
//! initializer is frozen, and warns about one that reaches the loss and looks
//! learned (more than one value, not all equal) but has no role.

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
    /// Per tensor: why a float initializer or seeded weight is not trained.
    pub frozen_why: Vec<Option<Frozen>>,
}

/// Why a float initializer keeps its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Frozen {
    /// A `--frozen` glob matches it.
    Glob,
    /// `--trainable` globs are given and none matches it.
    NotTrainable,
    /// A table whose values are a mask's.
    Mask,
    /// A table of one repeated value.
    Fill,
    /// Multiplies activations along several axes (a rotary cos/sin cache).
    Cache,
    /// No gradient path from it reaches the model's outputs (read only by
    /// shape ops, as indices, or not at all).
    NoGradientPath,
    /// Reaches the loss, but in no weight or table role.
    NoRole,
}

impl Frozen {
    /// Why, in the summary's words.
    pub fn describe(self) -> &'static str {
        match self {
            Frozen::Glob => "--frozen",
            Frozen::NotTrainable => "not matched by --trainable",
            Frozen::Mask => "a mask",
            Frozen::Fill => "one repeated value",
            Frozen::Cache => "a cache multiplying activations",
            Frozen::NoGradientPath => "no gradient path to the loss",
            Frozen::NoRole => "no weight role",
        }
    }
}

/// How a tensor is read where it is a weight, weakest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Role {
    /// Not as a weight.
    None,
    /// Multiplies activations along several axes: a buffer.
    Cache,
    /// A learned table unless its values mark a buffer (module docs).
    Table,
    /// In a parameter position: trained.
    Weight,
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
    /// Why each of `frozen` keeps its values ([`Frozen::describe`]), in the same order.
    pub frozen_why: Vec<String>,
    /// Things about the model that make training it doubtful.
    pub warnings: Vec<String>,
    /// The batch variance BatchNorm's running variance is updated with, for a
    /// model with BatchNormalization.
    pub running_variance: Option<super::RunningVariance>,
    /// Whether `running_variance` is PyTorch's because the model's producer is pytorch.
    pub running_variance_from_producer: bool,
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
    // The strongest role float tensors reach through constant ops only.
    let mut feeds = vec![Role::None; n];
    for &id in schedule.iter().rev() {
        if data_dependent[id.index()] {
            continue;
        }
        for &t in &f.node(id).outputs {
            if !f.tensor(t).ty.dtype.is_float() {
                continue;
            }
            let through = f
                .readers(t)
                .filter(|(r, _)| !data_dependent[r.index()])
                .flat_map(|(r, _)| f.node(r).outputs.iter().map(|o| feeds[o.index()]));
            feeds[t.index()] = through.fold(role(f, t, &data_dependent), Role::max);
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
            && (role(f, t, &data_dependent) == Role::Weight || running_stat[t.index()])
        {
            seeded[t.index()] = true;
            candidate[t.index()] = true;
        }
    }
    let (trainable, frozen) =
        (Globs::new("--trainable", &options.trainable)?, Globs::new("--frozen", &options.frozen)?);
    let mut trained = vec![false; n];
    let mut frozen_why = vec![None; n];
    let mut names = Vec::new();
    for (t, tensor) in f.tensors() {
        let i = t.index();
        if !candidate[i] || running_stat[i] {
            continue;
        }
        names.push(tensor.name.as_str());
        let by_default = match feeds[i] {
            _ if seeded[i] => None,
            Role::Weight => None,
            Role::Table => buffer_values(f, t),
            Role::Cache => Some(Frozen::Cache),
            Role::None if reaches_outputs(f, t) => Some(Frozen::NoRole),
            Role::None => Some(Frozen::NoGradientPath),
        };
        let why = if frozen.matches(&tensor.name) {
            Some(Frozen::Glob)
        } else if trainable.is_empty() {
            by_default
        } else {
            (!trainable.matches(&tensor.name)).then_some(Frozen::NotTrainable)
        };
        trained[i] = why.is_none();
        frozen_why[i] = why;
    }
    for globs in [&trainable, &frozen] {
        globs.require_each_matches("weight or buffer of the model", &names)?;
    }
    Ok(Selection { seeded, trained, running_stat, frozen_why })
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
                let why = self.frozen_why[i].unwrap_or(Frozen::NoGradientPath);
                s.frozen.push(tensor.name.clone());
                s.frozen_why.push(why.describe().into());
                if matches!(why, Frozen::NoRole | Frozen::Fill) && tensor.ty.shape.iter().product::<usize>() > 1 {
                    s.warnings.push(format!(
                        "'{}' {:?} reaches the loss but is frozen ({}); if it is learned, train it with --trainable",
                        lms_proto::escape::escape(&tensor.name),
                        tensor.ty.shape,
                        why.describe()
                    ));
                }
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

/// Ops that only move, broadcast or retype their input 0's values: a
/// tensor they pass on keeps its role.
const FORWARDING: [&str; 9] =
    ["Cast", "Expand", "Flatten", "Identity", "Reshape", "Squeeze", "Tile", "Transpose", "Unsqueeze"];

/// The strongest role in which an op depending on data reads `t` (module
/// docs), following it through [`FORWARDING`] ops that depend on data.
fn role(f: &Graph, t: TensorId, data_dependent: &[bool]) -> Role {
    let from_data = |x: Option<&Option<TensorId>>| {
        x.copied().flatten().is_some_and(|x| data_dependent[f.tensor(x).producer.0.index()])
    };
    let ty = &f.tensor(t).ty;
    let several = ty.shape.iter().product::<usize>() > 1;
    f.readers(t)
        .map(|(r, slot)| {
            let node = f.node(r);
            if !data_dependent[r.index()] {
                return Role::None;
            }
            let other = node.inputs.get(1 - slot.min(1));
            let weight = |yes: bool| if yes { Role::Weight } else { Role::None };
            match node.op.as_str() {
                "Conv" | "ConvTranspose" => weight(slot >= 1),
                "Gemm" => Role::Weight,
                "MatMul" => weight(from_data(other)),
                "BatchNormalization" | "InstanceNormalization" | "LayerNormalization" => weight(slot == 1 || slot == 2),
                "PRelu" => weight(slot == 1),
                "Gather" | "GatherElements" => weight(slot == 0 && from_data(node.inputs.get(1))),
                "Add" | "Sub" | "Mul" if slot <= 1 && from_data(other) => {
                    let lookup = other
                        .copied()
                        .flatten()
                        .is_some_and(|o| node.op == "Add" && f.node(f.tensor(o).producer.0).op == "Gather");
                    let long_axes = ty.shape.iter().filter(|&&d| d > 1).count();
                    if ty.rank() == 1 || lookup {
                        Role::Weight
                    } else if !several {
                        Role::None
                    } else if node.op != "Mul" || long_axes <= 1 {
                        Role::Table
                    } else {
                        Role::Cache
                    }
                }
                "Concat" if several && node.inputs.iter().any(|x| from_data(Some(x)) && *x != Some(t)) => Role::Table,
                op if slot == 0 && FORWARDING.contains(&op) => node
                    .outputs
                    .iter()
                    .filter(|&&o| f.tensor(o).ty.dtype.is_float())
                    .map(|&o| role(f, o, data_dependent))
                    .max()
                    .unwrap_or(Role::None),
                _ => Role::None,
            }
        })
        .max()
        .unwrap_or(Role::None)
}

/// Why table `t`'s values mark it as a buffer: a mask (a value of −10⁴ or
/// below, or not finite) or one repeated value; `None` for a learned table
/// (or one whose values are not stored).
fn buffer_values(f: &Graph, t: TensorId) -> Option<Frozen> {
    let values = f.tensor(t).data.as_ref()?.to_f64();
    if values.iter().any(|v| !v.is_finite() || *v <= -1e4) {
        Some(Frozen::Mask)
    } else if values.windows(2).all(|w| w[0] == w[1]) {
        Some(Frozen::Fill)
    } else {
        None
    }
}

/// Float inputs through which no gradient flows: Dropout's ratio, Clip's
/// bounds, Resize's region and scales, Pad's fill value.
fn gradient_stops(op: &str, slot: usize) -> bool {
    matches!(op, "Dropout" | "Clip" | "Resize" | "Upsample") && slot >= 1 || op == "Pad" && slot >= 2
}

/// Whether float values of `t` flow into an output of `f` (the loss's input)
/// through float tensors, past no input that [`gradient_stops`].
fn reaches_outputs(f: &Graph, t: TensorId) -> bool {
    let mut seen = vec![false; f.tensor_count()];
    let mut stack = vec![t];
    while let Some(t) = stack.pop() {
        if std::mem::replace(&mut seen[t.index()], true) {
            continue;
        }
        if f.outputs.contains(&t) {
            return true;
        }
        for (r, slot) in f.readers(t) {
            let node = f.node(r);
            if !gradient_stops(&node.op, slot) {
                stack.extend(node.outputs.iter().filter(|&&o| f.tensor(o).ty.dtype.is_float()));
            }
        }
    }
    false
}
