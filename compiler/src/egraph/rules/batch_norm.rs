//! Batch normalization split along the batch (`shape::split`, the
//! Statistics rules), rule `batch-norm-parts`:
//!
//! ```text
//! out 0 (BatchNormTrain (concat 0 x0 .. xn) s b rm rv) = concat 0 (BatchNormApply xi s b (out 4 M))
//! out k (BatchNormTrain ...) = out k-1 M, M = (BatchNormMerge rm rv (BatchNormStatistics xi)..)
//! ```
//!
//! and the same for BatchNormGrad with `BatchNormGradSums`, `BatchNormGradMerge`
//! and `BatchNormGradData` over parts of dY and X of equal lengths. The
//! equations hold for any partition of the batch: the merge combines counts,
//! means and M2 (Chan et al.'s parallel variance) or adds gradient sums, so
//! every part uses the whole batch's statistics. In floats the merge reorders
//! sums (`shape::split::SUM_TOLERANCE`). [`Form`] states each decomposition
//! once, for this rule and for the split pass that emits it.

use super::class_rule::class_rule;
use crate::egraph::lang::{Head, Term, TermGraph, TermRewrite};
use crate::ir::{Attrs, DType, TensorType};
use egg::Id;
use lms_proto::contract::LMS_DOMAIN;
use lms_proto::contract::{
    BATCH_NORM_APPLY_OP, BATCH_NORM_GRAD_DATA_OP, BATCH_NORM_GRAD_MERGE_OP, BATCH_NORM_GRAD_SUMS_OP,
    BATCH_NORM_MERGE_OP, BATCH_NORM_STATISTICS_OP,
};
use std::sync::Arc;

/// Where an input of a decomposition's op comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// The part's slice of the split op's input at this slot.
    Part(usize),
    /// The split op's whole input at this slot.
    Whole(usize),
    /// The merge's last output: the whole batch's f64 statistics.
    Merged,
}

/// How an op splits along the batch by its statistics: per part a statistics
/// op, one merge, per part an apply op making the part's slice of output 0.
/// The merge's outputs are the op's outputs 1.. and then the f64
/// `[merged_rows, C]` statistics the apply ops read.
#[derive(Clone, Copy, Debug)]
pub struct Form {
    /// The op split.
    pub op: &'static str,
    /// The per-part statistics op (output: f64 `[3, C]`).
    pub statistics: &'static str,
    /// Its inputs.
    pub statistics_inputs: &'static [Source],
    /// The merge op.
    pub merge: &'static str,
    /// The split op's whole inputs the merge reads before the parts'
    /// statistics.
    pub merge_inputs: &'static [usize],
    /// Whether the merge has the split op's attributes (else none).
    pub merge_attrs: bool,
    /// Rows of the merge's last output.
    pub merged_rows: usize,
    /// The per-part apply op.
    pub apply: &'static str,
    /// Its inputs.
    pub apply_inputs: &'static [Source],
}

/// BatchNormTrain(X, scale, bias, running_mean, running_var).
pub const TRAIN: Form = Form {
    op: "BatchNormTrain",
    statistics: BATCH_NORM_STATISTICS_OP,
    statistics_inputs: &[Source::Part(0)],
    merge: BATCH_NORM_MERGE_OP,
    merge_inputs: &[3, 4],
    merge_attrs: true,
    merged_rows: 2,
    apply: BATCH_NORM_APPLY_OP,
    apply_inputs: &[Source::Part(0), Source::Whole(1), Source::Whole(2), Source::Merged],
};

/// BatchNormGrad(dY, X, scale, saved_mean, saved_invstd).
pub const GRAD: Form = Form {
    op: "BatchNormGrad",
    statistics: BATCH_NORM_GRAD_SUMS_OP,
    statistics_inputs: &[Source::Part(0), Source::Part(1), Source::Whole(3), Source::Whole(4)],
    merge: BATCH_NORM_GRAD_MERGE_OP,
    merge_inputs: &[],
    merge_attrs: false,
    merged_rows: 3,
    apply: BATCH_NORM_GRAD_DATA_OP,
    apply_inputs: &[
        Source::Part(0),
        Source::Part(1),
        Source::Whole(2),
        Source::Whole(3),
        Source::Whole(4),
        Source::Merged,
    ],
};

