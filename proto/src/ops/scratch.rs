//! Scratch memory: device bytes a node's kernel takes while it runs, besides its inputs
//! and outputs. Each node's scratch is a block of the device arena live at the node's step
//! only ([`crate::contract::placement::lifetimes`]); the compiler's memory simulation counts it in the
//! step's bytes, and the runtime allocates it around the node, so both agree to the byte.
//!
//! A node's block holds [`Part`]s one after another, each at a 256-byte aligned offset
//! ([`layout`]):
//! - the zero-padded copy a convolution with asymmetric pads (explicit, or resolved from
//!   `auto_pad` by the window rule) works on (cuDNN pads symmetrically): X padded for `Conv` and `ConvGradWeight`, dX padded for
//!   `ConvGradData`, in f32 — every halo part of a spatial split has such pads;
//! - the workspace of the cuDNN algorithm the convolution runs with ([`conv_algorithm`]),
//!   fixed here from the shapes, so the original and every rewritten graph run the same
//!   algorithm and a kernel never falls back to another (only backward filter takes one
//!   by default);
//! - `GatherGrad`'s sort keys, `DropoutTrain`'s mask when the node declares none,
//!   `PowGrad`'s gradient over the broadcast shape before it is summed back, and the losses'
//!   per-position values, partial sums and label-error flag;
//! - the partial results of a reduction of few outputs over many elements (the reductions,
//!   `SumTo`, `ConvGradBias`, the global pools, and the sums back of `PowGrad` and
//!   `LayerNormGrad`), the batch normalizations' per-channel statistics, coefficients and
//!   partial sums, `LayerNormalization`'s broadcast Scale and B, `LayerNormGrad`'s
//!   per-column partial sums and its dscale and dbias before they are summed back, and
//!   `ConvTranspose`'s output before its asymmetric pads are cropped.
//!
//! The CUDA kernels take each part by [`Part`] and size it with the same functions
//! ([`reduce_splits`], [`channel_splits`], [`column_splits`]), so rule and kernel agree.

use crate::contract::ops::LMS_DOMAIN;
use crate::contract::program::Program;
use crate::ops::window::Window;
use crate::ops::ShapeResult;
use crate::types::Attrs;

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
    /// A reduction's partial results: [`reduce_splits`] f64 per output, when it has few
    /// outputs over many elements each.
    ReducePartials,
    /// Per-channel f64 statistics of a batch normalization (means, inverse deviations, sums).
    Statistics,
    /// Per-channel f64 coefficients of a batch normalization's affine map (3 per channel).
    Coefficients,
    /// Per-channel partial sums of a batch normalization: [`channel_splits`] pairs of f64
    /// per channel.
    ChannelPartials,
    /// `LayerNormalization`'s or `LayerNormGrad`'s Scale broadcast to the normalized shape (f32).
    Scale,
    /// `LayerNormalization`'s B broadcast to the normalized shape (f32).
    Bias,
    /// `LayerNormGrad`'s dscale over the normalized shape before it is summed back (f32).
    ScaleGrad,
    /// `LayerNormGrad`'s dbias over the normalized shape before it is summed back (f32).
    BiasGrad,
    /// `LayerNormGrad`'s per-column partial sums: [`column_splits`] pairs of f64 per column.
    ColumnPartials,
    /// `ConvTranspose`'s f32 output before its pads are cropped, when they are asymmetric.
    Uncropped,
}

/// Bytes of the partial sums of a total over `n` values ([`Part::Partials`]): the grid
/// the CUDA kernel `sum_partial` runs, one f64 per block.
pub fn total_partials_bytes(n: u64) -> u64 {
    n.div_ceil(256).clamp(1, 1024) * 8
}

/// Splits of a reduction of `outputs` outputs over `elements` elements each when it takes
/// partial results (few outputs, many elements: each output's elements are split among
/// warps, then summed in a second pass), else `None`. Its [`Part::ReducePartials`] hold
/// `outputs · splits` f64.
pub fn reduce_splits(outputs: u64, elements: u64) -> Option<u64> {
    (outputs > 0 && outputs < 1024 && elements > 1 << 16).then(|| (2048 / outputs).clamp(1, elements / 4096))
}

