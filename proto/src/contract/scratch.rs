//! Scratch memory: device bytes a node's kernel takes while it runs, besides its inputs
//! and outputs. Each node's scratch is a block of the device arena live at the node's step
//! only ([`super::placement::lifetimes`]); the compiler's memory simulation counts it in the
//! step's bytes, and the runtime allocates it around the node, so both agree to the byte.
//!
//! A node's block holds [`Part`]s one after another, each at a 256-byte aligned offset
//! ([`layout`]):
//! - the zero-padded copy a convolution with asymmetric pads works on (cuDNN pads
//!   symmetrically): X padded for `Conv` and `ConvGradWeight`, dX padded for
//!   `ConvGradData`, in f32 — every halo part of a spatial split has such pads;
//! - the workspace of the cuDNN algorithm the convolution runs with ([`conv_algorithm`]),
//!   fixed here from the shapes, so the original and every rewritten graph run the same
//!   algorithm and a kernel never falls back to another (only backward filter takes one
//!   by default);
//! - `GatherGrad`'s sort keys, `DropoutTrain`'s mask when the node declares none,
//!   `PowGrad`'s gradient over the broadcast shape before it is summed back, and the losses'
//!   per-position values, partial sums and label-error flag.

use super::ops::LMS_DOMAIN;
use super::program::Program;
use crate::lms::attribute::Value;

/// Alignment of each part of a scratch block (cuDNN's and the kernels' widest access).
pub const PART_ALIGN: u64 = 256;

/// What a part of a node's scratch block holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The zero-padded f32 copy of a convolution's X (or dX) for asymmetric pads.
    Padded,
    /// The workspace of the convolution's cuDNN algorithm.
    Workspace,
    /// `GatherGrad`'s sort keys: 8 bytes per index, padded to a power of two (the bitonic sort).
    SortKeys,
    /// `DropoutTrain`'s mask when the node declares none: one bool per element of X.
    Mask,
    /// `PowGrad`'s gradient over the broadcast of X and P (f32, dY's shape), before it is
    /// summed back to X's shape, when the two differ.
    Broadcast,
    /// `SoftmaxCrossEntropy`'s loss per position (f64).
    Rows,
    /// The partial sums of a total over n values: one f64 per block of 256, at most 1024
    /// blocks (`SoftmaxCrossEntropy` over its positions, `MeanSquaredError` over its elements).
    Partials,
    /// The 4-byte flag a kernel sets on a label outside its classes
    /// (`SoftmaxCrossEntropy`, `SoftmaxCrossEntropyGrad`).
    Flag,
}

/// Bytes of the partial sums of a total over `n` values ([`Part::Partials`]): the grid
/// the CUDA kernel `sum_partial` runs, one f64 per block.
pub fn total_partials_bytes(n: u64) -> u64 {
    n.div_ceil(256).clamp(1, 1024) * 8
}

/// A node's scratch block: its parts, each at an offset in the block.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// (part, offset in the block, bytes), in block order; parts of 0 bytes are left out.
    pub parts: Vec<(Part, u64, u64)>,
}

impl Layout {
    fn push(&mut self, part: Part, bytes: u64) {
        if bytes > 0 {
            let offset = self.bytes().div_ceil(PART_ALIGN).saturating_mul(PART_ALIGN);
            self.parts.push((part, offset, bytes));
        }
    }

    /// The block's bytes: the end of its last part.
    pub fn bytes(&self) -> u64 {
        self.parts.last().map_or(0, |&(_, offset, bytes)| offset.saturating_add(bytes))
    }

    /// (offset, bytes) of `part`, when the block holds it.
    pub fn part(&self, part: Part) -> Option<(u64, u64)> {
        self.parts.iter().find(|p| p.0 == part).map(|&(_, offset, bytes)| (offset, bytes))
    }
}

/// Which of cuDNN's three convolutions a node runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvDirection {
    /// X, W → Y (`Conv`).
    Forward,
    /// W, dY → dX (`ConvGradData`, and `ConvTranspose`, the backward data of the forward
    /// convolution whose output is its X).
    BackwardData,
    /// X, dY → dW (`ConvGradWeight`).
    BackwardFilter,
}

/// The cuDNN algorithm a convolution node runs with and the workspace the plan gives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvAlgorithm {
    /// The direction.
    pub direction: ConvDirection,
    /// cuDNN's algorithm number in that direction (`cudnnConvolutionFwdAlgo_t`,
    /// `cudnnConvolutionBwdDataAlgo_t`, `cudnnConvolutionBwdFilterAlgo_t`).
    pub algorithm: i32,
    /// Workspace bytes planned for it.
    pub workspace_bytes: u64,
}

