//! Split rules: along which dimensions an op can run as p micro-ops on
//! parts of its tensors, and the micro-ops' shapes (TSPLIT §III-B, Split-CNN
//! §3). An op's concatenating splits come from its axes map (`super::axes`); what the
//! map cannot state is the op's extension of it, in its family's `SPLIT_EXTENSIONS`
//! table beside its `OPS`, `COSTS` and `AXES` tables ([`SplitExtension`]); [`rules`]
//! joins the two.
//!
//! Three ways to combine parts:
//! - **Concat**: each part makes a slice of every output along one axis
//!   (batch, output channel); the slices are concatenated. Bit-identical.
//! - **Sum**: each part makes a partial result of the whole output from
//!   slices of its inputs along a reduced axis (reduction channel, weight
//!   gradients over the batch); the partial results are added. It reorders a
//!   sum: equal within [`SUM_TOLERANCE`].
//! - **Halo**: a windowed op along a spatial axis; each part reads an input
//!   window that overlaps its neighbours' by the kernel's reach and pads only
//!   where the whole input is padded ([`halo_parts`]). Forward parts are
//!   concatenated, bit-identical. The gradients of a windowed op split along
//!   the spatial axis of their output gradient: the input gradients of the
//!   parts are windows of the whole one, added where they overlap
//!   ([`HaloOutput::OverlapAdd`]); weight gradients are partial results,
//!   summed ([`HaloOutput::Sum`]); both within [`SUM_TOLERANCE`].
//! - **Statistics**: an op that reduces over the batch to per-channel
//!   statistics and then uses them on every sample (batch normalization and
//!   its gradient): each part computes its slice's statistics, one merge
//!   combines them into the whole batch's (counts, means and M2 by Chan et
//!   al.'s parallel variance; gradient sums added), and each part makes its
//!   slice of output 0 from the merged statistics; the other outputs come from
//!   the merge. Within [`SUM_TOLERANCE`].
//!
//! An op that divides by a count over the split axis (the softmax
//! cross-entropy loss and its gradient) runs its parts with the whole op's
//! count ([`whole_count_attrs`]): the gradient's slices are bit-identical,
//! the loss's partial losses are summed (Sum). A Reshape runs its parts as
//! lms `ReshapeTo` ([`part_op`]).

use super::cost::CostNode;
use super::util::fmt_shape;
use crate::types::{Attr, Attrs, TensorType};
use serde::Serialize;
use std::fmt;
use std::ops::Range;

/// Relative tolerance of a split that reorders a sum (Sum and the gradients
/// of Halo), against the unsplit op on the same backend, in f32.
pub const SUM_TOLERANCE: f64 = 1e-6;

/// A dimension an op is split along, as `--split` names it. Tensors are
/// NCHW: batch is axis 0, channel axis 1, height 2 and width 3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Dim {
    /// Samples (axis 0).
    Batch,
    /// Channels (axis 1): output channels, or reduced input channels.
    Channel,
    /// Height (axis 2).
    Height,
    /// Width (axis 3, or the last spatial axis of a 1-D window).
    Width,
}

impl Dim {
    /// Every dimension, in `--split` order.
    pub const ALL: [Dim; 4] = [Dim::Batch, Dim::Channel, Dim::Height, Dim::Width];

    /// The dimension's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Dim::Batch => "batch",
            Dim::Channel => "channel",
            Dim::Height => "height",
            Dim::Width => "width",
        }
    }

    /// The dimension named `name`, if any.
    pub fn parse(name: &str) -> Option<Dim> {
        Dim::ALL.into_iter().find(|d| d.name() == name)
    }
}

