//! Training-graph construction: from a forward ONNX graph, a loss and an
//! optimizer, the graph with forward, backward and update phases
//! (TFLMS §3.3-3.5).
//!
//! 1. [`trainable`]: which weights are trained (those in parameter positions
//!    by default; masks and buffers keep their values).
//! 2. [`forward`]: the forward graph in training mode — initializers and
//!    `ConstantOfShape` weights become variables, BatchNormalization uses
//!    batch statistics and updates its running statistics, Dropout keeps its
//!    mask.
//! 3. [`loss`]: softmax cross-entropy on integer labels over the model's class
//!    axis (a final Softmax is folded in) or mean squared error, on the
//!    model's first output.
//! 4. [`autodiff`]: reverse-mode differentiation, one rule per op ([`grad`]).
//! 5. [`optimizer`]: SGD, momentum or Adam update ops writing the variables
//!    through update edges, after every other reader of each variable.

mod autodiff;
mod builder;
mod forward;
mod grad;
mod loss;
mod optimizer;
mod trainable;

pub use grad::no_gradient;
pub use trainable::TrainSummary;

use crate::analysis::classify::classify;
use crate::analysis::order;
use crate::error::Result;
use crate::ir::{Graph, TensorId};
use builder::Builder;
use serde::Serialize;
use std::collections::HashMap;

/// The loss attached to the model's first output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// Softmax cross-entropy on integer labels over the class axis: a folded
    /// final Softmax's axis, else axis 1 of an N×C×1×1 output, else the last.
    SoftmaxCrossEntropy,
    /// Mean squared error against a float target.
    MeanSquaredError,
}

/// The optimizer and its hyper-parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Optimizer {
    Sgd { lr: f32 },
    Momentum { lr: f32, momentum: f32 },
    Adam { lr: f32, beta1: f32, beta2: f32, epsilon: f32 },
}

/// How to build the training graph.
#[derive(Clone, Debug, PartialEq)]
pub struct TrainOptions {
    pub loss: Loss,
    pub optimizer: Optimizer,
    /// Glob patterns ([`crate::glob::Globs`]) over initializer and weight
    /// names; when given, exactly the matching ones are trained.
    /// Empty: the weights in parameter positions ([`trainable`]).
    pub trainable: Vec<String>,
    /// Glob patterns of weights not to train (applied after `trainable`).
    pub frozen: Vec<String>,
    /// Which batch variance updates BatchNorm's running variance; `None`:
    /// ONNX's, unless `lms compile` finds the model came from PyTorch.
    pub running_variance: Option<RunningVariance>,
}

/// The batch variance BatchNormalization's running variance is updated with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RunningVariance {
    /// The biased variance (Σ(x−mean)²/n): the ONNX operator's definition.
    #[default]
    Biased,
    /// The unbiased variance (Σ(x−mean)²/(n−1)): PyTorch's `BatchNorm`.
    Unbiased,
}

impl RunningVariance {
    /// The convention's name and whose it is.
    pub fn describe(self) -> &'static str {
        match self {
            RunningVariance::Biased => "the biased batch variance (ONNX's definition)",
            RunningVariance::Unbiased => "the unbiased batch variance (PyTorch's convention)",
        }
    }
}

impl Default for TrainOptions {
    /// Softmax cross-entropy, SGD with learning rate 0.01, the default trained set.
    fn default() -> Self {
        TrainOptions {
            loss: Loss::SoftmaxCrossEntropy,
            optimizer: Optimizer::Sgd { lr: 0.01 },
            trainable: vec![],
            frozen: vec![],
            running_variance: None,
        }
    }
}

/// Builds the training graph of `forward`. Its only output is the scalar loss.
pub fn build(forward: &Graph, options: &TrainOptions) -> Result<Graph> {
    let (graph, gradients) = differentiate(forward, options)?;
    let mut graph = attach_optimizer(graph, &gradients, options.optimizer)?;
    order::settle(&mut graph)?;
    Ok(graph)
}

/// The training-mode forward graph of `forward`, its loss (the only output)
/// and the backward phase; with the gradient of each trained variable the
/// loss depends on, in training order.
pub fn differentiate(forward: &Graph, options: &TrainOptions) -> Result<(Graph, Vec<(TensorId, TensorId)>)> {
    let mut b = Builder::new(&forward.name, forward.opset);
    let fold_softmax = options.loss == Loss::SoftmaxCrossEntropy;
    let select = selection(forward, options)?;
    let running_variance = options.running_variance.unwrap_or_default();
    let fwd = forward::build(&mut b, forward, &select, fold_softmax, running_variance)?;
    let loss = loss::attach(&mut b, &fwd, options.loss)?;
    let grads = autodiff::differentiate(&mut b, loss, &fwd.trainable)?;
    b.graph.outputs = vec![loss];
    let gradients = fwd.trainable.iter().filter_map(|w| grads.get(w).map(|&dw| (*w, dw))).collect();
    Ok((b.graph, gradients))
}

/// Adds the update phase to a graph from [`differentiate`]: the optimizer's
/// update of each variable in `gradients` from its gradient.
pub fn attach_optimizer(graph: Graph, gradients: &[(TensorId, TensorId)], optimizer: Optimizer) -> Result<Graph> {
    let mut b = Builder::resume(graph);
    let trainable: Vec<TensorId> = gradients.iter().map(|&(w, _)| w).collect();
    let grads: HashMap<TensorId, TensorId> = gradients.iter().copied().collect();
    optimizer::attach(&mut b, &trainable, &grads, optimizer)?;
    Ok(b.graph)
}

/// Which tensors of `forward` training writes and which keep their values.
pub fn summary(forward: &Graph, options: &TrainOptions) -> Result<TrainSummary> {
    let mut summary = selection(forward, options)?.summary(forward);
    if forward.node_ids().any(|n| forward.node(n).op == "BatchNormalization") {
        summary.running_variance = Some(options.running_variance.unwrap_or_default());
    }
    Ok(summary)
}

fn selection(forward: &Graph, options: &TrainOptions) -> Result<trainable::Selection> {
    let schedule = order::schedule(forward)?;
    let classes = classify(forward, &schedule);
    trainable::select(forward, &schedule, &classes, options)
}
