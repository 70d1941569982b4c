//! The axes map of an op: for each axis of its output, which input axes it comes from
//! and whether the op is independent along it (its parts, computed on slices of those
//! input axes, concatenate to the whole output), windowed (parts need halos and their
//! own pads) or coupled (it reduces or mixes positions along the axis).
//!
//! It is the one source of the split legality of the elementwise and windowed ops (their
//! split rules along concatenated axes, [`concat_rules`]) and of the e-graph's
//! independence facts (the compiler's `egraph::rules::independence` and `halo`). Each
//! family lists its ops' maps in an `AXES` table beside its other rules; an op without
//! one is coupled along every axis, for the reason `NO_AXES` of its family gives.

use super::cost::CostNode;
use super::nn::SoftmaxAxis;
use super::split::{self, Dim, SplitRule};
use super::util::normalize_axis;
use crate::types::Attrs;

/// How an op's output axes relate to its inputs' axes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AxesMap {
    /// One output; each output axis comes from the right-aligned axis of every input
    /// (numpy broadcasting), which has the output's length there or 1 (read whole).
    Elementwise,
    /// A window over the spatial axes (2 and on) of NCHW data.
    Windowed(Windowed),
    /// One output of input 0's shape, independent along every axis but the last
    /// `trailing` (which it couples); the other inputs are read whole.
    Leading {
        /// The coupled trailing axes.
        trailing: usize,
    },
    /// Normalizes input 0 along some axes ([`Normalized`]); independent along the others,
    /// the first `sliced` inputs sliced alike, the others (scale, bias) read whole.
    Normalized {
        /// Which axes it normalizes along.
        along: Normalized,
        /// The leading inputs of the output's shape.
        sliced: usize,
    },
    /// MatMul `[..., M, K] @ [..., K, N]`: independent along the batch axes (broadcast like
    /// an elementwise op), the rows M of A (B whole) and the columns N of B (A whole). The
    /// reduction axis K is no output axis: its parts would have to be summed.
    MatMul,
    /// Gemm: along its rows (A split along them, B whole, C split or broadcast).
    Gemm,
    /// Transpose: output axis `o` is input axis `perm[o]`.
    Transpose,
    /// Flatten at axis 1 and ReshapeTo: independent along axis 0 where its length is
    /// unchanged (each sample stays one contiguous block); the other inputs read whole.
    Samples {
        /// Flatten, whose `axis` must be 1.
        flatten: bool,
    },
    /// The softmax cross-entropy gradient: each position (every axis of the logits but the
    /// last, the classes) with its labels; the parts divide by the whole op's positions.
    Positions,
    /// Split: cuts input 0 into chunks along its `axis`; independent along every other
    /// axis (input 0 sliced like the outputs, the chunk sizes read whole).
    Chunks,
}

/// The axes a normalizing op normalizes along.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Normalized {
    /// Softmax and LogSoftmax: along `axis` (opset 13 and on) or, coerced to 2-D, along
    /// every axis from `axis` on ([`SoftmaxAxis`]).
    Softmax,
    /// Their gradients: as Softmax, the form read from their `coerce` attribute.
    SoftmaxGrad,
    /// LayerNormalization: along every axis from `axis` (default -1) on.
    LayerNorm,
}

/// The axes of a windowed op.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windowed {
    /// The leading inputs that carry samples (axis 0) and channels (axis 1) like the
    /// output; `0` where output axis 0 is not the samples (a weight gradient, which
    /// sums over them).
    pub data: usize,
    /// Whether each channel is computed alone (pooling), so that axis 1 is independent.
    pub per_channel: bool,
    /// Whether the op splits along its spatial axes with halos (its windows read
    /// overlapping input ranges; `split::halo`).
    pub halo: bool,
}

/// What an op does along one output axis.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutputAxis {
    /// Independent: for each input slot, the input axis its parts slice alike, or
    /// `None` where every part reads the input whole.
    Independent(Vec<Option<usize>>),
    /// A spatial axis of a windowed op: parts need halos.
    Windowed,
    /// The op reduces or mixes positions along the axis (or the shapes do not fit).
    Coupled,
}