impl fmt::Display for Dim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How the parts of a split op make its outputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Combine {
    /// Each part makes a slice of every output along `axis`.
    Concat {
        /// The outputs' axis.
        axis: usize,
    },
    /// Each part makes a partial output of the whole shape; they are added.
    Sum,
    /// A windowed op split along a spatial `axis` into the output ranges of
    /// [`halo_parts`], each part with its own padding. A forward op windows
    /// input 0; a gradient op slices input 0 (the output gradient) into the
    /// ranges and windows its other sliced inputs (the forward input).
    Halo {
        /// The spatial axis (2 and on) of every sliced input and of output 0.
        axis: usize,
        /// How the parts make output 0.
        output: HaloOutput,
    },
    /// Each part makes its slice of output 0 along the batch from the whole
    /// batch's statistics, merged from the parts' own; the other outputs are
    /// the merge's.
    Statistics,
}

/// How the parts of a Halo split make the op's output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HaloOutput {
    /// Forward: each part makes its output range; concatenated.
    Concat,
    /// Input gradient: each part makes the gradient of its input window;
    /// added into place where the windows overlap (lms `OverlapAdd`).
    OverlapAdd,
    /// Weight gradient: each part makes a partial result; summed.
    Sum,
}

/// One way to split an op.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SplitRule {
    /// The dimension it splits.
    pub dim: Dim,
    /// For each input slot: the axis along which the parts slice it, or
    /// `None` where every part reads it whole (a Halo input slices with
    /// overlap along its combine axis).
    pub inputs: Vec<Option<usize>>,
    /// How the parts make the outputs.
    pub combine: Combine,
}

