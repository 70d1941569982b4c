//! Spatial splits with halos (Split-CNN §3), rule `distribute-halo`: a
//! windowed op equals the merge of the same op on the parts of
//! `shape::split::halo_parts`, each with its own pads.
//!
//! - Forward (Conv, MaxPool, AveragePool): `op(x) = concat_d(op_0(window_0(x)),
//!   ..., op_{n-1}(window_{n-1}(x)))`, where `window_i` is the lms
//!   `SplitWindow` of part i's input positions and `op_i` has part i's pads.
//! - Input gradients (ConvGradData, MaxPoolGrad, AveragePoolGrad):
//!   `op(dy, x) = OverlapAdd(op_0(split(d,0,n,dy), window_0(x)), ...)`, the
//!   parts' input-gradient windows added where they overlap.
//! - Weight gradient (ConvGradWeight): `Sum(op_0(split(d,0,n,dy),
//!   window_0(x)), ...)`.
//!
//! The geometry comes from the op itself (`shape::split::axis_window` and
//! `halo_parts`), never from the parts found in the e-graph: the rule fires
//! on an op for n parts along an axis only when every window and range its
//! parts read already occurs (the split pass made them), and then adds the
//! correctly windowed and padded parts. A split with a wrong window, wrong
//! pads or wrong offsets builds other terms and stays unproven. The forward
//! form is exact; the gradient forms reorder sums (`shape::split::SUM_TOLERANCE`).

use super::class_rule::class_rule;
use super::independence::axes_of;
use super::split::MAX_PARTS;
use crate::egraph::lang::{Head, Term, TermGraph, TermRewrite};
use crate::ir::{Attrs, TensorType, OVERLAP_ADD_OP, SPLIT_WINDOW_OP};
use crate::shape::cost::CostNode;
use crate::shape::split::{self, Combine, HaloOutput, HaloPart};
use crate::shape::AxesMap;
use egg::{Id, Symbol};
use lms_proto::contract::LMS_DOMAIN;
use std::sync::Arc;

/// Whether `head`'s op has Halo split rules: its axes map is windowed with halos.
fn windowed(head: &Head) -> bool {
    matches!(axes_of(head), Some(AxesMap::Windowed(w)) if w.halo)
}

/// `distribute-halo`.
pub fn rules() -> Vec<TermRewrite> {
    let windowed = |g: &TermGraph, c: Id| {
        g[c].nodes.iter().any(|n| {
            let Term::Op(symbol, _) = n else { return false };
            g.analysis.lookup(*symbol).is_some_and(|h| windowed(h))
        })
    };
    let apply = |g: &mut TermGraph, c| splits(g, c).into_iter().filter_map(|split| split.apply(g)).collect();
    vec![class_rule("distribute-halo", windowed, apply)]
}

/// One halo split of an op whose windows and ranges all occur.
struct HaloSplitOf {
    class: Id,
    head: Arc<Head>,
    children: Vec<Id>,
    axis: usize,
    output: HaloOutput,
    /// The parts' geometry.
    parts: Vec<HaloPart>,
    /// For each part, its inputs (windows and ranges in the sliced slots).
    inputs: Vec<Vec<Id>>,
}

