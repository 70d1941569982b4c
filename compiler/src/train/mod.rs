//! Training-graph construction: from a forward ONNX graph, a loss and an
//! optimizer, the graph with forward, backward and update phases
//! (tflms.txt §3.3-3.5).
//!
//! 1. [`forward`]: the forward graph in training mode — trainable parameters
//!    become variables (float initializers, and float tensors computed only
//!    from constants, such as `ConstantOfShape` weights), BatchNormalization
//!    uses batch statistics and updates its running statistics, Dropout keeps
//!    its mask.
//! 2. [`loss`]: softmax cross-entropy on integer labels (a final Softmax is
//!    folded in) or mean squared error, on the model's first output.
//! 3. [`autodiff`]: reverse-mode differentiation, one rule per op ([`grad`]).
//! 4. [`optimizer`]: SGD, momentum or Adam update ops writing the variables
//!    through update edges, after every other reader of each variable.

mod autodiff;
mod builder;
mod forward;
mod grad;
mod loss;
mod optimizer;

pub use builder::LMS_DOMAIN;

use crate::error::Result;
use crate::ir::Graph;
use builder::Builder;

/// The loss attached to the model's first output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loss {
    /// Softmax cross-entropy over the last axis, on integer labels.
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
    /// Glob patterns (`*` matches any run of characters) over parameter
    /// names; a parameter is trained when it matches one. Empty: all.
    pub trainable: Vec<String>,
}

/// Builds the training graph of `forward`. Its only output is the scalar loss.
pub fn build(forward: &Graph, options: &TrainOptions) -> Result<Graph> {
    let mut b = Builder::new(&forward.name, forward.opset);
    let fold_softmax = options.loss == Loss::SoftmaxCrossEntropy;
    let fwd = forward::build(&mut b, forward, &options.trainable, fold_softmax)?;
    let loss = loss::attach(&mut b, &fwd, options.loss)?;
    let grads = autodiff::differentiate(&mut b, loss, &fwd.trainable)?;
    optimizer::attach(&mut b, &fwd.trainable, &grads, options.optimizer)?;
    b.graph.outputs = vec![loss];
    Ok(b.graph)
}

/// True when `name` matches the glob `pattern` (`*` = any run of characters).
pub fn glob_match(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, rest)) => {
            let Some(tail) = name.strip_prefix(head) else { return false };
            (0..=tail.len()).filter(|&i| tail.is_char_boundary(i)).any(|i| glob_match(rest, &tail[i..]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("*", "conv1.weight"));
        assert!(glob_match("conv*", "conv1.weight"));
        assert!(glob_match("*.bias", "fc.bias"));
        assert!(!glob_match("*.bias", "fc.weight"));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
    }
}
