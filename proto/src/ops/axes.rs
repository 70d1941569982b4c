//! The axes map of an op: for each axis of its output, which input axes it comes from
//! and whether the op is independent along it (its parts, computed on slices of those
//! input axes, concatenate to the whole output), windowed (parts need halos and their
//! own pads) or coupled (it reduces or mixes positions along the axis).
//!
//! It is the one source of every op's split rules along concatenated axes
//! ([`concat_rules`]) and of the e-graph's independence facts (the compiler's
//! `egraph::rules::independence` and `halo`). Each family lists its ops' maps in an `AXES`
//! table beside its other rules; an op without one is coupled along every axis, for the
//! reason `NO_AXES` of its family gives. What a map cannot say (partial sums over a reduced
//! axis, merged batch statistics, halos) is the op's extension of it
//! (`split::SplitExtension`).

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
    /// Gemm: along its rows (A split along them, B whole) and its columns (B split along
    /// them, A whole); C split along the same axis where it has the output's length there,
    /// else read whole (broadcast).
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
    /// Unsqueeze and Squeeze: insert or remove axes of length 1. An output axis longer
    /// than 1 is the input axis of its rank among the input's axes longer than 1 (the
    /// axes input read whole). A Squeeze given no axes is coupled: it would squeeze a
    /// part's axis of length 1 too.
    UnitAxes,
    /// Expand: independent along an output axis where input 0's right-aligned axis has
    /// the output's length and the shape input, whose values the map does not read, has
    /// no entry (a part keeps the shape input, which must not name the whole length).
    Expand,
    /// The reductions (`grad: false`; the axes input read whole) and their gradient
    /// ReduceGrad (`grad: true`, dY broadcast back over the reduced axes): independent
    /// along the kept axes, the whole-rank tensor and the reduced one sliced alike.
    /// Axes given by an input (whose values the map does not read) are known from the
    /// shapes where the reduction keeps its dims: those whose length it keeps.
    Reduced {
        /// ReduceGrad: output 0 is the whole-rank tensor, input 0 the reduced one.
        grad: bool,
    },
    /// An op that cuts, pads or joins along some axes ([`Acting`]) and copies along the
    /// others: independent along those, its data inputs sliced alike (integer inputs read
    /// whole).
    Acting(Acting),
    /// Gather (`elements: false`): the output is data's axes before `axis`, the indices'
    /// axes, then data's after it; independent along each (data or the indices sliced,
    /// the other whole). GatherElements (`elements: true`): along every axis but `axis`,
    /// where data and the indices have the output's length (both sliced).
    Gathered {
        /// GatherElements.
        elements: bool,
    },
    /// Per-channel normalization of NCHW data, its per-channel inputs (scale, bias, and
    /// the statistics) sliced along the channels and read whole along the other axes:
    /// independent along the samples and the channels, and along the spatial axes
    /// unless it normalizes over them.
    Channels {
        /// InstanceNormalization: the statistics are computed over the spatial axes.
        spatial_statistics: bool,
    },
}