/// What an axes map reads of a node: its inputs' shapes (`None` for an omitted input),
/// its number of outputs and output 0's shape, its attributes and its ONNX opset.
pub struct Node<'a> {
    /// The inputs' shapes.
    pub inputs: &'a [Option<&'a [usize]>],
    /// How many outputs the node has.
    pub outputs: usize,
    /// Output 0's shape.
    pub out: &'a [usize],
    /// The node's attributes.
    pub attrs: &'a Attrs,
    /// The ONNX opset of the graph.
    pub opset: i64,
}

impl Node<'_> {
    /// An integer attribute, or `default` when absent or of another kind.
    fn int(&self, name: &str, default: i64) -> i64 {
        self.attrs.int(name, default).unwrap_or(default)
    }
}

impl AxesMap {
    /// What the op does along output `axis` of `node`.
    pub fn output_axis(&self, node: &Node<'_>, axis: usize) -> OutputAxis {
        let (inputs, out) = (node.inputs, node.out);
        let Some(&len) = out.get(axis) else { return OutputAxis::Coupled };
        let single = node.outputs == 1;
        let independent =
            |slots: Option<Vec<Option<usize>>>| slots.map_or(OutputAxis::Coupled, OutputAxis::Independent);
        match *self {
            AxesMap::Elementwise | AxesMap::Windowed(_) | AxesMap::Leading { .. } if !single => OutputAxis::Coupled,
            AxesMap::Elementwise => independent(
                inputs
                    .iter()
                    .map(|input| match input.and_then(|s| (axis + s.len()).checked_sub(out.len()).map(|a| (a, s[a]))) {
                        None => Some(None),
                        Some((a, l)) if l == len => Some(Some(a)),
                        Some((_, 1)) => Some(None),
                        Some(_) => None,
                    })
                    .collect(),
            ),
            AxesMap::Windowed(w) => {
                if axis >= 2 {
                    return OutputAxis::Windowed;
                }
                if w.data == 0 || (axis == 1 && !w.per_channel) {
                    return OutputAxis::Coupled;
                }
                independent(
                    inputs
                        .iter()
                        .enumerate()
                        .map(|(slot, input)| match input {
                            Some(s) if slot < w.data => (s.get(axis) == Some(&len)).then_some(Some(axis)),
                            _ => Some(None),
                        })
                        .collect(),
                )
            }
            AxesMap::Leading { trailing } => {
                let Some(Some(x)) = inputs.first() else { return OutputAxis::Coupled };
                if axis + trailing >= out.len() || x.get(axis) != Some(&len) {
                    return OutputAxis::Coupled;
                }
                OutputAxis::Independent((0..inputs.len()).map(|slot| (slot == 0).then_some(axis)).collect())
            }
            AxesMap::Normalized { along, sliced } => {
                let Some((first, coerced)) = along.first_axis(node) else { return OutputAxis::Coupled };
                if if coerced { axis >= first } else { axis == first } {
                    return OutputAxis::Coupled;
                }
                OutputAxis::Independent((0..inputs.len()).map(|slot| (slot < sliced).then_some(axis)).collect())
            }
            AxesMap::MatMul => independent(single.then(|| matmul(inputs, out.len(), len, axis)).flatten()),
            AxesMap::Gemm => {
                let [Some(_), Some(_), c @ ..] = inputs else { return OutputAxis::Coupled };
                if !single || axis != 0 {
                    return OutputAxis::Coupled;
                }
                let a_rows = if node.int("transA", 0) == 0 { 0 } else { 1 };
                let c_split = match c.first().copied().flatten() {
                    Some(c) if c.len() == 2 && c[0] == len && len > 1 => Some(0),
                    _ => None,
                };
                OutputAxis::Independent([Some(a_rows), None].into_iter().chain(c.iter().map(|_| c_split)).collect())
            }
            AxesMap::Transpose => {
                let [Some(x), rest @ ..] = inputs else { return OutputAxis::Coupled };
                if !single {
                    return OutputAxis::Coupled;
                }
                let perm = match node.attrs.ints_opt("perm") {
                    Ok(Some(p)) => p,
                    _ => (0..x.len() as i64).rev().collect(),
                };
                let from = perm.get(axis).and_then(|&p| normalize_axis(p, x.len()).ok());
                independent(from.map(|from| std::iter::once(Some(from)).chain(rest.iter().map(|_| None)).collect()))
            }
            AxesMap::Samples { flatten } => {
                let [Some(x), rest @ ..] = inputs else { return OutputAxis::Coupled };
                let keeps_samples = single && axis == 0 && x.first() == out.first();
                // Flatten's axis may equal the rank; negative values count from it.
                let at = node.int("axis", 1);
                let flatten_ok = !flatten || at == 1 || at + x.len() as i64 == 1;
                independent(
                    (keeps_samples && flatten_ok)
                        .then(|| std::iter::once(Some(0)).chain(rest.iter().map(|_| None)).collect()),
                )
            }
            AxesMap::Positions => {
                let [Some(logits), Some(labels)] = inputs else { return OutputAxis::Coupled };
                independent(
                    (axis + 1 < logits.len() && labels.len() + 1 == logits.len() && single)
                        .then(|| vec![Some(axis), Some(axis)]),
                )
            }
            AxesMap::Chunks => {
                let [Some(x), rest @ ..] = inputs else { return OutputAxis::Coupled };
                let own = normalize_axis(node.int("axis", 0), x.len()).ok();
                independent(
                    own.filter(|&own| axis != own && axis < x.len())
                        .map(|_| std::iter::once(Some(axis)).chain(rest.iter().map(|_| None)).collect()),
                )
            }
        }
    }
}