impl Form {
    /// The form of op `op`, if it splits by its statistics.
    pub fn of(op: &str) -> Option<&'static Form> {
        [&TRAIN, &GRAD].into_iter().find(|f| f.op == op)
    }

    /// The input slots the parts slice (along the batch).
    pub fn sliced(&self) -> Vec<usize> {
        self.statistics_inputs
            .iter()
            .filter_map(|s| match s {
                Source::Part(slot) => Some(*slot),
                _ => None,
            })
            .collect()
    }

    /// The number of input slots the decomposition reads.
    pub fn slots(&self) -> usize {
        let sources = self.statistics_inputs.iter().chain(self.apply_inputs);
        let read = sources.filter_map(|s| match s {
            Source::Part(slot) | Source::Whole(slot) => Some(*slot),
            Source::Merged => None,
        });
        read.chain(self.merge_inputs.iter().copied()).max().map_or(0, |m| m + 1)
    }

    /// The type of a part's statistics, of the merge's last output and of
    /// the merge's outputs, for `channels` channels and the split op's
    /// `outputs`.
    pub fn types(&self, channels: usize, outputs: &[TensorType]) -> (TensorType, Vec<TensorType>) {
        let statistics = TensorType::new(DType::F64, vec![3, channels]);
        let mut merged: Vec<TensorType> = outputs[1..].to_vec();
        merged.push(TensorType::new(DType::F64, vec![self.merged_rows, channels]));
        (statistics, merged)
    }

    /// The merge's attributes given the split op's.
    pub fn merge_attrs(&self, attrs: &Attrs) -> Attrs {
        if self.merge_attrs {
            attrs.clone()
        } else {
            Attrs::new()
        }
    }
}

/// `batch-norm-parts`.
pub fn rules() -> Vec<TermRewrite> {
    vec![class_rule(
        "batch-norm-parts",
        |g, c| !decompositions(g, c).is_empty(),
        |g: &mut TermGraph, c| decompositions(g, c).into_iter().flat_map(|d| d.apply(g)).collect(),
    )]
}

/// One split of a batch-norm op in `class` into parts.
struct Decomposition {
    class: Id,
    form: &'static Form,
    head: Arc<Head>,
    children: Vec<Id>,
    /// For each sliced slot, its parts (in `form.sliced()` order).
    parts: Vec<Vec<Id>>,
}

/// The ways the batch-norm ops in `class` split: their sliced inputs are
/// concatenations along the batch into parts of the same lengths.
fn decompositions(egraph: &TermGraph, class: Id) -> Vec<Decomposition> {
    let mut found = Vec::new();
    for node in &egraph[class].nodes {
        let Term::Op(symbol, children) = node else { continue };
        let Some(head) = egraph.analysis.lookup(*symbol) else { continue };
        let Some(form) = Form::of(&head.op).filter(|f| head.is(f.op) && head.outputs.len() > 1) else { continue };
        if children.len() < form.slots() {
            continue;
        }
        let sliced = form.sliced();
        let first = batch_concats(egraph, children[sliced[0]]);
        for (parts, lens) in first {
            let mut all = vec![parts];
            for &slot in &sliced[1..] {
                match batch_concats(egraph, children[slot]).into_iter().find(|(_, l)| *l == lens) {
                    Some((other, _)) => all.push(other),
                    None => break,
                }
            }
            if all.len() == sliced.len() {
                found.push(Decomposition { class, form, head: head.clone(), children: children.clone(), parts: all });
            }
        }
    }
    found
}

/// The concatenations along axis 0 in `class` of 2 or more non-empty parts
/// of rank 2 or more: their parts and lengths.
fn batch_concats(egraph: &TermGraph, class: Id) -> Vec<(Vec<Id>, Vec<usize>)> {
    egraph[class]
        .nodes
        .iter()
        .filter_map(|n| {
            let Term::Concat(ids) = n else { return None };
            let (d, parts) = ids.split_first()?;
            let lens: Option<Vec<usize>> = parts
                .iter()
                .map(|&p| egraph[p].data.shape().filter(|s| s.len() >= 2 && s[0] > 0).map(|s| s[0]))
                .collect();
            (egraph[*d].data.int() == Some(0) && parts.len() >= 2).then_some((parts.to_vec(), lens?))
        })
        .collect()
}

