//! Kernels of the `lms` domain (`proto/OPS.md`): training-mode forward ops, losses,
//! gradient ops and optimizer updates, one module per family.
//!
//! Like the forward kernels they are single-threaded and deterministic. Elementwise
//! results are computed in f64 from the inputs and rounded once; sums (losses,
//! statistics, reductions, scatter-adds) accumulate in f64 in a fixed order; the
//! convolution gradients run on the GEMM path and accumulate in the tensor's type.

mod activations_grad;
mod batch_norm_split;
mod conv_grad;
mod dropout;
mod halo;
mod losses;
mod norm_train;
mod optimizers;
mod pool_grad;
mod shape_grad;
mod softmax_grad;

use super::reduce::fold;
use super::{Ctx, Table};
use crate::error::{KernelError, Result};
use crate::geometry::layout::broadcast_strides;
use crate::tensor::{numel, Elem, HostTensor};

/// Every family's table of (op type, kernel) of the `lms` domain.
pub(super) const FAMILIES: &[Table] = &[
    losses::KERNELS,
    activations_grad::KERNELS,
    conv_grad::KERNELS,
    pool_grad::KERNELS,
    norm_train::KERNELS,
    batch_norm_split::KERNELS,
    softmax_grad::KERNELS,
    dropout::KERNELS,
    shape_grad::KERNELS,
    halo::KERNELS,
    optimizers::KERNELS,
];

/// Checks that input `name` has shape `want`.
fn same_shape(t: &HostTensor, want: &[usize], name: &str) -> Result<()> {
    if t.shape == want {
        Ok(())
    } else {
        Err(KernelError::shape(format!("input {name}"), format!("expected shape {want:?}, found {:?}", t.shape)))
    }
}

/// The elements of input `i` (named `name`) as `T`.
fn view<'a, T: Elem>(ctx: &Ctx<'a>, i: usize, name: &str) -> Result<&'a [T]> {
    ctx.input(i, name)?.view::<T>(&format!("input {name}"))
}

/// Float attribute `name` widened to f64: `default` when absent, an error when absent
/// without a default.
fn float_attr(ctx: &Ctx<'_>, name: &str, default: Option<f32>) -> Result<f64> {
    ctx.attrs.float_opt(name)?.or(default).map(f64::from).ok_or_else(|| KernelError::attr(name, "is required"))
}

/// `values` of shape `from` summed in f64 down to shape `to` (numpy unbroadcast: shapes
/// right-aligned, `to` broadcasting to `from`); `what` names the tensor in errors.
fn sum_to<T: Elem>(values: &[T], from: &[usize], to: &[usize], what: &str) -> Result<Vec<f64>> {
    let strides = broadcast_strides(to, from, what)?;
    Ok(fold(values, from, &strides, numel(to), 0.0f64, |a, v| a + v.to_f64()))
}

/// The elements of a float tensor (f32 or f64) widened to f64; `what` names it in errors.
fn floats(t: &HostTensor, what: &str) -> Result<Vec<f64>> {
    super::dispatch_float!(t.dtype(), what, T => Ok(t.view::<T>(what)?.iter().map(|v| v.to_f64()).collect()))
}

/// A tensor of `shape` from f64 values, each rounded once to `T`.
fn from_f64s<T: Elem>(shape: Vec<usize>, values: impl Iterator<Item = f64>) -> Result<HostTensor> {
    HostTensor::from_vec(shape, values.map(T::from_f64).collect::<Vec<T>>())
}

#[cfg(test)]
mod testutil;
