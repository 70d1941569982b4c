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
            let logits = fwd.logits.unwrap_or(output);
            let ty = b.ty(logits);
            let (classes, positions) = match ty.shape.split_last() {
                Some((&k, rest)) if ty.dtype == DType::F32 && k > 0 => (k, rest.to_vec()),
                _ => {
                    return Err(Error::Tensor {
                        tensor: b.graph.tensor(logits).name.clone(),
                        reason: format!("softmax cross-entropy needs f32 logits with a class axis, got {ty}"),
                    })
                }
            };
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