/// The halo splits of the windowed ops in `class` whose parts' inputs all
/// occur in the e-graph.
fn splits(egraph: &mut TermGraph, class: Id) -> Vec<HaloSplitOf> {
    let mut found = Vec::new();
    let ops: Vec<(Symbol, Vec<Id>)> = egraph[class]
        .nodes
        .iter()
        .filter_map(|n| if let Term::Op(s, c) = n { Some((*s, c.clone())) } else { None })
        .collect();
    for (symbol, children) in ops {
        let Some(head) = egraph.analysis.lookup(symbol).cloned() else { continue };
        if !windowed(&head) {
            continue;
        }
        let [out] = &head.outputs[..] else { continue };
        let types: Option<Vec<TensorType>> =
            children.iter().map(|&c| egraph[c].data.shape().map(|s| TensorType::new(out.dtype, s.clone()))).collect();
        let Some(types) = types else { continue };
        let inputs: Vec<Option<&TensorType>> = types.iter().map(Some).collect();
        let outputs = [out];
        let cost = CostNode { op: &head.op, attrs: &head.attrs, inputs: &inputs, outputs: &outputs };
        for rule in split::rules(&cost) {
            let Combine::Halo { axis, output } = rule.combine else { continue };
            let Some(window) = split::axis_window(&cost, axis) else { continue };
            for count in 2..=MAX_PARTS.min(window.output) {
                let parts = split::halo_parts(&window, count);
                let Some(part_inputs) = find_inputs(egraph, &children, &types, &rule.inputs, axis, output, &parts)
                else {
                    continue;
                };
                found.push(HaloSplitOf {
                    class,
                    head: head.clone(),
                    children: children.clone(),
                    axis,
                    output,
                    parts,
                    inputs: part_inputs,
                });
            }
        }
    }
    found
}

/// Each part's inputs: the whole input where the rule does not slice it, the
/// `SplitWindow` of the part's input positions where it windows, the
/// `split` term of the part's output range where it slices in ranges;
/// `None` unless every window and range occurs.
fn find_inputs(
    egraph: &mut TermGraph,
    children: &[Id],
    types: &[TensorType],
    sliced: &[Option<usize>],
    axis: usize,
    output: HaloOutput,
    parts: &[HaloPart],
) -> Option<Vec<Vec<Id>>> {
    if parts.iter().any(|p| p.input.is_empty()) {
        return None;
    }
    let count = parts.len();
    let int = |egraph: &TermGraph, v: usize| egraph.lookup(Term::Int(v as i64));
    let mut all = Vec::with_capacity(count);
    for (i, part) in parts.iter().enumerate() {
        let mut inputs = children.to_vec();
        for (slot, s) in sliced.iter().enumerate() {
            if s.is_none() {
                continue;
            }
            inputs[slot] = if output.windows(slot) {
                let ty = split::with_len(&types[slot], axis, part.input.len());
                let head = egraph.analysis.head(
                    SPLIT_WINDOW_OP,
                    LMS_DOMAIN,
                    &split::window_attrs(axis, &part.input),
                    vec![ty],
                );
                egraph.lookup(Term::Op(head, vec![children[slot]]))?
            } else {
                let (d, index, n) = (int(egraph, axis)?, int(egraph, i)?, int(egraph, count)?);
                egraph.lookup(Term::Split([d, index, n, children[slot]]))?
            };
        }
        all.push(inputs);
    }
    Some(all)
}

impl HaloSplitOf {
    /// Adds the parts and their merge and makes the merge equal to the op;
    /// the merge's class when that changed the e-graph.
    fn apply(self, egraph: &mut TermGraph) -> Option<Id> {
        let whole = &self.head.outputs[0];
        let spatial = egraph[self.children[0]].data.shape()?.len().checked_sub(2)?;
        let mut made = Vec::with_capacity(self.parts.len());
        for (part, inputs) in self.parts.iter().zip(self.inputs) {
            let attrs = split::part_attrs(&self.head.attrs, self.axis, spatial, part);
            let ty = split::with_len(whole, self.axis, self.output.part_len(part, whole.shape[self.axis]));
            let head = egraph.analysis.head(&self.head.op, &self.head.domain, &attrs, vec![ty]);
            made.push(egraph.add(Term::Op(head, inputs)));
        }
        let merge = match self.output {
            HaloOutput::Concat => {
                let mut children = vec![egraph.add(Term::Int(self.axis as i64))];
                children.extend(made);
                egraph.add(Term::Concat(children.into()))
            }
            HaloOutput::OverlapAdd => {
                let attrs = split::overlap_add_attrs(self.axis, &self.parts);
                let head = egraph.analysis.head(OVERLAP_ADD_OP, LMS_DOMAIN, &attrs, vec![whole.clone()]);
                egraph.add(Term::Op(head, made))
            }
            HaloOutput::Sum => {
                let head = egraph.analysis.head("Sum", "", &Attrs::new(), vec![whole.clone()]);
                egraph.add(Term::Op(head, made))
            }
        };
        egraph.union(merge, self.class).then_some(merge)
    }
}