/// An op's extension of its axes map: the ways to split it that the map cannot state
/// (partial sums over an axis it reduces, merged batch statistics, halos along a window's
/// spatial axes, and the batch split of a Concat, which has no map). Its families list
/// them in `SPLIT_EXTENSIONS` tables.
pub type SplitExtension = fn(&CostNode<'_>) -> Vec<SplitRule>;

/// The ways the op of `node` can be split (empty when it cannot be): the concatenations
/// its axes map gives ([`super::axes::concat_rules`]) and its extension's rules, in
/// [`Dim`] order (along one dimension a concatenation first), only those whose sliced
/// axes are at least as long as 2 parts.
pub fn rules(node: &CostNode<'_>) -> Vec<SplitRule> {
    let mut all = super::axes::concat_rules(node);
    if let Some(extension) = super::registry::by_name(node.op).and_then(|id| id.def().split_extension) {
        all.extend(extension(node));
    }
    all.sort_by_key(|rule| rule.dim);
    let long_enough = |rule: &SplitRule| {
        rule.inputs.iter().enumerate().all(|(slot, axis)| axis.is_none_or(|a| node.in_shape(slot).get(a) >= Some(&2)))
    };
    all.into_iter().filter(long_enough).collect()
}

/// The rule of `node` along `dim`, or an error saying which dimensions it
/// can be split along.
pub fn rule_along(node: &CostNode<'_>, dim: Dim) -> Result<SplitRule, String> {
    let all = rules(node);
    if let Some(rule) = all.iter().find(|r| r.dim == dim) {
        return Ok(rule.clone());
    }
    let shapes: Vec<String> = node.inputs.iter().map(|t| t.map_or("-".into(), |t| fmt_shape(&t.shape))).collect();
    let can: Vec<&str> = all.iter().map(|r| r.dim.name()).collect();
    Err(if can.is_empty() {
        format!("{} on inputs {} cannot be split", node.op, shapes.join(", "))
    } else {
        format!("{} on inputs {} cannot be split along {dim} (only {})", node.op, shapes.join(", "), can.join(", "))
    })
}

/// The rule that slices the inputs at `slots` along `axis` (others whole)
/// and concatenates the outputs along `out_axis`.
pub fn concat(dim: Dim, slots: usize, sliced: &[(usize, usize)], out_axis: usize) -> SplitRule {
    SplitRule { dim, inputs: slicing(slots, sliced), combine: Combine::Concat { axis: out_axis } }
}

/// The rule that slices the inputs at `sliced` (slot, axis) pairs and sums
/// the partial outputs.
pub fn sum(dim: Dim, slots: usize, sliced: &[(usize, usize)]) -> SplitRule {
    SplitRule { dim, inputs: slicing(slots, sliced), combine: Combine::Sum }
}

/// The Statistics rule that slices the inputs at `sliced` along the batch
/// (axis 0).
pub fn statistics(slots: usize, sliced: &[usize]) -> SplitRule {
    let sliced: Vec<(usize, usize)> = sliced.iter().map(|&slot| (slot, 0)).collect();
    SplitRule { dim: Dim::Batch, inputs: slicing(slots, &sliced), combine: Combine::Statistics }
}

/// The Halo rules of a windowed op whose input 0 is [N, C, D...] and whose
/// inputs at `sliced` are cut along the spatial axis: height and width for
/// 2-D windows, width for 1-D ones (3-D windows are not split spatially).
pub fn halo(node: &CostNode<'_>, sliced: &[usize], output: HaloOutput) -> Vec<SplitRule> {
    let rank = node.in_shape(0).len();
    let dims: &[(Dim, usize)] = match rank {
        3 => &[(Dim::Width, 2)],
        4 => &[(Dim::Height, 2), (Dim::Width, 3)],
        _ => &[],
    };
    let slots = node.inputs.len();
    dims.iter()
        .map(|&(dim, axis)| {
            let pairs: Vec<(usize, usize)> = sliced.iter().map(|&s| (s, axis)).collect();
            SplitRule { dim, inputs: slicing(slots, &pairs), combine: Combine::Halo { axis, output } }
        })
        .collect()
}

/// The window of a windowed op (Conv, MaxPool, AveragePool) or of its
/// gradients (ConvGradData, ConvGradWeight, MaxPoolGrad, AveragePoolGrad)
/// along spatial `axis`, from its attributes and tensor shapes; `None` for
/// other ops, `ceil_mode`, implicit (`SAME_*`) padding, or lengths that do
/// not fit the window (floor mode).
pub fn axis_window(node: &CostNode<'_>, axis: usize) -> Option<AxisWindow> {
    let spatial = axis.checked_sub(2)?;
    let len = |shape: &[usize]| shape.get(axis).copied();
    let attr_kernel = || usize::try_from(*node.attrs.ints("kernel_shape", vec![]).ok()?.get(spatial)?).ok();
    let out0 = node.outputs.first().map(|t| &t.shape[..])?;
    // (input, output, kernel) lengths of the forward op.
    let (input, output, kernel) = match node.op {
        "Conv" => (len(node.in_shape(0))?, len(out0)?, len(node.in_shape(1))?),
        "MaxPool" | "AveragePool" => (len(node.in_shape(0))?, len(out0)?, attr_kernel()?),
        "ConvGradData" => (len(out0)?, len(node.in_shape(0))?, len(node.in_shape(1))?),
        "ConvGradWeight" => (len(node.in_shape(1))?, len(node.in_shape(0))?, len(out0)?),
        "MaxPoolGrad" | "AveragePoolGrad" => (len(out0)?, len(node.in_shape(0))?, attr_kernel()?),
        _ => return None,
    };
    let auto_pad = node.attrs.string("auto_pad", "NOTSET".into()).ok()?;
    if !matches!(auto_pad.as_str(), "NOTSET" | "" | "VALID") || node.attrs.int("ceil_mode", 0).ok()? != 0 {
        return None;
    }
    let rank = node.in_shape(0).len().checked_sub(2)?;
    let at = |name: &str, index: usize, default: i64| -> Option<usize> {
        let values = node.attrs.ints(name, vec![]).ok()?;
        usize::try_from(values.get(index).copied().unwrap_or(default)).ok()
    };
    let window = AxisWindow {
        kernel,
        stride: at("strides", spatial, 1)?,
        dilation: at("dilations", spatial, 1)?,
        pad_begin: at("pads", spatial, 0)?,
        pad_end: at("pads", rank + spatial, 0)?,
        input,
        output,
    };
    // Checked: the attributes of a file being verified may be anything.
    let reach = kernel.checked_sub(1)?.checked_mul(window.dilation)?.checked_add(1)?;
    let padded = input.checked_add(window.pad_begin)?.checked_add(window.pad_end)?;
    let fits = window.stride > 0 && padded >= reach && (padded - reach) / window.stride + 1 == output;
    fits.then_some(window)
}

/// The attributes of every part of an op `op` with `attrs` whose input 0
/// has shape `input0`, when they differ from the op's: SoftmaxCrossEntropy
/// and its gradient divide by their positions, so their parts are told the
/// whole op's count (attribute `positions`, the logits' elements over the
/// class axis) unless the op already carries one.
pub fn whole_count_attrs(op: &str, attrs: &Attrs, input0: &[usize]) -> Option<Attrs> {
    let loss = matches!(op, "SoftmaxCrossEntropy" | "SoftmaxCrossEntropyGrad");
    let (_, positions) = input0.split_last().filter(|_| loss && !attrs.has("positions"))?;
    Some(attrs.clone().with("positions", Attr::Int(positions.iter().product::<usize>() as i64)))
}

/// The lms op each part of an op `op` of `domain` runs as, when it is not
/// the op itself: an ONNX `Reshape` runs its parts as `ReshapeTo` on its
/// data alone, each part's output type giving its shape (no part needs a
/// shape constant of its own, whether the whole one names the batch, 0 or
/// -1).
pub fn part_op(op: &str, domain: &str) -> Option<&'static str> {
    (op == "Reshape" && domain.is_empty()).then_some(RESHAPE_TO_OP)
}

