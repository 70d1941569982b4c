//! The work of one op: FLOPs and bytes moved, from the types of its inputs
//! and outputs (and a few attributes). Each op family states its ops' work
//! in a `COSTS` table next to its shape rules; the lms-domain ops (training
//! forms, gradients, optimizers) sit with the family of the op they derive
//! from, and the swap ops are here. The time model turns [`Work`] into
//! seconds with a device profile.
//!
//! Conventions: a multiply-add is 2 FLOPs (the convention of published
//! peaks); elementwise work counts one FLOP per arithmetic step per element,
//! as each family's table says. Bytes read are the inputs' bytes and bytes
//! written the outputs' bytes, one pass each, except where an op touches
//! only part of an input (`Slice`, `Gather`) or none of it (`Shape`).

use crate::types::{Attrs, TensorType};

/// The unit of the device an op's time is bounded by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Engine {
    /// Convolutions and matrix products: the matrix (tensor-core or FP32) peak.
    Matrix,
    /// Everything else that launches a kernel: FP32 peak and memory bandwidth.
    Vector,
    /// No kernel: views of another tensor's memory and resident values.
    View,
    /// A copy from device to host memory (`SwapOut`).
    DeviceToHost,
    /// A copy from host to device memory (`SwapIn`).
    HostToDevice,
}

/// The kernels a measured device profile gives rates for, by size
/// ([`super::kernel_class`] says which an op runs as).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KernelClass {
    /// Matrix products (`MatMul`, `Gemm` and their gradients): FLOP/s.
    MatMul,
    /// Convolutions and their gradients: FLOP/s.
    Conv,
    /// Elementwise, copies and data movement: bytes/s.
    Elementwise,
    /// Reductions, normalisations, pooling: bytes/s.
    Reduction,
    /// Kernels that evaluate an exponential, logarithm, error function or
    /// power per element (activations such as `Erf`, `Tanh`, `Pow` and their
    /// gradients, softmax and its losses): bytes/s.
    Transcendental,
}

/// FLOPs and bytes of one execution of an op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Work {
    pub flops: u64,
    pub bytes_read: u64,
    pub bytes_written: u64,
    pub engine: Engine,
}

/// What a cost rule sees of a node: its op, attributes and the types of
/// its input slots (`None`: omitted) and outputs.
pub struct CostNode<'a> {
    pub op: &'a str,
    pub attrs: &'a Attrs,
    pub inputs: &'a [Option<&'a TensorType>],
    pub outputs: &'a [&'a TensorType],
}

impl CostNode<'_> {
    /// The type of input `index`, when present.
    pub fn input(&self, index: usize) -> Option<&TensorType> {
        self.inputs.get(index).copied().flatten()
    }

    /// Elements of input `index` (0 when absent).
    pub fn in_numel(&self, index: usize) -> u64 {
        self.input(index).map_or(0, |t| t.numel() as u64)
    }

    /// Elements of output `index` (0 when absent).
    pub fn out_numel(&self, index: usize) -> u64 {
        self.outputs.get(index).map_or(0, |t| t.numel() as u64)
    }

    /// Shape of input `index` (empty when absent).
    pub fn in_shape(&self, index: usize) -> &[usize] {
        self.input(index).map_or(&[], |t| &t.shape)
    }

    /// Bytes of every present input.
    pub fn bytes_in(&self) -> u64 {
        self.inputs.iter().flatten().map(|t| t.bytes()).sum()
    }

    /// Bytes of every output.
    pub fn bytes_out(&self) -> u64 {
        self.outputs.iter().map(|t| t.bytes()).sum()
    }

    /// A kernel that reads every input and writes every output once,
    /// doing `flops` FLOPs.
    pub fn streaming(&self, flops: u64) -> Work {
        Work { flops, bytes_read: self.bytes_in(), bytes_written: self.bytes_out(), engine: Engine::Vector }
    }

    /// [`CostNode::streaming`] with `per_element` FLOPs per element of output 0.
    pub fn per_output(&self, per_element: u64) -> Work {
        self.streaming(per_element * self.out_numel(0))
    }

    /// [`CostNode::streaming`] with `per_element` FLOPs per element of input 0.
    pub fn per_input(&self, per_element: u64) -> Work {
        self.streaming(per_element * self.in_numel(0))
    }

    /// A matrix-engine kernel doing `flops` and reading and writing its
    /// operands once.
    pub fn matrix(&self, flops: u64) -> Work {
        Work { engine: Engine::Matrix, ..self.streaming(flops) }
    }

    /// A kernel that reads `bytes_read` (part of its inputs) and writes its
    /// outputs, without arithmetic.
    pub fn partial_copy(&self, bytes_read: u64) -> Work {
        Work { flops: 0, bytes_read, bytes_written: self.bytes_out(), engine: Engine::Vector }
    }
}