#[cfg(test)]
mod tests {
    use super::rules;
    use crate::egraph::testing::Terms;
    use crate::ir::{Attr, Attrs};

    fn window(t: &mut Terms, x: egg::Id, begin: i64, end: i64) -> egg::Id {
        let attrs = Attrs::new().with("axis", Attr::Int(2)).with("begin", Attr::Int(begin)).with("end", Attr::Int(end));
        t.ops("SplitWindow", "lms", attrs, &[x], &[&[1, 2, (end - begin) as usize, 8]])
    }

    fn pads(p: [i64; 4]) -> Attrs {
        Attrs::new().with("pads", Attr::Ints(p.to_vec()))
    }

    #[test]
    fn a_conv_is_the_concat_of_its_parts_on_overlapping_windows_only_with_their_own_pads() {
        let mut t = Terms::new();
        let (x, w) = (t.leaf("x", &[1, 2, 8, 8]), t.leaf("w", &[3, 2, 3, 3]));
        let conv = t.op("Conv", pads([1, 1, 1, 1]), &[x, w], &[1, 3, 8, 8]);
        let (top, bottom) = (window(&mut t, x, 0, 5), window(&mut t, x, 3, 8));
        let p0 = t.op("Conv", pads([1, 1, 0, 1]), &[top, w], &[1, 3, 4, 8]);
        let p1 = t.op("Conv", pads([0, 1, 1, 1]), &[bottom, w], &[1, 3, 4, 8]);
        let split = t.concat(2, &[p0, p1]);
        // The bottom part padded above instead of below: same shapes, other values.
        let wrong = t.op("Conv", pads([1, 1, 0, 1]), &[bottom, w], &[1, 3, 4, 8]);
        let wrong_split = t.concat(2, &[p0, wrong]);
        t.run(&rules());
        assert!(t.equal(conv, split));
        assert!(!t.equal(conv, wrong_split));
    }

    #[test]
    fn an_input_gradient_is_the_overlap_add_of_its_parts_gradients() {
        let mut t = Terms::new();
        let (dy, w) = (t.leaf("dy", &[1, 3, 8, 8]), t.leaf("w", &[3, 2, 3, 3]));
        let grad = |t: &mut Terms, p, dy, rows| t.ops("ConvGradData", "lms", pads(p), &[dy, w], &[&[1, 2, rows, 8]]);
        let dx = grad(&mut t, [1, 1, 1, 1], dy, 8);
        let halves = t.splits(2, 2, dy);
        let (p0, p1) = (grad(&mut t, [1, 1, 0, 1], halves[0], 5), grad(&mut t, [0, 1, 1, 1], halves[1], 5));
        let merge = |t: &mut Terms, begins: Vec<i64>| {
            let attrs = Attrs::new().with("axis", Attr::Int(2)).with("begins", Attr::Ints(begins));
            t.ops("OverlapAdd", "lms", attrs, &[p0, p1], &[&[1, 2, 8, 8]])
        };
        let (right, off) = (merge(&mut t, vec![0, 3]), merge(&mut t, vec![0, 2]));
        t.run(&rules());
        assert!(t.equal(dx, right));
        assert!(!t.equal(dx, off));
    }

    #[test]
    fn nothing_is_added_for_an_op_whose_windows_do_not_occur() {
        let mut t = Terms::new();
        let x = t.leaf("x", &[1, 2, 8, 8]);
        let pool = Attrs::new().with("kernel_shape", Attr::Ints(vec![2, 2]));
        t.op("MaxPool", pool, &[x], &[1, 2, 7, 7]);
        let before = t.egraph.total_number_of_nodes();
        t.run(&rules());
        assert_eq!(t.egraph.total_number_of_nodes(), before);
    }
}