/// The default algorithms, deterministic in cuDNN: forward `IMPLICIT_GEMM` (0), backward
/// data `ALGO_1` (1), backward filter `ALGO_1` (1).
pub const fn default_algorithm(direction: ConvDirection) -> i32 {
    match direction {
        ConvDirection::Forward => 0,
        ConvDirection::BackwardData | ConvDirection::BackwardFilter => 1,
    }
}

/// Bytes per element of the convolutions' f32 data.
const F32_BYTES: u64 = 4;

/// The algorithm and workspace of a convolution node with op `op` in `domain`, input
/// shapes `inputs` and output shapes `outputs`; `None` for other ops. The conservative
/// default, a formula of the shapes: [`default_algorithm`], with no workspace forward and
/// backward data (implicit GEMM takes none) and one copy of dW (f32: output channels ×
/// input channels per group × kernel elements) backward filter, for the partial sums
/// of its reduction over the batch. A library that needs more than planned is an error
/// at run time, never a fallback.
pub fn conv_algorithm(
    domain: &str,
    op: &str,
    inputs: &[Option<&[usize]>],
    outputs: &[&[usize]],
) -> Option<ConvAlgorithm> {
    let input = |i: usize| inputs.get(i).copied().flatten();
    // W [K, C/group, kernel...] in the forward convolution's terms.
    let (direction, w) = match (domain, op) {
        ("" | "ai.onnx", "Conv") => (ConvDirection::Forward, input(1)?),
        ("" | "ai.onnx", "ConvTranspose") => (ConvDirection::BackwardData, input(1)?),
        (LMS_DOMAIN, "ConvGradData") => (ConvDirection::BackwardData, input(1)?),
        (LMS_DOMAIN, "ConvGradWeight") => (ConvDirection::BackwardFilter, *outputs.first()?),
        _ => return None,
    };
    if w.len() < 3 {
        return None;
    }
    let workspace_bytes = match direction {
        ConvDirection::BackwardFilter => w.iter().fold(F32_BYTES, |b, &d| b.saturating_mul(d as u64)),
        ConvDirection::Forward | ConvDirection::BackwardData => 0,
    };
    Some(ConvAlgorithm { direction, algorithm: default_algorithm(direction), workspace_bytes })
}

/// The scratch block of a node with op `op` in `domain`, explicit `pads` (ONNX order:
/// every spatial axis's begin, then every end), input shapes `inputs` (`None`: an absent
/// optional input) and output shapes `outputs`: empty for ops that take none.
pub fn layout(
    domain: &str,
    op: &str,
    pads: Option<&[i64]>,
    inputs: &[Option<&[usize]>],
    outputs: &[&[usize]],
) -> Layout {
    let padded = match (domain, op) {
        ("" | "ai.onnx", "Conv") => inputs.first().copied().flatten(),
        (LMS_DOMAIN, "ConvGradWeight") => inputs.get(1).copied().flatten(),
        (LMS_DOMAIN, "ConvGradData") => outputs.first().copied(),
        _ => None,
    };
    let mut layout = Layout::default();
    if let (Some(shape), Some(pads)) = (padded, pads) {
        layout.push(Part::Padded, padded_copy_bytes(shape, pads));
    }
    if let Some(algorithm) = conv_algorithm(domain, op, inputs, outputs) {
        layout.push(Part::Workspace, algorithm.workspace_bytes);
    }
    let elements = |shape: &[usize]| shape.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64));
    let input = |i: usize| inputs.get(i).copied().flatten();
    match (domain, op) {
        (LMS_DOMAIN, "GatherGrad") => {
            if let Some(indices) = input(1).map(elements).filter(|&n| n > 0) {
                layout.push(Part::SortKeys, indices.checked_next_power_of_two().unwrap_or(u64::MAX).saturating_mul(8));
            }
        }
        (LMS_DOMAIN, "DropoutTrain") if outputs.len() == 1 => {
            layout.push(Part::Mask, input(0).map_or(0, elements));
        }
        (LMS_DOMAIN, "PowGrad") => {
            if let (Some(dy), Some(x)) = (input(0), input(1)) {
                if dy != x {
                    layout.push(Part::Broadcast, elements(dy).saturating_mul(F32_BYTES));
                }
            }
        }
        (LMS_DOMAIN, "SoftmaxCrossEntropy") => {
            let rows = input(0).and_then(|logits| logits.split_last()).map_or(0, |(_, rows)| elements(rows));
            layout.push(Part::Rows, rows.saturating_mul(8));
            layout.push(Part::Partials, total_partials_bytes(rows));
            layout.push(Part::Flag, 4);
        }
        (LMS_DOMAIN, "SoftmaxCrossEntropyGrad") => layout.push(Part::Flag, 4),
        (LMS_DOMAIN, "MeanSquaredError") => {
            layout.push(Part::Partials, total_partials_bytes(input(0).map_or(0, elements)))
        }
        _ => {}
    }
    layout
}