impl Decomposition {
    /// Adds the parts' statistics, the merge and the parts' apply ops, and
    /// equates the op's outputs with theirs; the classes that changed.
    fn apply(self, egraph: &mut TermGraph) -> Vec<Id> {
        let form = self.form;
        let sliced = form.sliced();
        let input = |source: Source, i: usize, merged: Option<Id>| match source {
            Source::Part(slot) => sliced.iter().position(|&s| s == slot).map(|k| self.parts[k][i]),
            Source::Whole(slot) => self.children.get(slot).copied(),
            Source::Merged => merged,
        };
        let Some(channels) = egraph[self.children[sliced[0]]].data.shape().and_then(|s| s.get(1).copied()) else {
            return Vec::new();
        };
        let (statistics_ty, merged_tys) = form.types(channels, &self.head.outputs);
        let statistics_head = egraph.analysis.head(form.statistics, LMS_DOMAIN, &Attrs::new(), vec![statistics_ty]);
        let count = self.parts[0].len();
        let mut merge_children: Vec<Id> = form.merge_inputs.iter().map(|&slot| self.children[slot]).collect();
        for i in 0..count {
            let Some(children) = form.statistics_inputs.iter().map(|&s| input(s, i, None)).collect() else {
                return Vec::new();
            };
            merge_children.push(egraph.add(Term::Op(statistics_head, children)));
        }
        let merge_head = egraph.analysis.head(form.merge, LMS_DOMAIN, &form.merge_attrs(&self.head.attrs), merged_tys);
        let merge = egraph.add(Term::Op(merge_head, merge_children));
        // The merge has the op's outputs 1.. and then the merged statistics.
        let merged_index = egraph.add(Term::Int((self.head.outputs.len() - 1) as i64));
        let merged = egraph.add(Term::Out([merged_index, merge]));
        let dtype = self.head.outputs[0].dtype;
        let mut applied = Vec::with_capacity(count);
        for i in 0..count {
            let Some(shape) = egraph[self.parts[0][i]].data.shape().cloned() else { return Vec::new() };
            let head = egraph.analysis.head(form.apply, LMS_DOMAIN, &Attrs::new(), vec![TensorType::new(dtype, shape)]);
            let Some(children) = form.apply_inputs.iter().map(|&s| input(s, i, Some(merged))).collect() else {
                return Vec::new();
            };
            applied.push(egraph.add(Term::Op(head, children)));
        }
        let axis = egraph.add(Term::Int(0));
        let concat = egraph.add(Term::Concat(std::iter::once(axis).chain(applied).collect()));
        let mut changed = Vec::new();
        let out = |egraph: &mut TermGraph, k: usize, node: Id| {
            let k = egraph.add(Term::Int(k as i64));
            egraph.add(Term::Out([k, node]))
        };
        let first = out(egraph, 0, self.class);
        if egraph.union(first, concat) {
            changed.push(concat);
        }
        for k in 1..self.head.outputs.len() {
            let (theirs, ours) = (out(egraph, k, self.class), out(egraph, k - 1, merge));
            if egraph.union(theirs, ours) {
                changed.push(ours);
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::{rules, Form, GRAD, TRAIN};
    use crate::egraph::lang::Term;
    use crate::egraph::rules::split;
    use crate::egraph::testing::{f32, Terms};
    use crate::ir::{Attr, Attrs, TensorType};
    use egg::Id;
    use lms_proto::contract::LMS_DOMAIN;

    /// An lms op with the given output types: the op's class.
    fn op(t: &mut Terms, op: &str, attrs: &Attrs, inputs: &[Id], outputs: Vec<TensorType>) -> Id {
        let head = t.egraph.analysis.head(op, LMS_DOMAIN, attrs, outputs);
        t.egraph.add(Term::Op(head, inputs.to_vec()))
    }

    /// Per part: `form`'s statistics op on `parts` (the sliced inputs), the
    /// merge and the apply ops, as the split pass emits them; `own` makes each
    /// part's apply read a merge of its own statistics only (wrong). Returns
    /// the concatenated applies and the merge.
    fn decomposed(
        t: &mut Terms,
        form: &Form,
        whole: &[Id],
        parts: &[Vec<Id>],
        outputs: &[TensorType],
        own: bool,
    ) -> (Id, Id) {
        let attrs = Attrs::new().with("momentum", Attr::Float(0.8));
        let (stat_ty, merged_tys) = form.types(4, outputs);
        let input = |s: super::Source, i: usize, merged: Id| match s {
            super::Source::Part(slot) => parts[form.sliced().iter().position(|&k| k == slot).unwrap()][i],
            super::Source::Whole(slot) => whole[slot],
            super::Source::Merged => merged,
        };
        let stats: Vec<Id> = (0..parts[0].len())
            .map(|i| {
                let children: Vec<Id> = form.statistics_inputs.iter().map(|&s| input(s, i, whole[0])).collect();
                op(t, form.statistics, &Attrs::new(), &children, vec![stat_ty.clone()])
            })
            .collect();
        let merge_of = |t: &mut Terms, stats: &[Id]| {
            let mut children: Vec<Id> = form.merge_inputs.iter().map(|&slot| whole[slot]).collect();
            children.extend(stats);
            let merge = op(t, form.merge, &form.merge_attrs(&attrs), &children, merged_tys.clone());
            (merge, t.out(outputs.len() as i64 - 1, merge))
        };
        let (merge, merged) = merge_of(t, &stats);
        let applied: Vec<Id> = (0..parts[0].len())
            .map(|i| {
                let merged = if own { merge_of(t, &stats[i..=i]).1 } else { merged };
                let children: Vec<Id> = form.apply_inputs.iter().map(|&s| input(s, i, merged)).collect();
                let shape = t.egraph[parts[0][i]].data.shape().unwrap().clone();
                op(t, form.apply, &Attrs::new(), &children, vec![f32(&shape)])
            })
            .collect();
        (t.concat(0, &applied), merge)
    }

    #[test]
    fn batch_norm_train_over_batch_parts_is_its_merged_statistics_applied_per_part() {
        let mut t = Terms::new();
        let attrs = Attrs::new().with("momentum", Attr::Float(0.8));
        let x = t.leaf("x", &[5, 4, 3, 3]);
        let whole: Vec<Id> = ["x", "scale", "bias", "rm", "rv"]
            .iter()
            .enumerate()
            .map(|(i, name)| if i == 0 { x } else { t.leaf(name, &[4]) })
            .collect();
        let outputs = vec![f32(&[5, 4, 3, 3]), f32(&[4]), f32(&[4]), f32(&[4]), f32(&[4])];
        let bn = op(&mut t, "BatchNormTrain", &attrs, &whole, outputs.clone());
        let xs = t.splits(0, 3, x);
        let (y, merge) = decomposed(&mut t, &TRAIN, &whole, std::slice::from_ref(&xs), &outputs, false);
        let (wrong, _) = decomposed(&mut t, &TRAIN, &whole, &[xs], &outputs, true);
        // Along channels: not a batch split.
        let cs = t.splits(1, 2, x);
        let (by_channel, _) = decomposed(&mut t, &TRAIN, &whole, &[cs], &outputs, false);
        let mut all = rules();
        all.extend(split::rules());
        t.run(&all);
        let (y0, mean, mean_merged) = (t.out(0, bn), t.out(3, bn), t.out(2, merge));
        assert!(t.equal(y0, y), "Y is the concatenated parts");
        assert!(t.equal(mean, mean_merged), "the saved mean is the merge's");
        assert!(!t.equal(y0, wrong), "parts normalized by their own statistics are not BatchNormTrain");
        assert!(!t.equal(y0, by_channel));
    }

    #[test]
    fn batch_norm_grad_needs_dy_and_x_split_alike() {
        let mut t = Terms::new();
        let shape: &[usize] = &[6, 4, 2];
        let (dy, x) = (t.leaf("dy", shape), t.leaf("x", shape));
        let mut whole = vec![dy, x];
        whole.extend(["scale", "mean", "invstd"].map(|name| t.leaf(name, &[4])));
        let outputs = vec![f32(shape), f32(&[4]), f32(&[4])];
        let grad = op(&mut t, "BatchNormGrad", &Attrs::new(), &whole, outputs.clone());
        let (dys, xs) = (t.splits(0, 2, dy), t.splits(0, 2, x));
        let (dx, merge) = decomposed(&mut t, &GRAD, &whole, &[dys, xs], &outputs, false);
        // dY in 2 parts and X in 3: no decomposition.
        let (dy2, x2) = (t.leaf("dy2", shape), t.leaf("x2", shape));
        let _ = (t.splits(0, 2, dy2), t.splits(0, 3, x2));
        let mut other = whole.clone();
        other[..2].copy_from_slice(&[dy2, x2]);
        let grad2 = op(&mut t, "BatchNormGrad", &Attrs::new(), &other, outputs.clone());
        let mut all = rules();
        all.extend(split::rules());
        t.run(&all);
        let (dx0, dscale, dscale_merged) = (t.out(0, grad), t.out(1, grad), t.out(0, merge));
        assert!(t.equal(dx0, dx));
        assert!(t.equal(dscale, dscale_merged));
        let dbias = t.out(2, grad);
        assert!(!t.equal(dbias, dscale_merged));
        let dx2 = t.out(0, grad2);
        assert!(!t.egraph[dx2].nodes.iter().any(|n| matches!(n, Term::Concat(_))), "dY and X split differently");
    }

    #[test]
    fn a_batch_norm_without_all_its_inputs_is_left_alone() {
        assert_eq!((TRAIN.slots(), GRAD.slots()), (5, 5));
        let mut t = Terms::new();
        let x = t.leaf("x", &[4, 2]);
        let _ = t.splits(0, 2, x);
        let scale = t.leaf("scale", &[2]);
        let outputs = vec![f32(&[4, 2]), f32(&[2]), f32(&[2]), f32(&[2]), f32(&[2])];
        let short = op(&mut t, "BatchNormTrain", &Attrs::new(), &[x, scale], outputs);
        let mut all = rules();
        all.extend(split::rules());
        t.run(&all);
        let y = t.out(0, short);
        assert!(!t.egraph[y].nodes.iter().any(|n| matches!(n, Term::Concat(_))));
    }
}