/// The lms op that reshapes its input to its output type.
pub const RESHAPE_TO_OP: &str = "ReshapeTo";

fn slicing(slots: usize, sliced: &[(usize, usize)]) -> Vec<Option<usize>> {
    (0..slots).map(|slot| sliced.iter().find(|(s, _)| *s == slot).map(|&(_, a)| a)).collect()
}

/// The parts of an axis of length `len` in `parts`: `array_split` ranges
/// (the first `len % parts` one longer), the ranges the e-graph's split
/// terms denote.
pub fn part_ranges(len: usize, parts: usize) -> Vec<Range<usize>> {
    let mut start = 0;
    (0..parts)
        .map(|i| {
            let end = start + part_len(len, i, parts);
            let range = start..end;
            start = end;
            range
        })
        .collect()
}

/// A window's geometry along one spatial axis.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AxisWindow {
    /// Kernel length.
    pub kernel: usize,
    /// Stride.
    pub stride: usize,
    /// Dilation.
    pub dilation: usize,
    /// Padding before the input.
    pub pad_begin: usize,
    /// Padding after the input.
    pub pad_end: usize,
    /// Input length.
    pub input: usize,
    /// Output length.
    pub output: usize,
}

/// One micro-op of a Halo split along one axis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HaloPart {
    /// The output positions it makes.
    pub output: Range<usize>,
    /// The input positions it reads (overlapping its neighbours' by the
    /// kernel's reach beyond the stride).
    pub input: Range<usize>,
    /// Its padding before its input window.
    pub pad_begin: usize,
    /// Its padding after its input window.
    pub pad_end: usize,
}

/// Splits the output of a windowed op along one axis into `parts` ranges
/// (`array_split`) and gives each the input window it reads and its own
/// padding (Split-CNN §3.1): output `o` reads padded positions
/// `o·stride .. o·stride + (kernel-1)·dilation + 1`. Each part's own
/// (floor-mode) output length is its range's length; windowed ops under
/// `ceil_mode` have no Halo rule.
pub fn halo_parts(w: &AxisWindow, parts: usize) -> Vec<HaloPart> {
    let reach = (w.kernel.max(1) - 1) * w.dilation + 1;
    part_ranges(w.output, parts)
        .into_iter()
        .filter(|out| !out.is_empty())
        .map(|out| {
            // In unpadded coordinates (may be negative or past the end).
            let lo = (out.start * w.stride) as i64 - w.pad_begin as i64;
            let hi = ((out.end - 1) * w.stride + reach) as i64 - w.pad_begin as i64;
            // Empty when the window reads only padding.
            let clamp = |v: i64| v.clamp(0, w.input as i64) as usize;
            let input = clamp(lo)..clamp(hi);
            let pad_begin = (-lo).max(0) as usize;
            let pad_end = (hi - w.input as i64).max(0) as usize;
            HaloPart { output: out, input, pad_begin, pad_end }
        })
        .collect()
}

