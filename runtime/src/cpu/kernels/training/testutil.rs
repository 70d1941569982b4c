//! Helpers for the training kernels' tests: running lms ops and finite differences.

pub(crate) use super::super::testutil::*;
use crate::attrs::Attrs;
use crate::backend::KernelContext;
use crate::error::Result;
use crate::tensor::HostTensor;
use lms_proto::lms::{Attribute, DType};

/// Runs lms op `op` with all inputs present, at step 0 of a run seeded 0.
pub fn run_lms(
    op: &str,
    attrs: &[Attribute],
    inputs: &[&HostTensor],
    outputs: &[(DType, Vec<usize>)],
) -> Result<Vec<HostTensor>> {
    run_lms_at(op, attrs, inputs, outputs, &KernelContext::default())
}

/// Runs lms op `op` with all inputs present in the given run context.
pub fn run_lms_at(
    op: &str,
    attrs: &[Attribute],
    inputs: &[&HostTensor],
    outputs: &[(DType, Vec<usize>)],
    exec: &KernelContext,
) -> Result<Vec<HostTensor>> {
    let slots: Vec<Option<&HostTensor>> = inputs.iter().map(|t| Some(*t)).collect();
    super::super::lms(op, &Attrs::new(attrs), &slots, outputs, exec)
}

/// Runs a single-output f32 lms op and returns its elements; panics on error.
pub fn lms1(op: &str, attrs: &[Attribute], inputs: &[&HostTensor], shape: &[usize]) -> Vec<f32> {
    let out = run_lms(op, attrs, inputs, &[(DType::DtypeF32, shape.to_vec())]).unwrap_or_else(|e| panic!("{e}"));
    f32s(&out[0])
}

/// The f64 copy of an f32 tensor.
pub fn to_f64(t: &HostTensor) -> HostTensor {
    let v: Vec<f64> = f32s(t).iter().map(|&v| f64::from(v)).collect();
    tensor(&t.shape, v)
}

/// Σ yᵢ·rᵢ of an f64 tensor and f32 weights: a scalar loss whose gradient w.r.t. y is r.
pub fn dot(y: &HostTensor, r: &HostTensor) -> f64 {
    let y = y.as_f64_test();
    y.iter().zip(f32s(r)).map(|(a, b)| a * f64::from(b)).sum()
}

/// Central differences of `f` at `x` (f32 values, evaluated as f64 tensors), step 1e-4.
pub fn fd_grad(x: &HostTensor, f: impl Fn(&HostTensor) -> f64) -> Vec<f32> {
    const H: f64 = 1e-4;
    let base: Vec<f64> = f32s(x).iter().map(|&v| f64::from(v)).collect();
    (0..base.len())
        .map(|i| {
            let at = |d: f64| {
                let mut v = base.clone();
                v[i] += d;
                f(&tensor(&x.shape, v))
            };
            ((at(H) - at(-H)) / (2.0 * H)) as f32
        })
        .collect()
}

/// Asserts `|got − want| ≤ tol·max(|want|, 1)` elementwise.
pub fn assert_near(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * w.abs().max(1.0), "element {i}: got {g}, want {w}");
    }
}

/// f64 elements of a test tensor.
pub trait F64Test {
    /// The elements; panics on another dtype.
    fn as_f64_test(&self) -> Vec<f64>;
}

impl F64Test for HostTensor {
    fn as_f64_test(&self) -> Vec<f64> {
        self.view::<f64>("test").expect("f64 tensor").to_vec()
    }
}