/// The axes an [`AxesMap::Acting`] op acts along.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Acting {
    /// Slice: the axes of its `axes` (an attribute, or an input whose values the map
    /// does not read: coupled), else the first as many as it has starts.
    Slice,
    /// SliceGrad (dY into zeros of x's shape): the axes of its `axes` attribute.
    SliceGrad,
    /// Pad before opset 11: the axes its `pads` attribute pads (or crops); a pads input,
    /// whose values the map does not read, makes it coupled.
    Pad,
    /// ConcatGrad: dY cut into its outputs along its `axis`.
    ConcatGrad,
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
    /// For output axes 0 and 1 (samples, channels): the inputs its parts slice along it,
    /// each `(slot, axis)`, the others read whole; empty where the op mixes positions
    /// along it (LRN's channels) or where axis 0 is no samples (a weight gradient's
    /// filters, from dY's channels: the planner's batch split takes output axis 0 for the
    /// samples, and a weight gradient sums over them). A grouped op (`group` > 1) is
    /// independent along its samples only.
    pub leading: [&'static [(usize, usize)]; 2],
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
                let sources = w.leading[axis];
                let grouped = node.int("group", 1) != 1;
                if sources.is_empty() || (grouped && axis != 0) {
                    return OutputAxis::Coupled;
                }
                independent(
                    inputs
                        .iter()
                        .enumerate()
                        .map(|(slot, input)| match (sources.iter().find(|&&(s, _)| s == slot), input) {
                            (Some(&(_, a)), Some(s)) => (s.get(a) == Some(&len)).then_some(Some(a)),
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
                if !single || axis > 1 || out.len() != 2 {
                    return OutputAxis::Coupled;
                }
                // A is [M, K] (transposed: [K, M]), B [K, N] (transposed: [N, K]).
                let (a, b) = match axis {
                    0 => (Some(usize::from(node.int("transA", 0) != 0)), None),
                    _ => (None, Some(usize::from(node.int("transB", 0) == 0))),
                };
                // C broadcasts to [M, N] from its right-aligned axes.
                let c_split = c.first().copied().flatten().and_then(|c| {
                    let at = (axis + c.len()).checked_sub(2)?;
                    (c[at] == len && len > 1).then_some(at)
                });
                OutputAxis::Independent([a, b].into_iter().chain(c.iter().map(|_| c_split)).collect())
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
            AxesMap::UnitAxes => {
                let [Some(x), rest @ ..] = inputs else { return OutputAxis::Coupled };
                let given = node.attrs.has("axes") || matches!(rest.first(), Some(Some(_)));
                let long = |s: &[usize], a: usize| s.iter().take(a).filter(|&&l| l > 1).count();
                let from = (single && len > 1 && given)
                    .then(|| x.iter().enumerate().filter(|&(_, &l)| l > 1).nth(long(out, axis)))
                    .flatten()
                    .filter(|&(_, &l)| l == len);
                independent(from.map(|(a, _)| std::iter::once(Some(a)).chain(rest.iter().map(|_| None)).collect()))
            }
            AxesMap::Expand => {
                let [Some(x), Some(shape)] = inputs else { return OutputAxis::Coupled };
                let from = (axis + x.len()).checked_sub(out.len()).filter(|&a| x[a] == len);
                let named = shape.first().is_some_and(|&k| axis + k >= out.len());
                independent(from.filter(|_| single && !named).map(|a| vec![Some(a), None]))
            }
            AxesMap::Reduced { grad } => {
                let [Some(x), rest @ ..] = inputs else { return OutputAxis::Coupled };
                let (full, reduced) = if grad { (out, *x) } else { (*x, out) };
                let kept = single.then(|| kept_axes(node, full, reduced, grad)).flatten().unwrap_or_default();
                let pair = kept.iter().find(|&&(f, r)| if grad { f == axis } else { r == axis });
                let from = pair.map(|&(f, r)| if grad { r } else { f });
                independent(from.map(|a| std::iter::once(Some(a)).chain(rest.iter().map(|_| None)).collect()))
            }
            AxesMap::Acting(acting) => {
                let [Some(x), rest @ ..] = inputs else { return OutputAxis::Coupled };
                let acted = acting.axes(node, x.len());
                let copies = acted.is_some_and(|acted| !acted.contains(&axis)) && x.get(axis) == Some(&len);
                let multi = acting == Acting::ConcatGrad || single;
                independent(
                    (copies && multi).then(|| std::iter::once(Some(axis)).chain(rest.iter().map(|_| None)).collect()),
                )
            }
            AxesMap::Gathered { elements } => {
                let [Some(data), Some(indices)] = inputs else { return OutputAxis::Coupled };
                let Ok(own) = normalize_axis(node.int("axis", 0), data.len()) else { return OutputAxis::Coupled };
                let slots = if elements {
                    (axis != own && data.get(axis) == Some(&len) && indices.get(axis) == Some(&len))
                        .then(|| vec![Some(axis), Some(axis)])
                } else if axis < own {
                    Some(vec![Some(axis), None])
                } else if axis < own + indices.len() {
                    Some(vec![None, Some(axis - own)])
                } else {
                    Some(vec![Some(axis + 1 - indices.len()), None])
                };
                let fits = |slots: &Vec<Option<usize>>| {
                    [data, indices].iter().zip(slots).all(|(s, a)| a.is_none_or(|a| s.get(a) == Some(&len)))
                };
                independent(slots.filter(|s| single && fits(s)))
            }
            AxesMap::Channels { spatial_statistics } => {
                let [Some(x), rest @ ..] = inputs else { return OutputAxis::Coupled };
                // Training mode, or per-activation parameters (BatchNormalization before opset 9).
                let batch_statistics = node.int("training_mode", 0) != 0 || node.int("spatial", 1) == 0;
                if !single || batch_statistics || x.get(axis) != Some(&len) || (axis >= 2 && spatial_statistics) {
                    return OutputAxis::Coupled;
                }
                let params = (axis == 1).then_some(0);
                OutputAxis::Independent(std::iter::once(Some(axis)).chain(rest.iter().map(|_| params)).collect())
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

impl Acting {
    /// The axes of input 0 (of rank `rank`) the op acts along, where the map knows them.
    fn axes(self, node: &Node<'_>, rank: usize) -> Option<Vec<usize>> {
        let listed = |name: &str| -> Option<Vec<usize>> {
            let values = node.attrs.ints_opt(name).ok()??;
            values.iter().map(|&a| normalize_axis(a, rank).ok()).collect()
        };
        match self {
            Acting::Slice if node.attrs.has("starts") => {
                listed("axes").or_else(|| Some((0..node.attrs.ints_opt("starts").ok()??.len()).collect()))
            }
            Acting::Slice => match node.inputs {
                [_, Some(starts), _] | [_, Some(starts), _, None, ..] => Some((0..*starts.first()?).collect()),
                _ => None,
            },
            Acting::SliceGrad => listed("axes"),
            Acting::Pad => {
                let pads = node.attrs.ints_opt("pads").ok()??;
                (pads.len() == 2 * rank).then(|| (0..rank).filter(|&a| pads[a] != 0 || pads[a + rank] != 0).collect())
            }
            Acting::ConcatGrad => Some(vec![normalize_axis(node.int("axis", 0), rank).ok()?]),
        }
    }
}

/// The kept axes of a reduction from `full` to `reduced` ([`AxesMap::Reduced`]): each
/// kept axis of `full` with its axis in `reduced`; `None` where they are not known.
fn kept_axes(node: &Node<'_>, full: &[usize], reduced: &[usize], grad: bool) -> Option<Vec<(usize, usize)>> {
    let listed = match node.attrs.ints_opt("axes") {
        Ok(Some(axes)) if !axes.is_empty() => Some(axes),
        Ok(_) => None,
        Err(_) => return None,
    };
    let is_reduced: Vec<bool> = match listed {
        Some(axes) => {
            let axes = axes.iter().map(|&a| normalize_axis(a, full.len()).ok()).collect::<Option<Vec<_>>>()?;
            (0..full.len()).map(|a| axes.contains(&a)).collect()
        }
        // Values of an axes input: the reduced axes are those whose length changed.
        None if !grad && matches!(node.inputs.get(1), Some(Some(_))) => {
            if full.len() != reduced.len() {
                return None;
            }
            full.iter().zip(reduced).map(|(f, r)| f != r).collect()
        }
        None => vec![grad || node.int("noop_with_empty_axes", 0) == 0; full.len()],
    };
    let keepdims = full.len() == reduced.len();
    let kept = (0..full.len()).filter(|&a| !is_reduced[a]);
    let pairs: Vec<(usize, usize)> =
        if keepdims { kept.map(|a| (a, a)).collect() } else { kept.enumerate().map(|(r, a)| (a, r)).collect() };
    pairs.iter().all(|&(f, r)| reduced.get(r) == Some(&full[f])).then_some(pairs)
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

/// The output axes the split dimensions name on `node` under `map`: batch axis 0 and
/// channel axis 1, but a matrix product's batch is the rows of a 2-D A and its channel
/// the columns.
fn split_axes(map: &AxesMap, node: &Node<'_>) -> Vec<(Dim, usize)> {
    match map {
        AxesMap::MatMul => {
            let (Some(Some(a)), Some(rank)) = (node.inputs.first(), node.out.len().checked_sub(2)) else {
                return Vec::new();
            };
            vec![(Dim::Batch, if a.len() == 2 { rank } else { 0 }), (Dim::Channel, rank + 1)]
        }
        _ => vec![(Dim::Batch, 0), (Dim::Channel, 1)],
    }
}

/// The split rules of `node` along the batch and channel where its axes map (that of
/// the op its parts run as, `split::part_op`) says it is independent: the inputs sliced
/// where the map slices them, the parts concatenated. The map is read without the
/// graph's opset, as before opset 13, where Softmax couples every axis from its own
/// (a superset of the axes it couples later); [`split::rules`] keeps the rules whose
/// sliced axes are long enough.
pub fn concat_rules(node: &CostNode<'_>) -> Vec<SplitRule> {
    let op = split::part_op(node.op, "").unwrap_or(node.op);
    let (Some(map), Some(out)) = (of(op), node.outputs.first()) else { return Vec::new() };
    let inputs: Vec<Option<&[usize]>> = node.inputs.iter().map(|t| t.map(|t| &t.shape[..])).collect();
    let axes_node = Node { inputs: &inputs, outputs: node.outputs.len(), out: &out.shape, attrs: node.attrs, opset: 0 };
    split_axes(&map, &axes_node)
        .into_iter()
        .filter_map(|(dim, axis)| match map.output_axis(&axes_node, axis) {
            OutputAxis::Independent(slots) => {
                let sliced: Vec<(usize, usize)> =
                    slots.iter().enumerate().filter_map(|(slot, a)| a.map(|a| (slot, a))).collect();
                Some(split::concat(dim, node.inputs.len(), &sliced, axis))
            }
            OutputAxis::Windowed | OutputAxis::Coupled => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Attr;

    /// What `op`'s map says along each axis of its output `out`, given its inputs' shapes.
    fn along(op: &str, attrs: Attrs, inputs: &[&[usize]], out: &[usize]) -> Vec<OutputAxis> {
        let inputs: Vec<Option<&[usize]>> = inputs.iter().copied().map(Some).collect();
        let node = Node { inputs: &inputs, outputs: 1, out, attrs: &attrs, opset: 17 };
        (0..out.len()).map(|a| of(op).unwrap().output_axis(&node, a)).collect()
    }

    fn ind(slots: &[Option<usize>]) -> OutputAxis {
        OutputAxis::Independent(slots.to_vec())
    }

    #[test]
    fn unit_axes_map_the_long_axes_in_order() {
        use OutputAxis::Coupled;
        let unsqueeze = along("Unsqueeze", Attrs::new(), &[&[4, 1, 6], &[2]], &[1, 4, 1, 6, 1]);
        assert_eq!(unsqueeze, [Coupled, ind(&[Some(0), None]), Coupled, ind(&[Some(2), None]), Coupled]);
        let squeeze = Attrs::new().with("axes", Attr::Ints(vec![0]));
        assert_eq!(along("Squeeze", squeeze, &[&[1, 4, 6]], &[4, 6]), [ind(&[Some(1)]), ind(&[Some(2)])]);
        // Given no axes, a part of length 1 would lose its axis too.
        assert_eq!(along("Squeeze", Attrs::new(), &[&[1, 4, 6]], &[4, 6]), [Coupled, Coupled]);
    }

    #[test]
    fn expand_is_independent_only_where_its_shape_input_names_no_length() {
        use OutputAxis::Coupled;
        // The shape input [2] names the last two axes: a part would expand to the whole.
        assert_eq!(
            along("Expand", Attrs::new(), &[&[4, 6, 1], &[2]], &[4, 6, 5]),
            [ind(&[Some(0), None]), Coupled, Coupled]
        );
        assert_eq!(along("Expand", Attrs::new(), &[&[1, 6], &[3]], &[4, 1, 6]), [Coupled, Coupled, Coupled]);
    }

    #[test]
    fn reductions_are_independent_along_their_kept_axes() {
        use OutputAxis::Coupled;
        let drop = |axes: Vec<i64>| Attrs::new().with("axes", Attr::Ints(axes)).with("keepdims", Attr::Int(0));
        assert_eq!(along("ReduceMax", drop(vec![-2]), &[&[4, 6, 5]], &[4, 5]), [ind(&[Some(0)]), ind(&[Some(2)])]);
        // An axes input with kept dims: the kept axes are those of unchanged length.
        assert_eq!(
            along("ReduceSum", Attrs::new(), &[&[4, 6, 5], &[1]], &[4, 1, 5]),
            [ind(&[Some(0), None]), Coupled, ind(&[Some(2), None])]
        );
        // An axes input that drops its axes: not known from the shapes.
        let dropped = Attrs::new().with("keepdims", Attr::Int(0));
        assert_eq!(along("ReduceSum", dropped, &[&[4, 6, 5], &[1]], &[4, 5]), [Coupled, Coupled]);
        // No axes: every axis reduced, unless told it is a no-op.
        assert_eq!(along("ReduceMean", Attrs::new(), &[&[4, 6]], &[1, 1]), [Coupled, Coupled]);
        let noop = Attrs::new().with("noop_with_empty_axes", Attr::Int(1));
        assert_eq!(along("ReduceMean", noop, &[&[4, 6]], &[4, 6]), [ind(&[Some(0)]), ind(&[Some(1)])]);
        assert_eq!(
            along("ReduceGrad", drop(vec![1]), &[&[4, 5]], &[4, 6, 5]),
            [ind(&[Some(0)]), Coupled, ind(&[Some(1)])]
        );
        assert_eq!(along("ReduceGrad", Attrs::new(), &[&[1, 1]], &[4, 6]), [Coupled, Coupled]);
    }

    #[test]
    fn slices_and_pads_given_by_inputs_are_independent_only_where_the_shapes_tell() {
        use OutputAxis::Coupled;
        // No axes input: the starts name the first axes.
        assert_eq!(
            along("Slice", Attrs::new(), &[&[4, 6], &[1], &[1]], &[2, 6]),
            [Coupled, ind(&[Some(1), None, None])]
        );
        // An axes input or a pads input: their values are not read.
        assert_eq!(along("Slice", Attrs::new(), &[&[4, 6], &[1], &[1], &[1]], &[2, 6]), [Coupled, Coupled]);
        assert_eq!(along("Pad", Attrs::new(), &[&[4, 6], &[4]], &[4, 8]), [Coupled, Coupled]);
        let crop = Attrs::new().with("pads", Attr::Ints(vec![0, 1, 0, -1]));
        assert_eq!(along("Pad", crop, &[&[4, 6]], &[4, 6]), [ind(&[Some(0)]), Coupled]);
    }

    #[test]
    fn gathers_and_channel_normalizations_slice_what_the_output_axis_comes_from() {
        use OutputAxis::Coupled;
        let axis = |a: i64| Attrs::new().with("axis", Attr::Int(a));
        let gather = along("Gather", axis(1), &[&[4, 6, 5], &[2, 3]], &[4, 2, 3, 5]);
        assert_eq!(
            gather,
            [ind(&[Some(0), None]), ind(&[None, Some(0)]), ind(&[None, Some(1)]), ind(&[Some(2), None])]
        );
        // GatherElements: both sliced where their lengths agree.
        let elements = along("GatherElements", axis(0), &[&[4, 6, 5], &[2, 6, 3]], &[2, 6, 3]);
        assert_eq!(elements, [Coupled, ind(&[Some(1), Some(1)]), Coupled]);
        let x: &[usize] = &[4, 6, 3];
        let bn = along("BatchNormalization", Attrs::new(), &[x, &[6], &[6], &[6], &[6]], x);
        let whole = |a| Some(a).into_iter().map(Some).chain([None; 4]).collect::<Vec<_>>();
        assert_eq!(bn, [ind(&whole(0)), ind(&[Some(1), Some(0), Some(0), Some(0), Some(0)]), ind(&whole(2))]);
        let instance = along("InstanceNormalization", Attrs::new(), &[x, &[6], &[6]], x);
        assert_eq!(instance, [ind(&[Some(0), None, None]), ind(&[Some(1), Some(0), Some(0)]), Coupled]);
    }
}
