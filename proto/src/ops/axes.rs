//! The axes map of an op: for each axis of its output, which input axes it comes from
//! and whether the op is independent along it (its parts, computed on slices of those
//! input axes, concatenate to the whole output), windowed (parts need halos and their
//! own pads) or coupled (it reduces or mixes positions along the axis).
//!
//! It is the one source of the split legality of the ops that have one (their split
//! rules along concatenated axes, [`concat_rules`]) and of the e-graph's independence
//! facts for them (the compiler's `egraph::rules::independence` and `halo`). Each family
//! lists its ops' maps in an `AXES` table beside its other rules.

use super::cost::CostNode;
use super::split::{self, Dim, SplitRule};

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

impl AxesMap {
    /// What the op does along output `axis`, given its inputs' shapes (`None` for an
    /// omitted input) and its output's shape (output 0; the map is of single-output ops).
    pub fn output_axis(&self, inputs: &[Option<&[usize]>], outputs: usize, out: &[usize], axis: usize) -> OutputAxis {
        let Some(&len) = out.get(axis) else { return OutputAxis::Coupled };
        if outputs != 1 {
            return OutputAxis::Coupled;
        }
        let independent =
            |slots: Option<Vec<Option<usize>>>| slots.map_or(OutputAxis::Coupled, OutputAxis::Independent);
        match *self {
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
        }
    }
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
    along
        .iter()
        .filter_map(|&(dim, axis)| match map.output_axis(&inputs, node.outputs.len(), &out.shape, axis) {
            OutputAxis::Independent(slots) => {
                let sliced: Vec<(usize, usize)> =
                    slots.iter().enumerate().filter_map(|(slot, a)| a.map(|a| (slot, a))).collect();
                Some(split::concat(dim, node.inputs.len(), &sliced, axis))
            }
            OutputAxis::Windowed | OutputAxis::Coupled => None,
        })
        .collect()
}
