//! Losses and their gradients: SoftmaxCrossEntropy (log-sum-exp, f64) on integer labels,
//! MeanSquaredError. A cross-entropy part of a batch split divides by the whole batch's
//! positions (attribute `positions`) instead of its own.

use super::super::num::Float;
use super::super::{dispatch_float, Ctx, Kernel};
use super::{from_f64s, same_shape, view};
use crate::error::{KernelError, Result};
use crate::tensor::{numel, Elem, HostTensor};

/// The loss kernels.
pub(super) const KERNELS: &[(&str, Kernel)] = &[
    ("MeanSquaredError", |c| mse(c, false)),
    ("MeanSquaredErrorGrad", |c| mse(c, true)),
    ("SoftmaxCrossEntropy", |c| cross_entropy(c, false)),
    ("SoftmaxCrossEntropyGrad", |c| cross_entropy(c, true)),
];

/// The loss (`grad` false: a scalar) or its gradient w.r.t. the logits.
fn cross_entropy(ctx: &Ctx<'_>, grad: bool) -> Result<Vec<HostTensor>> {
    let logits = ctx.input(0, "logits")?;
    dispatch_float!(logits.dtype(), "input logits", T => cross_entropy_typed::<T>(ctx, logits, grad))
}

fn cross_entropy_typed<T: Float>(ctx: &Ctx<'_>, logits: &HostTensor, grad: bool) -> Result<Vec<HostTensor>> {
    let Some((&k, positions)) = logits.shape.split_last().filter(|(&k, _)| k > 0) else {
        return Err(KernelError::shape(
            "input logits",
            format!("expected [..., K] with K > 0, found {:?}", logits.shape),
        ));
    };
    let labels = ctx.input(1, "labels")?;
    same_shape(labels, positions, "labels")?;
    let labels = labels.to_i64s("input labels")?;
    let xs = logits.view::<T>("input logits")?;
    let count = divisor(ctx, numel(positions))?;
    let mut loss = 0.0f64;
    let mut dx = Vec::with_capacity(if grad { xs.len() } else { 0 });
    for (p, (row, &label)) in xs.chunks_exact(k).zip(&labels).enumerate() {
        let class = usize::try_from(label)
            .ok()
            .filter(|&c| c < k)
            .ok_or_else(|| KernelError::invalid(format!("label {label} at position {p} is outside [0, {k})")))?;
        let max = row.iter().fold(T::LOWEST, |m, &v| m.max_nan(v)).to_f64();
        let sum: f64 = row.iter().map(|v| (v.to_f64() - max).exp()).sum();
        if grad {
            dx.extend(row.iter().enumerate().map(|(j, v)| {
                let softmax = (v.to_f64() - max).exp() / sum;
                let onehot = if j == class { 1.0 } else { 0.0 };
                T::from_f64((softmax - onehot) / count)
            }));
        } else {
            loss += max + sum.ln() - row[class].to_f64();
        }
    }
    if grad {
        Ok(vec![HostTensor::from_vec(logits.shape.clone(), dx)?])
    } else {
        Ok(vec![from_f64s::<T>(vec![], std::iter::once(loss / count))?])
    }
}

/// What SoftmaxCrossEntropy(Grad) divides by: attribute `positions` (a part of a batch
/// split is told the whole count), or its own `own` positions; at least 1.
fn divisor(ctx: &Ctx<'_>, own: usize) -> Result<f64> {
    let positions = ctx.attrs.int("positions", own as i64)?;
    if positions < 0 {
        return Err(KernelError::invalid(format!("attribute positions {positions} is negative")));
    }
    Ok(positions.max(1) as f64)
}

/// Mean of (prediction − target)² (`grad` false) or its gradient 2·(p − t)/numel.
fn mse(ctx: &Ctx<'_>, grad: bool) -> Result<Vec<HostTensor>> {
    let p = ctx.input(0, "prediction")?;
    same_shape(ctx.input(1, "target")?, &p.shape, "target")?;
    dispatch_float!(p.dtype(), "input prediction", T => {
        let (ps, ts) = (view::<T>(ctx, 0, "prediction")?, view::<T>(ctx, 1, "target")?);
        let n = ps.len().max(1) as f64;
        let diffs = ps.iter().zip(ts).map(|(p, t)| p.to_f64() - t.to_f64());
        if grad {
            Ok(vec![from_f64s::<T>(p.shape.clone(), diffs.map(|d| 2.0 * d / n))?])
        } else {
            let sum: f64 = diffs.map(|d| d * d).sum();
            Ok(vec![from_f64s::<T>(vec![], std::iter::once(sum / n))?])
        }
    })
}

#[cfg(test)]
mod tests {
    use super::super::testutil::*;
    use lms_proto::lms::DType::*;