/// Bytes of the partial results of a reduction of `input` down to `output` (shapes):
/// [`reduce_splits`] of the output count and the elements each output sums.
fn reduce_partials_bytes(input: &[usize], output: &[usize]) -> u64 {
    let outputs = elements(output);
    match outputs {
        0 => 0,
        _ => reduce_splits(outputs, elements(input) / outputs).map_or(0, |splits| outputs * splits * 8),
    }
}

/// Splits of the per-channel sums over X [n, c, s...] with `elements` (n · s) values per
/// channel; its [`Part::ChannelPartials`] hold `c · splits` pairs of f64.
pub fn channel_splits(channels: u64, elements: u64) -> u64 {
    (1056 / channels.max(1)).clamp(1, elements.div_ceil(4096).max(1))
}

/// Splits of `LayerNormGrad`'s per-column sums over `rows` rows of `columns` values; its
/// [`Part::ColumnPartials`] hold `columns · splits` pairs of f64.
pub fn column_splits(rows: u64, columns: u64) -> u64 {
    rows.div_ceil(256).clamp(1, (4096 / columns.max(1)).max(1))
}

/// Elements of `shape`.
fn elements(shape: &[usize]) -> u64 {
    shape.iter().fold(1u64, |n, &d| n.saturating_mul(d as u64))
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

impl ConvDirection {
    /// The direction in words: `forward`, `backward data`, `backward filter`.
    pub const fn name(self) -> &'static str {
        match self {
            ConvDirection::Forward => "forward",
            ConvDirection::BackwardData => "backward data",
            ConvDirection::BackwardFilter => "backward filter",
        }
    }
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

/// The alignment each copy in a backward-filter workspace is rounded up to, and the
/// slack added once (cuDNN asked for 16 to 32 bytes over the three copies).
pub const WORKSPACE_ALIGN: u64 = 256;

/// Bytes of an f32 tensor of `shape`.
fn f32_bytes(shape: &[usize]) -> u64 {
    shape.iter().fold(F32_BYTES, |b, &d| b.saturating_mul(d as u64))
}

/// `bytes` rounded up to [`WORKSPACE_ALIGN`].
fn aligned(bytes: u64) -> u64 {
    bytes.div_ceil(WORKSPACE_ALIGN).saturating_mul(WORKSPACE_ALIGN)
}

/// The algorithm and workspace of a convolution node with op `op` in `domain`, input
/// shapes `inputs` and output shapes `outputs`; `None` for other ops. The conservative
/// default, a formula of the shapes: [`default_algorithm`], with no workspace forward and
/// backward data (implicit GEMM takes none); backward filter takes a copy of X, of dY and
/// of dW, each rounded up to [`WORKSPACE_ALIGN`] bytes, and one more [`WORKSPACE_ALIGN`].
/// That is what cuDNN 9.14's `ALGO_1` asked for on an H100, to within 32 bytes, from 9 KB
/// (a 3×3 convolution of 16 channels at batch 4) to 261 MB (a 1×1 convolution of 2048
/// channels at batch 512): a copy of both operands and of the result. A library that
/// needs more than planned is an error at run time, never a fallback.
pub fn conv_algorithm(
    domain: &str,
    op: &str,
    attrs: &Attrs,
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
        ConvDirection::BackwardFilter => {
            let (dy, x) = (input(0)?, input(1)?);
            // cuDNN reads X from its padded copy when the pads are asymmetric.
            let padded = match x.len() == w.len() {
                true => asymmetric_padded_bytes(elements(&x[..2]), Window::conv(attrs, &x[2..], &w[2..])),
                false => 0,
            };
            let x_bytes = aligned(padded.max(f32_bytes(x)));
            [dy, w]
                .iter()
                .fold(WORKSPACE_ALIGN + x_bytes, |total, shape| total.saturating_add(aligned(f32_bytes(shape))))
        }
        ConvDirection::Forward | ConvDirection::BackwardData => 0,
    };
    Some(ConvAlgorithm { direction, algorithm: default_algorithm(direction), workspace_bytes })
}