/// Scratch bytes of a node (the bytes of its [`layout`]); 0 for ops that take none.
pub fn scratch_bytes(
    domain: &str,
    op: &str,
    pads: Option<&[i64]>,
    inputs: &[Option<&[usize]>],
    outputs: &[&[usize]],
) -> u64 {
    layout(domain, op, pads, inputs, outputs).bytes()
}

/// Bytes of `shape` (N, C, spatial axes...) padded by `pads` in f32 when the pads are
/// asymmetric on some axis; 0 when they are symmetric or do not fit the shape.
fn padded_copy_bytes(shape: &[usize], pads: &[i64]) -> u64 {
    let spatial = shape.len().saturating_sub(2);
    if shape.len() < 3 || pads.len() != 2 * spatial || pads.iter().any(|&p| p < 0) {
        return 0;
    }
    let (begin, end) = pads.split_at(spatial);
    if begin == end {
        return 0;
    }
    let mut elements = (shape[0] * shape[1]) as u64;
    for d in 0..spatial {
        elements = elements.saturating_mul(shape[2 + d] as u64 + begin[d] as u64 + end[d] as u64);
    }
    elements.saturating_mul(F32_BYTES)
}

/// The scratch block of node `n` of `program`.
pub fn of_node(program: &Program, n: usize) -> Layout {
    let node = program.node(n);
    let pads = node.attributes.iter().find(|a| a.name == "pads").and_then(|a| match &a.value {
        Some(Value::Ints(ints)) => Some(&ints.values[..]),
        _ => None,
    });
    let inputs: Vec<Option<&[usize]>> =
        program.node_inputs(n).iter().map(|t| t.map(|t| &program.tensor_type(t).shape[..])).collect();
    let outputs: Vec<&[usize]> = program.node_outputs(n).iter().map(|&t| &program.tensor_type(t).shape[..]).collect();
    layout(&node.domain, &node.op, pads, &inputs, &outputs)
}