/// No kernel runs: the output shares its input's memory, or is resident.
pub fn view(_: &CostNode<'_>) -> Work {
    Work { flops: 0, bytes_read: 0, bytes_written: 0, engine: Engine::View }
}

/// A plain copy of the inputs into the outputs.
pub fn copy(node: &CostNode<'_>) -> Work {
    node.streaming(0)
}

/// A kernel that only writes its outputs (fills, constants).
pub fn fill(node: &CostNode<'_>) -> Work {
    node.partial_copy(0)
}

/// The cost rule of an op.
pub type CostFn = fn(&CostNode<'_>) -> Work;

/// The swap ops (proto/OPS.md, "Memory movement"): one copy over the host link.
pub(super) const COSTS: &[(&str, CostFn)] = &[
    ("SwapOut", |n| Work { engine: Engine::DeviceToHost, ..copy(n) }),
    ("SwapIn", |n| Work { engine: Engine::HostToDevice, ..copy(n) }),
];

/// The ops of this family without an axes map (coupled along every axis), and why.
pub(super) const NO_AXES: &[(&str, &str)] = &[
    ("SwapOut", "a transfer the planner places, never split"),
    ("SwapIn", "a transfer the planner places, never split"),
];

#[cfg(test)]
pub(super) mod testing {
    use super::*;
    use crate::types::DType;

    /// The work of `op` on f32 inputs and outputs of these shapes.
    pub fn work_of(op: &str, attrs: &Attrs, inputs: &[&[usize]], outputs: &[&[usize]]) -> Work {
        let f32s = |shapes: &[&[usize]]| -> Vec<TensorType> {
            shapes.iter().map(|s| TensorType::new(DType::F32, s.to_vec())).collect()
        };
        let (ins, outs) = (f32s(inputs), f32s(outputs));
        let in_refs: Vec<Option<&TensorType>> = ins.iter().map(Some).collect();
        let out_refs: Vec<&TensorType> = outs.iter().collect();
        let node = CostNode { op, attrs, inputs: &in_refs, outputs: &out_refs };
        super::super::work(&node).unwrap_or_else(|| panic!("{op} has no cost rule"))
    }

    /// (flops, bytes read, bytes written) of `op` on f32 tensors.
    pub fn counts(op: &str, inputs: &[&[usize]], outputs: &[&[usize]]) -> (u64, u64, u64) {
        let w = work_of(op, &Attrs::new(), inputs, outputs);
        (w.flops, w.bytes_read, w.bytes_written)
    }
}

#[cfg(test)]
mod tests {
    use super::testing::work_of;
    use super::*;

    #[test]
    fn swaps_copy_their_bytes_over_the_host_link() {
        let out = work_of("SwapOut", &Attrs::new(), &[&[256, 64, 56, 56]], &[&[256, 64, 56, 56]]);
        let bytes = 256 * 64 * 56 * 56 * 4;
        assert_eq!(out, Work { flops: 0, bytes_read: bytes, bytes_written: bytes, engine: Engine::DeviceToHost });
        assert_eq!(work_of("SwapIn", &Attrs::new(), &[&[3]], &[&[3]]).engine, Engine::HostToDevice);
    }
}