impl HaloOutput {
    /// Whether a Halo split with this output reads input `slot` (one it
    /// slices) through overlapping windows ([`HaloPart::input`]) rather than
    /// in the output's ranges ([`HaloPart::output`], `array_split` parts): a
    /// forward op windows its input 0; a gradient op slices its output
    /// gradient, input 0, and windows the others.
    pub fn windows(self, slot: usize) -> bool {
        (self == HaloOutput::Concat) == (slot == 0)
    }

    /// The length along the split axis of output 0 of `part`, whose whole
    /// length is `whole`: its output range (Concat), its input window
    /// (OverlapAdd), or the whole (Sum).
    pub fn part_len(self, part: &HaloPart, whole: usize) -> usize {
        match self {
            HaloOutput::Concat => part.output.len(),
            HaloOutput::OverlapAdd => part.input.len(),
            HaloOutput::Sum => whole,
        }
    }
}

/// The attributes of the micro-op of `part` of an op with `attrs` and
/// `spatial` spatial axes split along `axis`: its own pads along the axis,
/// every pad explicit (`auto_pad` NOTSET when the op names one).
pub fn part_attrs(attrs: &Attrs, axis: usize, spatial: usize, part: &HaloPart) -> Attrs {
    let mut pads = attrs.ints("pads", vec![0; 2 * spatial]).unwrap_or_else(|_| vec![0; 2 * spatial]);
    pads.resize(2 * spatial, 0);
    pads[axis - 2] = part.pad_begin as i64;
    pads[spatial + axis - 2] = part.pad_end as i64;
    let mut out = attrs.clone().with("pads", Attr::Ints(pads));
    if out.has("auto_pad") {
        out.set("auto_pad", Attr::String("NOTSET".into()));
    }
    out
}

/// `ty` with length `len` along `axis`: the type of a part.
pub fn with_len(ty: &TensorType, axis: usize, len: usize) -> TensorType {
    let mut shape = ty.shape.clone();
    shape[axis] = len;
    TensorType::new(ty.dtype, shape)
}

/// The attributes of the lms `SplitWindow` reading positions `window` along `axis`.
pub fn window_attrs(axis: usize, window: &Range<usize>) -> Attrs {
    Attrs::new()
        .with("axis", Attr::Int(axis as i64))
        .with("begin", Attr::Int(window.start as i64))
        .with("end", Attr::Int(window.end as i64))
}

/// The attributes of the lms `OverlapAdd` adding the input windows of
/// `parts` along `axis`.
pub fn overlap_add_attrs(axis: usize, parts: &[HaloPart]) -> Attrs {
    Attrs::new()
        .with("axis", Attr::Int(axis as i64))
        .with("begins", Attr::Ints(parts.iter().map(|p| p.input.start as i64).collect()))
}

