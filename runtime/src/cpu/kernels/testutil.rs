//! Helpers for the kernels' tests.

pub(crate) use crate::attrs::tests::{float, int, ints, string};
use crate::attrs::Attrs;
use crate::error::Result;
use crate::tensor::{Elem, HostTensor};
use lms_proto::lms::{Attribute, DType};

/// Relative tolerance of the numerical tests (absolute below magnitude 1).
pub const RTOL: f32 = 1e-5;

/// A tensor from a shape and elements; panics on a size mismatch (tests only).
pub fn tensor<T: Elem>(shape: &[usize], data: Vec<T>) -> HostTensor {
    HostTensor::from_vec(shape.to_vec(), data).expect("test tensor")
}

/// Runs `op` with all inputs present.
pub fn run(
    op: &str,
    opset: i64,
    attrs: &[Attribute],
    inputs: &[&HostTensor],
    outputs: &[(DType, Vec<usize>)],
) -> Result<Vec<HostTensor>> {
    let slots: Vec<Option<&HostTensor>> = inputs.iter().map(|t| Some(*t)).collect();
    run_opt(op, opset, attrs, &slots, outputs)
}

/// Runs `op` with optional input slots.
pub fn run_opt(
    op: &str,
    opset: i64,
    attrs: &[Attribute],
    inputs: &[Option<&HostTensor>],
    outputs: &[(DType, Vec<usize>)],
) -> Result<Vec<HostTensor>> {
    super::forward(op, opset, &Attrs::new(attrs), inputs, outputs)
}

/// Runs a single-output op at opset 17 and returns its output; panics on error.
pub fn run1(op: &str, attrs: &[Attribute], inputs: &[&HostTensor], dtype: DType, shape: &[usize]) -> HostTensor {
    let mut out = run(op, 17, attrs, inputs, &[(dtype, shape.to_vec())]).unwrap_or_else(|e| panic!("{e}"));
    out.remove(0)
}

/// The f32 elements of a tensor; panics on another dtype.
pub fn f32s(t: &HostTensor) -> Vec<f32> {
    t.as_f32("test").expect("f32 tensor").to_vec()
}

/// Asserts `|got - want| <= RTOL * max(|want|, 1)` elementwise.
pub fn assert_close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len(), "lengths differ");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let tol = RTOL * w.abs().max(1.0);
        assert!((g - w).abs() <= tol, "element {i}: got {g}, want {w}");
    }
}

/// A small deterministic pseudo-random generator (xorshift64*).
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1))
    }

    /// A float uniform in [-1, 1).
    pub fn next_f32(&mut self) -> f32 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let bits = self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 40;
        bits as f32 / (1u64 << 23) as f32 - 1.0
    }

    /// A random f32 tensor of `shape`.
    pub fn tensor(&mut self, shape: &[usize]) -> HostTensor {
        let n = shape.iter().product();
        tensor(shape, (0..n).map(|_| self.next_f32()).collect())
    }
}