/// The scratch block of a node with op `op` in `domain`, attributes `attrs` (of which
/// the rule reads the convolutions' windows ([`Window`], `auto_pad` resolved) and `axis`), input shapes `inputs`
/// (`None`: an absent optional input) and output shapes `outputs`: empty for ops that take
/// none.
pub fn layout(domain: &str, op: &str, attrs: &Attrs, inputs: &[Option<&[usize]>], outputs: &[&[usize]]) -> Layout {
    let input = |i: usize| inputs.get(i).copied().flatten();
    let output = |i: usize| outputs.get(i).copied();
    // The convolution's X (or dX) and W.
    let padded = match (domain, op) {
        ("" | "ai.onnx", "Conv") => input(0).zip(input(1)),
        (LMS_DOMAIN, "ConvGradWeight") => input(1).zip(output(0)),
        (LMS_DOMAIN, "ConvGradData") => output(0).zip(input(1)),
        _ => None,
    };
    let mut layout = Layout::default();
    if let Some((x, w)) = padded.filter(|(x, w)| x.len() >= 3 && w.len() == x.len()) {
        layout.push(Part::Padded, asymmetric_padded_bytes(elements(&x[..2]), Window::conv(attrs, &x[2..], &w[2..])));
    }
    if let Some(algorithm) = conv_algorithm(domain, op, attrs, inputs, outputs) {
        layout.push(Part::Workspace, algorithm.workspace_bytes);
    }
    // Per channel of X [N, C, ...]: C, and N times the elements of a channel plane.
    let channels = |x: Option<&[usize]>| match x {
        Some([n, c, plane @ ..]) => (*c as u64, (*n as u64).saturating_mul(elements(plane))),
        _ => (0, 0),
    };
    let channel_partials = |x: Option<&[usize]>| {
        let (c, per_channel) = channels(x);
        c.saturating_mul(channel_splits(c, per_channel)).saturating_mul(16)
    };
    let reduced = |layout: &mut Layout| {
        if let (Some(x), Some(y)) = (input(0), output(0)) {
            layout.push(Part::ReducePartials, reduce_partials_bytes(x, y));
        }
    };
    match (domain, op) {
        ("" | "ai.onnx", "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin")
        | ("" | "ai.onnx", "GlobalAveragePool" | "GlobalMaxPool")
        | (LMS_DOMAIN, "SumTo" | "ConvGradBias") => reduced(&mut layout),
        ("" | "ai.onnx", "BatchNormalization") | (LMS_DOMAIN, "BatchNormApply") => {
            layout.push(Part::Coefficients, channels(input(0)).0.saturating_mul(24));
        }
        (LMS_DOMAIN, "BatchNormTrain") => {
            layout.push(Part::Statistics, channels(input(0)).0.saturating_mul(32));
            layout.push(Part::Coefficients, channels(input(0)).0.saturating_mul(24));
            layout.push(Part::ChannelPartials, channel_partials(input(0)));
        }
        (LMS_DOMAIN, "BatchNormGrad") => {
            layout.push(Part::Statistics, channels(input(1)).0.saturating_mul(32));
            layout.push(Part::ChannelPartials, channel_partials(input(1)));
        }
        (LMS_DOMAIN, "BatchNormStatistics") => {
            layout.push(Part::Statistics, channels(input(0)).0.saturating_mul(16));
            layout.push(Part::ChannelPartials, channel_partials(input(0)));
        }
        (LMS_DOMAIN, "BatchNormGradSums") => {
            layout.push(Part::Statistics, channels(input(1)).0.saturating_mul(16));
            layout.push(Part::ChannelPartials, channel_partials(input(1)));
        }
        (LMS_DOMAIN, "BatchNormGradData") => layout.push(Part::Statistics, channels(input(1)).0.saturating_mul(16)),
        (LMS_DOMAIN, "BatchNormMerge") => {
            let c = input(0).and_then(|mean| mean.first()).map_or(0, |&c| c as u64);
            layout.push(Part::Statistics, c.saturating_mul(24));
        }
        ("" | "ai.onnx", "LayerNormalization") => {
            if let Some((_, dims)) = input(0).and_then(|x| normalized(attrs, x)) {
                let n = elements(dims);
                for (i, part) in [(1, Part::Scale), (2, Part::Bias)] {
                    if input(i).is_some_and(|t| elements(t) != n) {
                        layout.push(part, n.saturating_mul(F32_BYTES));
                    }
                }
            }
        }
        (LMS_DOMAIN, "LayerNormGrad") => {
            if let (Some((rows, dims)), Some(scale)) = (input(1).and_then(|x| normalized(attrs, x)), input(2)) {
                let n = elements(dims);
                let broadcast = elements(scale) != n;
                if broadcast {
                    layout.push(Part::Scale, n.saturating_mul(F32_BYTES));
                    layout.push(Part::ScaleGrad, n.saturating_mul(F32_BYTES));
                    layout.push(Part::BiasGrad, n.saturating_mul(F32_BYTES));
                }
                layout.push(Part::ColumnPartials, n.saturating_mul(column_splits(rows, n)).saturating_mul(16));
                if broadcast {
                    layout.push(Part::ReducePartials, reduce_partials_bytes(dims, scale));
                }
            }
        }
        ("" | "ai.onnx", "ConvTranspose") => {
            if let (Some(x), Some(w), Some(y)) = (input(0), input(1), output(0)) {
                if x.len() >= 3 && w.len() == x.len() && y.len() == x.len() {
                    // Seen from the forward convolution, whose input is Y uncropped.
                    let window = Window::conv_transpose(attrs, &x[2..], &w[2..]);
                    layout.push(Part::Uncropped, asymmetric_padded_bytes(elements(&y[..2]), window));
                }
            }
        }
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
                    layout.push(Part::ReducePartials, reduce_partials_bytes(dy, x));
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

/// The rows (elements before `axis`) and the normalized dimensions (from `axis` on) of a
/// layer normalization of X `x` with attribute `axis` (default −1); `None` when the axis
/// is outside X's rank.
fn normalized<'x>(attrs: &Attrs, x: &'x [usize]) -> Option<(u64, &'x [usize])> {
    let axis = attrs.int("axis", -1).ok()?;
    let axis = usize::try_from(if axis < 0 { axis + x.len() as i64 } else { axis }).ok().filter(|&a| a < x.len())?;
    Some((elements(&x[..axis]), &x[axis..]))
}

/// Scratch bytes of a node (the bytes of its [`layout`]); 0 for ops that take none.
pub fn scratch_bytes(domain: &str, op: &str, attrs: &Attrs, inputs: &[Option<&[usize]>], outputs: &[&[usize]]) -> u64 {
    layout(domain, op, attrs, inputs, outputs).bytes()
}

/// Bytes in f32 of `planes` planes (N · C) of a window's input padded by its pads when
/// they are asymmetric on some axis ([`Window::asymmetric_padded_input`]); 0 when they are
/// symmetric or the shapes make no window (the shape rule refuses those).
fn asymmetric_padded_bytes(planes: u64, window: ShapeResult<Window>) -> u64 {
    match window.map(|window| window.asymmetric_padded_input()) {
        Ok(Some(padded)) => planes.saturating_mul(elements(&padded)).saturating_mul(F32_BYTES),
        Ok(None) | Err(_) => 0,
    }
}

/// The scratch block of node `n` of `program`.
pub fn of_node(program: &Program, n: usize) -> Layout {
    let node = program.node(n);
    let attrs = Attrs::without_tensors(&node.attributes);
    let inputs: Vec<Option<&[usize]>> =
        program.node_inputs(n).iter().map(|t| t.map(|t| &program.tensor_type(t).shape[..])).collect();
    let outputs: Vec<&[usize]> = program.node_outputs(n).iter().map(|&t| &program.tensor_type(t).shape[..]).collect();
    layout(&node.domain, &node.op, &attrs, &inputs, &outputs)
}

/// The rule's algorithm ([`conv_algorithm`]) of node `n` of `program` from its shapes;
/// `None` for a node that is not a convolution.
pub fn conv_algorithm_of_node(program: &Program, n: usize) -> Option<ConvAlgorithm> {
    let node = program.node(n);
    let inputs: Vec<Option<&[usize]>> =
        program.node_inputs(n).iter().map(|t| t.map(|t| &program.tensor_type(t).shape[..])).collect();
    let outputs: Vec<&[usize]> = program.node_outputs(n).iter().map(|&t| &program.tensor_type(t).shape[..]).collect();
    conv_algorithm(&node.domain, &node.op, &Attrs::without_tensors(&node.attributes), &inputs, &outputs)
}

/// The algorithm and workspace the plan of `program` records for convolution node `n`
/// (`Plan.conv_algorithms`, which the contract checked against [`conv_algorithm_of_node`]),
/// or the rule's for a file that records none; `None` for a node that is not a convolution.
pub fn planned_conv_algorithm(program: &Program, n: usize) -> Option<ConvAlgorithm> {
    let rule = conv_algorithm_of_node(program, n)?;
    let recorded = program.graph().plan.as_ref().map_or(&[][..], |p| &p.conv_algorithms[..]);
    if recorded.is_empty() {
        return Some(rule);
    }
    let i = recorded.binary_search_by_key(&(n as u32), |r| r.node).ok()?;
    Some(ConvAlgorithm { algorithm: recorded[i].algorithm, workspace_bytes: recorded[i].workspace_bytes, ..rule })
}

/// Scratch bytes of every node of `program`, by node index.
pub fn of_program(program: &Program) -> Vec<u64> {
    (0..program.node_count()).map(|n| of_node(program, n).bytes()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Attr;

    fn pads(pads: &[i64]) -> Attrs {
        Attrs::new().with("pads", Attr::Ints(pads.to_vec()))
    }

    #[test]
    fn asymmetric_pads_take_a_padded_copy_before_the_workspace() {
        let (x, w): (&[usize], &[usize]) = (&[2, 3, 8, 8], &[4, 3, 3, 3]);
        // Backward filter's workspace: copies of X (padded when the pads are), dY and dW.
        let workspace = |x_bytes: u64| 256 + x_bytes + 2 * 4 * 9 * 8 * 4 + (4 * 3 * 3 * 3 * 4u64).div_ceil(256) * 256;
        assert_eq!(layout("", "Conv", &pads(&[1, 1, 1, 1]), &[Some(x), Some(w)], &[&[2, 4, 8, 8]]).bytes(), 0);
        let padded: u64 = 2 * 3 * 9 * 8 * 4;
        let conv = layout("", "Conv", &pads(&[1, 0, 0, 0]), &[Some(x), Some(w)], &[&[2, 4, 8, 7]]);
        assert_eq!(conv.parts, vec![(Part::Padded, 0, padded)], "forward takes no workspace");
        let dy: &[usize] = &[2, 4, 9, 8];
        let grad_weight = layout(LMS_DOMAIN, "ConvGradWeight", &pads(&[1, 0, 1, 1]), &[Some(dy), Some(x)], &[w]);
        let padded: u64 = 2 * 3 * 10 * 9 * 4;
        let at = padded.div_ceil(PART_ALIGN) * PART_ALIGN;
        let workspace_bytes = workspace(padded.div_ceil(256) * 256);
        assert_eq!(
            grad_weight.parts,
            vec![(Part::Padded, 0, padded), (Part::Workspace, at, workspace_bytes)],
            "X padded"
        );
        assert_eq!(grad_weight.bytes(), at + workspace_bytes);
        assert_eq!(grad_weight.part(Part::Workspace), Some((at, workspace_bytes)));
        let symmetric = layout(LMS_DOMAIN, "ConvGradWeight", &pads(&[1, 1, 1, 1]), &[Some(dy), Some(x)], &[w]);
        assert_eq!(symmetric.parts, vec![(Part::Workspace, 0, workspace(2 * 3 * 8 * 8 * 4))]);
        let grad_data = layout(LMS_DOMAIN, "ConvGradData", &pads(&[0, 2, 0, 0]), &[Some(dy), Some(w)], &[x]);
        assert_eq!(grad_data.parts, vec![(Part::Padded, 0, 2 * 3 * 8 * 10 * 4)], "dX padded");
        assert_eq!(scratch_bytes("", "Relu", &pads(&[1, 0, 0, 0]), &[Some(x)], &[x]), 0, "not a convolution");
    }

    #[test]
    fn same_pads_are_resolved_before_they_are_found_asymmetric() {
        let (x, w): (&[usize], &[usize]) = (&[2, 3, 8, 8], &[4, 3, 3, 3]);
        let same = |mode: &str| {
            Attrs::new().with("auto_pad", Attr::String(mode.into())).with("strides", Attr::Ints(vec![2, 2]))
        };
        // Stride 2 over 8: 4 outputs cover (4 − 1)·2 + 3 = 9 positions, 1 pad at one end.
        let padded: u64 = 2 * 3 * 9 * 9 * 4;
        let y: &[usize] = &[2, 4, 4, 4];
        for mode in ["SAME_UPPER", "SAME_LOWER"] {
            let conv = layout("", "Conv", &same(mode), &[Some(x), Some(w)], &[y]);
            assert_eq!(conv.parts, vec![(Part::Padded, 0, padded)], "{mode}");
            let data = layout(LMS_DOMAIN, "ConvGradData", &same(mode), &[Some(y), Some(w)], &[x]);
            assert_eq!(data.parts, vec![(Part::Padded, 0, padded)], "{mode}");
        }
        // Stride 1 pads 1 at each end: symmetric, no copy.
        let even = Attrs::new().with("auto_pad", Attr::String("SAME_UPPER".into()));
        assert_eq!(layout("", "Conv", &even, &[Some(x), Some(w)], &[&[2, 4, 8, 8]]).bytes(), 0);
    }

    #[test]
    fn sort_keys_masks_and_broadcasts_are_sized_by_the_shapes() {
        let (idx, table): (&[usize], &[usize]) = (&[3, 5], &[10, 4]);
        let keys = layout(LMS_DOMAIN, "GatherGrad", &Attrs::new(), &[Some(&[3, 5, 4]), Some(idx)], &[table]);
        assert_eq!(keys.parts, vec![(Part::SortKeys, 0, 16 * 8)], "15 indices padded to 16");
        let empty = layout(LMS_DOMAIN, "GatherGrad", &Attrs::new(), &[Some(&[0, 4]), Some(&[0])], &[table]);
        assert_eq!(empty.bytes(), 0, "no indices, no keys");
        let x: &[usize] = &[2, 3, 4];
        let undeclared = layout(LMS_DOMAIN, "DropoutTrain", &Attrs::new(), &[Some(x)], &[x]);
        assert_eq!(undeclared.parts, vec![(Part::Mask, 0, 24)]);
        assert_eq!(
            layout(LMS_DOMAIN, "DropoutTrain", &Attrs::new(), &[Some(x)], &[x, x]).bytes(),
            0,
            "a declared mask"
        );
        let p: &[usize] = &[5, 1, 1, 1];
        let broadcast = layout(LMS_DOMAIN, "PowGrad", &Attrs::new(), &[Some(&[5, 2, 3, 4]), Some(x), Some(p)], &[x]);
        assert_eq!(broadcast.parts, vec![(Part::Broadcast, 0, 5 * 24 * 4)]);
        assert_eq!(layout(LMS_DOMAIN, "PowGrad", &Attrs::new(), &[Some(x), Some(x), Some(&[1])], &[x]).bytes(), 0);
    }

    #[test]
    fn losses_take_their_rows_partials_and_flag() {
        let (logits, labels): (&[usize], &[usize]) = (&[4, 300, 10], &[4, 300]);
        let xent = layout(LMS_DOMAIN, "SoftmaxCrossEntropy", &Attrs::new(), &[Some(logits), Some(labels)], &[&[]]);
        // 1200 rows: 9600 bytes, then 5 blocks' partials at 9728, the flag at 9984.
        assert_eq!(xent.parts, vec![(Part::Rows, 0, 9600), (Part::Partials, 9728, 5 * 8), (Part::Flag, 9984, 4)]);
        let grad =
            layout(LMS_DOMAIN, "SoftmaxCrossEntropyGrad", &Attrs::new(), &[Some(logits), Some(labels)], &[logits]);
        assert_eq!(grad.parts, vec![(Part::Flag, 0, 4)]);
        let mse = layout(LMS_DOMAIN, "MeanSquaredError", &Attrs::new(), &[Some(&[1 << 20]), Some(&[1 << 20])], &[&[]]);
        assert_eq!(mse.parts, vec![(Part::Partials, 0, 1024 * 8)], "at most 1024 blocks");
    }

    #[test]
    fn reductions_take_partials_only_for_few_outputs_over_many_elements() {
        let (x, y): (&[usize], &[usize]) = (&[4, 1 << 17], &[4, 1]);
        // 4 outputs of 131,072 elements: min(2048 / 4, 131,072 / 4096) = 32 splits each.
        assert_eq!(reduce_splits(4, 1 << 17), Some(32));
        let sum = layout("", "ReduceSum", &Attrs::new(), &[Some(x)], &[y]);
        assert_eq!(sum.parts, vec![(Part::ReducePartials, 0, 4 * 32 * 8)]);
        assert_eq!(layout(LMS_DOMAIN, "SumTo", &Attrs::new(), &[Some(x)], &[y]), sum);
        assert_eq!(layout("", "ReduceMax", &Attrs::new(), &[Some(&[2048, 1 << 17])], &[&[2048]]).bytes(), 0);
        assert_eq!(layout("", "ReduceMean", &Attrs::new(), &[Some(&[4, 1 << 16])], &[&[4]]).bytes(), 0);
        assert_eq!(layout("", "ReduceMin", &Attrs::new(), &[Some(&[0, 1 << 17])], &[&[0]]).bytes(), 0, "empty");
        let dy: &[usize] = &[1 << 17, 3];
        let pow = layout(LMS_DOMAIN, "PowGrad", &Attrs::new(), &[Some(dy), Some(&[3]), Some(dy)], &[&[3]]);
        let broadcast = 3 << 19;
        assert_eq!(pow.parts, vec![(Part::Broadcast, 0, broadcast), (Part::ReducePartials, broadcast, 3 * 32 * 8)]);
    }

    #[test]
    fn normalizations_take_statistics_coefficients_partials_and_covering_parameters() {
        let x: &[usize] = &[8, 16, 32, 32];
        let c: &[usize] = &[16];
        // 8 · 1024 values per channel: min(1056 / 16, ⌈8192 / 4096⌉) = 2 splits.
        let train = layout(LMS_DOMAIN, "BatchNormTrain", &Attrs::new(), &[Some(x), Some(c), Some(c)], &[x]);
        let expected = vec![
            (Part::Statistics, 0, 16 * 32),
            (Part::Coefficients, 512, 16 * 24),
            (Part::ChannelPartials, 1024, 512),
        ];
        assert_eq!(train.parts, expected);
        let grad = layout(LMS_DOMAIN, "BatchNormGrad", &Attrs::new(), &[Some(x), Some(x), Some(c)], &[x, c, c]);
        assert_eq!(grad.parts, vec![(Part::Statistics, 0, 512), (Part::ChannelPartials, 512, 512)]);
        let infer = layout("", "BatchNormalization", &Attrs::new(), &[Some(x), Some(c)], &[x]);
        assert_eq!(infer.parts, vec![(Part::Coefficients, 0, 384)]);
        let merge = layout(LMS_DOMAIN, "BatchNormMerge", &Attrs::new(), &[Some(c), Some(c), Some(&[3, 16])], &[c]);
        assert_eq!(merge.parts, vec![(Part::Statistics, 0, 384)]);

        let (x, mean): (&[usize], &[usize]) = (&[6, 4, 8], &[6, 4, 1]);
        let inputs = [Some(x), Some(x), Some(&[1][..]), Some(mean), Some(mean)];
        let grad = layout(LMS_DOMAIN, "LayerNormGrad", &Attrs::new(), &inputs, &[x, &[1], &[1]]);
        // 24 rows of 8 columns: one split; dscale and dbias summed from 8 values to 1.
        let expected = vec![
            (Part::Scale, 0, 32),
            (Part::ScaleGrad, 256, 32),
            (Part::BiasGrad, 512, 32),
            (Part::ColumnPartials, 768, 8 * 16),
        ];
        assert_eq!(grad.parts, expected);
        let full = [Some(x), Some(x), Some(&[8][..]), Some(mean), Some(mean)];
        let grad = layout(LMS_DOMAIN, "LayerNormGrad", &Attrs::new(), &full, &[x, &[8], &[8]]);
        assert_eq!(grad.parts, vec![(Part::ColumnPartials, 0, 8 * 16)]);
        let axis = Attrs::new().with("axis", Attr::Int(1));
        let norm = layout("", "LayerNormalization", &axis, &[Some(x), Some(&[1]), Some(&[4, 8])], &[x]);
        assert_eq!(norm.parts, vec![(Part::Scale, 0, 32 * 4)], "B covers [4, 8] already");
        let outside = Attrs::new().with("axis", Attr::Int(3));
        assert_eq!(layout("", "LayerNormalization", &outside, &[Some(x), Some(&[1])], &[x]).bytes(), 0);
    }

    #[test]
    fn a_transposed_convolution_takes_its_uncropped_output_only_for_asymmetric_pads() {
        let (x, w): (&[usize], &[usize]) = (&[1, 4, 5, 5], &[4, 2, 3, 3]);
        let strides = |attrs: Attrs| attrs.with("strides", Attr::Ints(vec![2, 2]));
        // Full size 2·4 + 2 + 1 = 11 on each axis.
        let asymmetric =
            layout("", "ConvTranspose", &strides(pads(&[1, 1, 0, 0])), &[Some(x), Some(w)], &[&[1, 2, 10, 10]]);
        assert_eq!(asymmetric.parts, vec![(Part::Uncropped, 0, 2 * 11 * 11 * 4)]);
        let symmetric =
            layout("", "ConvTranspose", &strides(pads(&[1, 1, 1, 1])), &[Some(x), Some(w)], &[&[1, 2, 9, 9]]);
        assert_eq!(symmetric.bytes(), 0);
        let same = strides(Attrs::new()).with("auto_pad", Attr::String("SAME_UPPER".into()));
        let same = layout("", "ConvTranspose", &same, &[Some(x), Some(w)], &[&[1, 2, 10, 10]]);
        assert_eq!(same.parts, vec![(Part::Uncropped, 0, 2 * 11 * 11 * 4)], "one pad cropped after");
        let uncropped = layout("", "ConvTranspose", &strides(Attrs::new()), &[Some(x), Some(w)], &[&[1, 2, 11, 11]]);
        assert_eq!(uncropped.bytes(), 0, "nothing cropped");
    }

    #[test]
    fn each_direction_has_its_algorithm_and_a_workspace_of_the_shapes() {
        let (x, w, y): (&[usize], &[usize], &[usize]) = (&[5, 6, 9, 9], &[4, 3, 3, 2], &[5, 4, 7, 8]);
        let forward = conv_algorithm("", "Conv", &Attrs::new(), &[Some(x), Some(w)], &[y]).unwrap();
        assert_eq!((forward.direction, forward.algorithm, forward.workspace_bytes), (ConvDirection::Forward, 0, 0));
        let data = conv_algorithm(LMS_DOMAIN, "ConvGradData", &Attrs::new(), &[Some(y), Some(w)], &[x]).unwrap();
        assert_eq!((data.direction, data.algorithm, data.workspace_bytes), (ConvDirection::BackwardData, 1, 0));
        let filter = conv_algorithm(LMS_DOMAIN, "ConvGradWeight", &Attrs::new(), &[Some(y), Some(x)], &[w]).unwrap();
        assert_eq!((filter.direction, filter.algorithm), (ConvDirection::BackwardFilter, 1));
        let aligned = |bytes: u64| bytes.div_ceil(256) * 256;
        let copies = aligned(5 * 4 * 7 * 8 * 4) + aligned(5 * 6 * 9 * 9 * 4) + aligned(4 * 3 * 3 * 2 * 4);
        assert_eq!(filter.workspace_bytes, copies + 256, "a copy of dY, X and dW, and the slack");
        // What cuDNN 9.14 asked for on an H100 (ResNet-50's 1x1 convolution of 2048 to 512
        // channels at 7x7, batch 64), under the rule.
        let (x, dy, dw): (&[usize], &[usize], &[usize]) = (&[64, 2048, 7, 7], &[64, 512, 7, 7], &[512, 2048, 1, 1]);
        let measured =
            conv_algorithm(LMS_DOMAIN, "ConvGradWeight", &Attrs::new(), &[Some(dy), Some(x)], &[dw]).unwrap();
        assert!((36_306_976..36_306_976 + 1024).contains(&measured.workspace_bytes), "{}", measured.workspace_bytes);
        // ConvTranspose of X [5, 4, 7, 8] with W [4, 3, 3, 2]: the backward data of a conv
        // whose output is X.
        assert_eq!(conv_algorithm("", "ConvTranspose", &Attrs::new(), &[Some(y), Some(w)], &[x]), Some(data));
        assert_eq!(conv_algorithm("", "MatMul", &Attrs::new(), &[Some(x), Some(w)], &[y]), None);
        assert_eq!(conv_algorithm("", "Conv", &Attrs::new(), &[Some(x), None], &[y]), None, "no W");
    }
}