/// Length of part `i` of `n` of an axis of length `len` (numpy's `array_split`).
pub fn part_len(len: usize, i: usize, n: usize) -> usize {
    len / n + usize::from(i < len % n)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::{Attr, Attrs, DType, TensorType};

    fn node_rules(op: &str, attrs: &Attrs, inputs: &[&[usize]], outputs: &[&[usize]]) -> Vec<SplitRule> {
        let ins: Vec<TensorType> = inputs.iter().map(|s| TensorType::new(DType::F32, s.to_vec())).collect();
        let outs: Vec<TensorType> = outputs.iter().map(|s| TensorType::new(DType::F32, s.to_vec())).collect();
        let in_refs: Vec<Option<&TensorType>> = ins.iter().map(Some).collect();
        let out_refs: Vec<&TensorType> = outs.iter().collect();
        rules(&CostNode { op, attrs, inputs: &in_refs, outputs: &out_refs })
    }

    fn dims(rules: &[SplitRule]) -> Vec<Dim> {
        rules.iter().map(|r| r.dim).collect()
    }

    #[test]
    fn a_conv_splits_along_batch_output_and_reduced_channels_and_space() {
        let attrs = Attrs::new();
        let rules = node_rules("Conv", &attrs, &[&[4, 3, 8, 8], &[6, 3, 3, 3]], &[&[4, 6, 6, 6]]);
        assert_eq!(dims(&rules), [Dim::Batch, Dim::Channel, Dim::Channel, Dim::Height, Dim::Width]);
        assert_eq!(rules[0].inputs, [Some(0), None]);
        assert_eq!(rules[1], concat(Dim::Channel, 2, &[(1, 0)], 1));
        assert_eq!(rules[2], sum(Dim::Channel, 2, &[(0, 1), (1, 1)]));
        assert_eq!(rules[3].combine, Combine::Halo { axis: 2, output: HaloOutput::Concat });
        // Grouped: no channel splits; a bias is added once, so no reduction split.
        let grouped = Attrs::new().with("group", Attr::Int(3));
        let rules = node_rules("Conv", &grouped, &[&[4, 3, 8, 8], &[6, 1, 3, 3]], &[&[4, 6, 6, 6]]);
        assert_eq!(dims(&rules), [Dim::Batch, Dim::Height, Dim::Width]);
        let rules = node_rules("Conv", &attrs, &[&[4, 3, 8, 8], &[6, 3, 3, 3], &[6]], &[&[4, 6, 6, 6]]);
        assert_eq!(dims(&rules), [Dim::Batch, Dim::Channel, Dim::Height, Dim::Width]);
        assert_eq!(rules[1].inputs, [None, Some(0), Some(0)]);
    }

    #[test]
    fn weight_gradients_sum_over_the_batch_and_short_axes_are_not_split() {
        let attrs = Attrs::new();
        let rules = node_rules("ConvGradWeight", &attrs, &[&[4, 6, 6, 6], &[4, 3, 8, 8]], &[&[6, 3, 3, 3]]);
        assert_eq!(rules[0], sum(Dim::Batch, 2, &[(0, 0), (1, 0)]));
        // Its channel is its filters' channels, X's.
        assert_eq!(rules[1], concat(Dim::Channel, 2, &[(1, 1)], 1));
        let one = node_rules("ConvGradWeight", &attrs, &[&[1, 6, 6, 6], &[1, 3, 8, 8]], &[&[6, 3, 3, 3]]);
        assert!(!dims(&one).contains(&Dim::Batch));
        let err =
            rule_along(&CostNode { op: "Softmax", attrs: &attrs, inputs: &[], outputs: &[] }, Dim::Batch).unwrap_err();
        assert_eq!(err, "Softmax on inputs  cannot be split");
    }

    #[test]
    fn pools_split_along_batch_channel_and_space() {
        let k = Attrs::new().with("kernel_shape", Attr::Ints(vec![2, 2]));
        let rules = node_rules("MaxPool", &k, &[&[2, 4, 8, 8]], &[&[2, 4, 7, 7]]);
        assert_eq!(dims(&rules), [Dim::Batch, Dim::Channel, Dim::Height, Dim::Width]);
        // With its indices output, MaxPool is not split (the indices are flat).
        let rules = node_rules("MaxPool", &k, &[&[2, 4, 8, 8]], &[&[2, 4, 7, 7], &[2, 4, 7, 7]]);
        assert!(rules.is_empty());
        let err = rule_along(
            &CostNode {
                op: "MaxPool",
                attrs: &k,
                inputs: &[Some(&TensorType::new(DType::F32, vec![1, 4, 8, 8]))],
                outputs: &[&TensorType::new(DType::F32, vec![1, 4, 7, 7])],
            },
            Dim::Batch,
        )
        .unwrap_err();
        assert_eq!(err, "MaxPool on inputs [1,4,8,8] cannot be split along batch (only channel, height, width)");
    }

    #[test]
    fn losses_reshapes_keeping_the_batch_and_feature_splits_split_along_the_batch() {
        let attrs = Attrs::new();
        let grad = node_rules("SoftmaxCrossEntropyGrad", &attrs, &[&[8, 16, 64], &[8, 16]], &[&[8, 16, 64]]);
        let positions = |dim, axis| concat(dim, 2, &[(0, axis), (1, axis)], axis);
        assert_eq!(grad, [positions(Dim::Batch, 0), positions(Dim::Channel, 1)]);
        let loss = node_rules("SoftmaxCrossEntropy", &attrs, &[&[8, 16, 64], &[8, 16]], &[&[]]);
        assert_eq!(loss, [sum(Dim::Batch, 2, &[(0, 0), (1, 0)])]);
        let whole = whole_count_attrs("SoftmaxCrossEntropy", &attrs, &[8, 16, 64]).unwrap();
        assert_eq!(whole.int("positions", 0).unwrap(), 128);
        assert_eq!(whole_count_attrs("SoftmaxCrossEntropy", &whole, &[4, 16, 64]), None, "already told");
        assert_eq!(whole_count_attrs("Relu", &attrs, &[8, 16]), None);
        let reshape = node_rules("Reshape", &attrs, &[&[8, 16, 32], &[4]], &[&[8, 16, 2, 16]]);
        assert_eq!(reshape, [concat(Dim::Batch, 2, &[(0, 0)], 0)]);
        assert!(node_rules("Reshape", &attrs, &[&[8, 16, 32], &[2]], &[&[128, 32]]).is_empty());
        assert_eq!(part_op("Reshape", ""), Some("ReshapeTo"));
        let last = Attrs::new().with("axis", Attr::Int(-1));
        let chunks = node_rules("Split", &last, &[&[8, 16, 96], &[3]], &[&[8, 16, 32], &[8, 16, 32], &[8, 16, 32]]);
        assert_eq!(chunks, [concat(Dim::Batch, 2, &[(0, 0)], 0), concat(Dim::Channel, 2, &[(0, 1)], 1)]);
        let batch_chunks = node_rules("Split", &attrs, &[&[8, 16], &[2]], &[&[4, 16], &[4, 16]]);
        assert_eq!(dims(&batch_chunks), [Dim::Channel]);
    }

    #[test]
    fn matrix_products_split_rows_columns_and_the_reduction() {
        let attrs = Attrs::new();
        let rules = node_rules("MatMul", &attrs, &[&[8, 16], &[16, 4]], &[&[8, 4]]);
        assert_eq!(rules[0], concat(Dim::Batch, 2, &[(0, 0)], 0));
        assert_eq!(rules[1], concat(Dim::Channel, 2, &[(1, 1)], 1));
        assert_eq!(rules[2], sum(Dim::Channel, 2, &[(0, 1), (1, 0)]));
        // A 2-D A on batched B: the batch is A's rows; the channel B's columns.
        let rules = node_rules("MatMul", &attrs, &[&[8, 16], &[3, 16, 4]], &[&[3, 8, 4]]);
        assert_eq!(rules[0], concat(Dim::Batch, 2, &[(0, 0)], 1));
        assert_eq!(rules[1], concat(Dim::Channel, 2, &[(1, 2)], 2));
        // Gemm: rows of A and columns of B, C sliced where it has them, else whole.
        let t = Attrs::new().with("transA", Attr::Int(1)).with("transB", Attr::Int(1));
        let rules = node_rules("Gemm", &t, &[&[16, 8], &[4, 16], &[4]], &[&[8, 4]]);
        assert_eq!(rules, [concat(Dim::Batch, 3, &[(0, 1)], 0), concat(Dim::Channel, 3, &[(1, 0), (2, 0)], 1)]);
        let rules = node_rules("Gemm", &attrs, &[&[8, 16], &[16, 4], &[8, 4]], &[&[8, 4]]);
        assert_eq!(rules, [concat(Dim::Batch, 3, &[(0, 0), (2, 0)], 0), concat(Dim::Channel, 3, &[(1, 1), (2, 1)], 1)]);
    }

    #[test]
    fn gradients_have_the_forward_ops_window_and_bad_windows_have_none() {
        let f = |s: &[usize]| TensorType::new(DType::F32, s.to_vec());
        let window = |op: &str, attrs: &Attrs, inputs: &[TensorType], output: TensorType| {
            let ins: Vec<Option<&TensorType>> = inputs.iter().map(Some).collect();
            axis_window(&CostNode { op, attrs, inputs: &ins, outputs: &[&output] }, 3)
        };
        let attrs = Attrs::new().with("pads", Attr::Ints(vec![0, 1, 0, 2])).with("strides", Attr::Ints(vec![1, 2]));
        let want = AxisWindow { kernel: 3, stride: 2, dilation: 1, pad_begin: 1, pad_end: 2, input: 9, output: 5 };
        let (x, w, y) = (f(&[2, 3, 4, 9]), f(&[6, 3, 1, 3]), f(&[2, 6, 4, 5]));
        assert_eq!(window("Conv", &attrs, &[x.clone(), w.clone()], y.clone()), Some(want));
        assert_eq!(window("ConvGradData", &attrs, &[y.clone(), w.clone()], x.clone()), Some(want));
        assert_eq!(window("ConvGradWeight", &attrs, &[y.clone(), x.clone()], w.clone()), Some(want));
        // An output length the window does not give, ceil mode, implicit pads.
        assert_eq!(window("Conv", &attrs, &[x.clone(), w.clone()], f(&[2, 6, 4, 4])), None);
        let pool = attrs.clone().with("kernel_shape", Attr::Ints(vec![1, 3]));
        assert!(window("MaxPoolGrad", &pool, &[y.clone(), x.clone()], x.clone()).is_some());
        assert_eq!(
            window("MaxPool", &pool.clone().with("ceil_mode", Attr::Int(1)), std::slice::from_ref(&x), y.clone()),
            None
        );
        let same = Attrs::new().with("auto_pad", Attr::String("SAME_UPPER".into()));
        assert_eq!(window("Conv", &same, &[x, w], y), None);
    }

    #[test]
    fn halo_parts_cover_the_output_with_overlapping_windows() {
        // 3x3, pad 1, stride 1 over 8: each part reads one row beyond each side.
        let w = AxisWindow { kernel: 3, stride: 1, dilation: 1, pad_begin: 1, pad_end: 1, input: 8, output: 8 };
        let parts = halo_parts(&w, 2);
        assert_eq!(
            parts,
            [
                HaloPart { output: 0..4, input: 0..5, pad_begin: 1, pad_end: 0 },
                HaloPart { output: 4..8, input: 3..8, pad_begin: 0, pad_end: 1 },
            ]
        );
        // 2x2 stride 2 pooling: windows do not overlap.
        let w = AxisWindow { kernel: 2, stride: 2, dilation: 1, pad_begin: 0, pad_end: 0, input: 8, output: 4 };
        let inputs: Vec<_> = halo_parts(&w, 3).into_iter().map(|p| p.input).collect();
        assert_eq!(inputs, [0..4, 4..6, 6..8]);
        // Padding wider than the kernel: the first rows read only padding.
        let w = AxisWindow { kernel: 1, stride: 1, dilation: 1, pad_begin: 3, pad_end: 0, input: 5, output: 8 };
        let inputs: Vec<_> = halo_parts(&w, 4).into_iter().map(|p| p.input).collect();
        assert_eq!(inputs, [0..0, 0..1, 1..3, 3..5]);
    }
}
