//! The loss on the model's first output, with its label or target input.

use super::builder::Builder;
use super::forward::Forward;
use super::Loss;
use crate::error::{Error, Result};
use crate::ir::{Attr, Attrs, DType, TensorId, TensorType, INPUT_OP};

/// Adds the loss and its `labels` (softmax cross-entropy) or `target` (mean
/// squared error) input; returns the scalar loss.
pub fn attach(b: &mut Builder, fwd: &Forward, loss: Loss) -> Result<TensorId> {
    let output = *fwd.outputs.first().ok_or_else(|| Error::Usage("the model has no output to train".into()))?;
    let scalar = TensorType::new(DType::F32, vec![]);
    match loss {
        Loss::SoftmaxCrossEntropy => {
            let (logits, axis, coerced) = match &fwd.logits {
                Some(l) => (l.tensor, l.axis, l.coerced),
                None => (output, channel_axis(&b.ty(output).shape), false),
            };
            let logits = class_axis_last(b, logits, axis, coerced)?;
            let ty = b.ty(logits);
            let name = b.graph.tensor(logits).name.clone();
            let (classes, positions) = match ty.shape.split_last() {
                Some((&k, rest)) if ty.dtype == DType::F32 && k > 0 => (k, rest.to_vec()),
                _ => {
                    return Err(Error::Tensor {
                        tensor: name,
                        reason: format!("softmax cross-entropy needs f32 logits with a class axis, got {ty}"),
                    })
                }
            };
            if classes == 1 {
                return Err(Error::Tensor {
                    tensor: name,
                    reason: format!(
                        "its class axis (axis {axis} of the model's output) has size 1, so a softmax \
                         cross-entropy over it is always 0 and trains nothing; use --loss mse"
                    ),
                });
            }
            let labels_attrs = Attrs::new().with("range", Attr::Int(classes as i64));
            let labels = b.add_leaf("labels", INPUT_OP, labels_attrs, TensorType::new(DType::I64, positions));
            b.graph.inputs.push(labels);
            Ok(b.lms1("loss", "SoftmaxCrossEntropy", Attrs::new(), &[logits, labels], scalar))
        }
        Loss::MeanSquaredError => {
            let ty = b.ty(output);
            if !ty.dtype.is_float() {
                return Err(Error::Tensor {
                    tensor: b.graph.tensor(output).name.clone(),
                    reason: format!("mean squared error needs a float output, got {ty}"),
                });
            }
            let target = b.add_leaf("target", INPUT_OP, Attrs::new(), ty);
            b.graph.inputs.push(target);
            Ok(b.lms1("loss", "MeanSquaredError", Attrs::new(), &[output, target], scalar))
        }
    }
}

/// The class axis of logits of shape `shape` without a Softmax: the channel
/// axis of an N×C×1×…×1 output, else the last axis.
fn channel_axis(shape: &[usize]) -> usize {
    if shape.len() >= 3 && shape[2..].iter().all(|&d| d == 1) {
        1
    } else {
        shape.len().saturating_sub(1)
    }
}

/// `logits` with its class axis `axis` last, as SoftmaxCrossEntropy wants:
/// flattened at `axis` when Softmax coerced its input to 2-D there or every
/// axis after it has size 1 (N×C×1×1 becomes N×C), else transposed.
fn class_axis_last(b: &mut Builder, logits: TensorId, axis: usize, coerced: bool) -> Result<TensorId> {
    let shape = b.ty(logits).shape;
    if axis + 1 >= shape.len() {
        return Ok(logits);
    }
    let name = format!("{}/classes_last", b.graph.tensor(logits).name);
    if coerced || shape[axis + 1..].iter().all(|&d| d == 1) {
        let attrs = Attrs::new().with("axis", Attr::Int(axis as i64));
        return b.onnx1(&name, "Flatten", attrs, &[logits]);
    }
    let mut perm: Vec<i64> = (0..shape.len() as i64).filter(|&d| d != axis as i64).collect();
    perm.push(axis as i64);
    b.onnx1(&name, "Transpose", Attrs::new().with("perm", Attr::Ints(perm)), &[logits])
}