impl Normalized {
    /// The first normalized axis of `node`'s output, and whether every later axis is
    /// normalized too.
    fn first_axis(self, node: &Node<'_>) -> Option<(usize, bool)> {
        let form = match self {
            Normalized::LayerNorm => {
                return Some((normalize_axis(node.int("axis", -1), node.out.len()).ok()?, true));
            }
            Normalized::Softmax => SoftmaxAxis::at_opset(node.opset),
            Normalized::SoftmaxGrad => SoftmaxAxis::new(node.int("coerce", 0) == 1),
        };
        Some((normalize_axis(node.int("axis", form.default), node.out.len()).ok()?, form.coerced))
    }
}

/// [`AxesMap::MatMul`] along output `axis` of `rank` axes and length `len`.
fn matmul(inputs: &[Option<&[usize]>], rank: usize, len: usize, axis: usize) -> Option<Vec<Option<usize>>> {
    let [Some(a), Some(b)] = inputs else { return None };
    if a.len() < 2 || b.len() < 2 {
        return None;
    }
    if axis == rank - 2 {
        return Some(vec![Some(a.len() - 2), None]);
    }
    if axis == rank - 1 {
        return Some(vec![None, Some(b.len() - 1)]);
    }
    // A batch axis: each operand lacks it, broadcasts it, or is split along it.
    let batch = |s: &[usize]| match (axis + s.len()).checked_sub(rank).filter(|&x| x + 2 < s.len()) {
        None => Some(None),
        Some(x) if s[x] == len => Some(Some(x)),
        Some(x) if s[x] == 1 => Some(None),
        Some(_) => None,
    };
    Some(vec![batch(a)?, batch(b)?])
}

/// The axes map of `op`, where its definition has one.
pub fn of(op: &str) -> Option<AxesMap> {
    super::registry::by_name(op).and_then(|id| id.def().axes)
}

/// The split rules of `node` along each `(dim, axis)` of `along` where its axes map says
/// it is independent: the inputs sliced where the map slices them, the parts
/// concatenated ([`split::rules`] keeps those whose sliced axes are long enough).
pub fn concat_rules(node: &CostNode<'_>, along: &[(Dim, usize)]) -> Vec<SplitRule> {
    let (Some(map), Some(out)) = (of(node.op), node.outputs.first()) else { return Vec::new() };
    let inputs: Vec<Option<&[usize]>> = node.inputs.iter().map(|t| t.map(|t| &t.shape[..])).collect();
    // The elementwise and windowed maps read no attribute nor opset.
    let axes_node = Node { inputs: &inputs, outputs: node.outputs.len(), out: &out.shape, attrs: node.attrs, opset: 0 };
    along
        .iter()
        .filter_map(|&(dim, axis)| match map.output_axis(&axes_node, axis) {
            OutputAxis::Independent(slots) => {
                let sliced: Vec<(usize, usize)> =
                    slots.iter().enumerate().filter_map(|(slot, a)| a.map(|a| (slot, a))).collect();
                Some(split::concat(dim, node.inputs.len(), &sliced, axis))
            }
            OutputAxis::Windowed | OutputAxis::Coupled => None,
        })
        .collect()
}