    /// The loss of f64 logits, computed directly.
    fn direct_loss(logits: &[f64], labels: &[i64], k: usize) -> f64 {
        let rows = logits.len() / k;
        let mut total = 0.0;
        for (row, &label) in logits.chunks(k).zip(labels) {
            let sum: f64 = row.iter().map(|v| v.exp()).sum();
            total -= (row[label as usize].exp() / sum).ln();
        }
        total / rows as f64
    }

    #[test]
    fn cross_entropy_matches_direct_computation_and_its_gradient_finite_differences() {
        let mut rng = Rng::new(21);
        let logits = rng.tensor(&[2, 3, 5]);
        let labels = tensor(&[2, 3], vec![0i64, 4, 2, 1, 3, 4]);
        let loss = lms1("SoftmaxCrossEntropy", &[], &[&logits, &labels], &[]);
        let xs: Vec<f64> = f32s(&logits).iter().map(|&v| f64::from(v)).collect();
        let want = direct_loss(&xs, labels.as_i64("l").unwrap(), 5);
        assert_near(&loss, &[want as f32], 1e-6);
        let grad = lms1("SoftmaxCrossEntropyGrad", &[], &[&logits, &labels], &[2, 3, 5]);
        // Tolerance 1e-4: central differences in f64 with step 1e-4.
        let fd = fd_grad(&logits, |x| direct_loss(&x.as_f64_test(), labels.as_i64("l").unwrap(), 5));
        assert_near(&grad, &fd, 1e-4);
    }

    #[test]
    fn cross_entropy_parts_told_the_whole_count_make_the_whole_gradient_and_partial_losses() {
        let mut rng = Rng::new(5);
        let logits = rng.tensor(&[4, 3, 7]);
        let labels = tensor(&[4, 3], vec![0i64, 6, 2, 1, 3, 4, 5, 5, 0, 2, 1, 6]);
        let whole_grad = lms1("SoftmaxCrossEntropyGrad", &[], &[&logits, &labels], &[4, 3, 7]);
        let whole_loss = lms1("SoftmaxCrossEntropy", &[], &[&logits, &labels], &[])[0];
        let count = [int("positions", 12)];
        let (mut grad, mut loss) = (Vec::new(), 0.0f32);
        for (rows, k) in [(0..1, 1), (1..4, 3)] {
            let part = tensor(&[k, 3, 7], f32s(&logits)[rows.start * 21..rows.end * 21].to_vec());
            let part_labels = tensor(&[k, 3], labels.as_i64("l").unwrap()[rows.start * 3..rows.end * 3].to_vec());
            grad.extend(lms1("SoftmaxCrossEntropyGrad", &count, &[&part, &part_labels], &[k, 3, 7]));
            loss += lms1("SoftmaxCrossEntropy", &count, &[&part, &part_labels], &[])[0];
        }
        assert_eq!(grad, whole_grad, "bit-identical");
        assert!(((loss - whole_loss) / whole_loss).abs() <= 1e-6, "{loss} vs {whole_loss}");
        let err = run_lms("SoftmaxCrossEntropy", &[int("positions", -1)], &[&logits, &labels], &[(DtypeF32, vec![])]);
        assert_eq!(err.unwrap_err().to_string(), "SoftmaxCrossEntropy: attribute positions -1 is negative");
    }

    #[test]
    fn cross_entropy_is_stable_and_checks_labels() {
        let logits = tensor(&[1, 2], vec![1000.0f32, 0.0]);
        let labels = tensor(&[1], vec![1i64]);
        assert_eq!(lms1("SoftmaxCrossEntropy", &[], &[&logits, &labels], &[]), vec![1000.0]);
        let bad = tensor(&[1], vec![2i64]);
        let err = run_lms("SoftmaxCrossEntropy", &[], &[&logits, &bad], &[(DtypeF32, vec![])]).unwrap_err();
        assert_eq!(err.to_string(), "SoftmaxCrossEntropy: label 2 at position 0 is outside [0, 2)");
    }

    #[test]
    fn mean_squared_error_and_gradient() {
        let p = tensor(&[2, 2], vec![1.0f32, 2.0, 3.0, 4.0]);
        let t = tensor(&[2, 2], vec![0.0f32, 2.0, 5.0, 3.0]);
        assert_eq!(lms1("MeanSquaredError", &[], &[&p, &t], &[]), vec![1.5]);
        assert_eq!(lms1("MeanSquaredErrorGrad", &[], &[&p, &t], &[2, 2]), vec![0.5, 0.0, -1.0, 0.5]);
        let short = tensor(&[3], vec![0.0f32; 3]);
        assert!(run_lms("MeanSquaredError", &[], &[&p, &short], &[(DtypeF32, vec![])]).is_err());
    }
}