/// Scratch bytes of every node of `program`, by node index.
pub fn of_program(program: &Program) -> Vec<u64> {
    (0..program.node_count()).map(|n| of_node(program, n).bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn asymmetric_pads_take_a_padded_copy_before_the_workspace() {
        let (x, w): (&[usize], &[usize]) = (&[2, 3, 8, 8], &[4, 3, 3, 3]);
        let dw_bytes = 4 * 3 * 3 * 3 * 4;
        assert_eq!(layout("", "Conv", Some(&[1, 1, 1, 1]), &[Some(x), Some(w)], &[&[2, 4, 8, 8]]).bytes(), 0);
        let padded: u64 = 2 * 3 * 9 * 8 * 4;
        let conv = layout("", "Conv", Some(&[1, 0, 0, 0]), &[Some(x), Some(w)], &[&[2, 4, 8, 7]]);
        assert_eq!(conv.parts, vec![(Part::Padded, 0, padded)], "forward takes no workspace");
        let dy: &[usize] = &[2, 4, 9, 8];
        let grad_weight = layout(LMS_DOMAIN, "ConvGradWeight", Some(&[1, 0, 1, 1]), &[Some(dy), Some(x)], &[w]);
        let padded: u64 = 2 * 3 * 10 * 9 * 4;
        let at = padded.div_ceil(PART_ALIGN) * PART_ALIGN;
        assert_eq!(grad_weight.parts, vec![(Part::Padded, 0, padded), (Part::Workspace, at, dw_bytes)], "X padded");
        assert_eq!(grad_weight.bytes(), at + dw_bytes);
        assert_eq!(grad_weight.part(Part::Workspace), Some((at, dw_bytes)));
        let symmetric = layout(LMS_DOMAIN, "ConvGradWeight", Some(&[1, 1, 1, 1]), &[Some(dy), Some(x)], &[w]);
        assert_eq!(symmetric.parts, vec![(Part::Workspace, 0, dw_bytes)]);
        let grad_data = layout(LMS_DOMAIN, "ConvGradData", Some(&[0, 2, 0, 0]), &[Some(dy), Some(w)], &[x]);
        assert_eq!(grad_data.parts, vec![(Part::Padded, 0, 2 * 3 * 8 * 10 * 4)], "dX padded");
        assert_eq!(scratch_bytes("", "Relu", Some(&[1, 0, 0, 0]), &[Some(x)], &[x]), 0, "not a convolution");
    }

    #[test]
    fn sort_keys_masks_and_broadcasts_are_sized_by_the_shapes() {
        let (idx, table): (&[usize], &[usize]) = (&[3, 5], &[10, 4]);
        let keys = layout(LMS_DOMAIN, "GatherGrad", None, &[Some(&[3, 5, 4]), Some(idx)], &[table]);
        assert_eq!(keys.parts, vec![(Part::SortKeys, 0, 16 * 8)], "15 indices padded to 16");
        let empty = layout(LMS_DOMAIN, "GatherGrad", None, &[Some(&[0, 4]), Some(&[0])], &[table]);
        assert_eq!(empty.bytes(), 0, "no indices, no keys");
        let x: &[usize] = &[2, 3, 4];
        let undeclared = layout(LMS_DOMAIN, "DropoutTrain", None, &[Some(x)], &[x]);
        assert_eq!(undeclared.parts, vec![(Part::Mask, 0, 24)]);
        assert_eq!(layout(LMS_DOMAIN, "DropoutTrain", None, &[Some(x)], &[x, x]).bytes(), 0, "a declared mask");
        let p: &[usize] = &[5, 1, 1, 1];
        let broadcast = layout(LMS_DOMAIN, "PowGrad", None, &[Some(&[5, 2, 3, 4]), Some(x), Some(p)], &[x]);
        assert_eq!(broadcast.parts, vec![(Part::Broadcast, 0, 5 * 24 * 4)]);
        assert_eq!(layout(LMS_DOMAIN, "PowGrad", None, &[Some(x), Some(x), Some(&[1])], &[x]).bytes(), 0);
    }

    #[test]
    fn losses_take_their_rows_partials_and_flag() {
        let (logits, labels): (&[usize], &[usize]) = (&[4, 300, 10], &[4, 300]);
        let xent = layout(LMS_DOMAIN, "SoftmaxCrossEntropy", None, &[Some(logits), Some(labels)], &[&[]]);
        // 1200 rows: 9600 bytes, then 5 blocks' partials at 9728, the flag at 9984.
        assert_eq!(xent.parts, vec![(Part::Rows, 0, 9600), (Part::Partials, 9728, 5 * 8), (Part::Flag, 9984, 4)]);
        let grad = layout(LMS_DOMAIN, "SoftmaxCrossEntropyGrad", None, &[Some(logits), Some(labels)], &[logits]);
        assert_eq!(grad.parts, vec![(Part::Flag, 0, 4)]);
        let mse = layout(LMS_DOMAIN, "MeanSquaredError", None, &[Some(&[1 << 20]), Some(&[1 << 20])], &[&[]]);
        assert_eq!(mse.parts, vec![(Part::Partials, 0, 1024 * 8)], "at most 1024 blocks");
    }

    #[test]
    fn each_direction_has_its_algorithm_and_a_workspace_of_the_shapes() {
        let (x, w, y): (&[usize], &[usize], &[usize]) = (&[5, 6, 9, 9], &[4, 3, 3, 2], &[5, 4, 7, 8]);
        let forward = conv_algorithm("", "Conv", &[Some(x), Some(w)], &[y]).unwrap();
        assert_eq!((forward.direction, forward.algorithm, forward.workspace_bytes), (ConvDirection::Forward, 0, 0));
        let data = conv_algorithm(LMS_DOMAIN, "ConvGradData", &[Some(y), Some(w)], &[x]).unwrap();
        assert_eq!((data.direction, data.algorithm, data.workspace_bytes), (ConvDirection::BackwardData, 1, 0));
        let filter = conv_algorithm(LMS_DOMAIN, "ConvGradWeight", &[Some(y), Some(x)], &[w]).unwrap();
        assert_eq!((filter.direction, filter.algorithm), (ConvDirection::BackwardFilter, 1));
        assert_eq!(filter.workspace_bytes, 4 * 3 * 3 * 2 * 4, "one dW");
        // ConvTranspose of X [5, 4, 7, 8] with W [4, 3, 3, 2]: the backward data of a conv
        // whose output is X.
        assert_eq!(conv_algorithm("", "ConvTranspose", &[Some(y), Some(w)], &[x]), Some(data));
        assert_eq!(conv_algorithm("", "MatMul", &[Some(x), Some(w)], &[y]), None);
        assert_eq!(conv_algorithm("", "Conv", &[Some(x), None], &[y]), None, "no W");
    }
}
