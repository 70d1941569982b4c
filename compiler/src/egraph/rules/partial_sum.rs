//! Partial sums: `op(concat_d(a0, a1), concat_e(b0, b1)) = Sum(op(a0, b0),
//! op(a1, b1))` for an op that reduces over the sliced axes (TSPLIT §III-B:
//! weight gradients over the batch, a contraction over its reduced
//! channels), rule `distribute-sum`.
//!
//! Which ops and which inputs come from the ops' split rules
//! (`shape::split`, the Sum rules), so the e-graph proves exactly the splits
//! the split pass emits. The rule matches an op whose sliced inputs each
//! have a concatenation along the rule's axis into parts of the same
//! lengths, adds the op on each part (with the whole output type) and makes
//! their ONNX `Sum`, and their running sum of `Add`s, equal to the op. It is an equation of real numbers: in
//! floats it reorders a sum (`shape::split::SUM_TOLERANCE`).

use super::class_rule::class_rule;
use super::distribute::part_symbol;
use crate::egraph::lang::{Head, Term, TermGraph, TermRewrite};
use crate::ir::{Attrs, Shape, TensorType};
use crate::shape::cost::CostNode;
use crate::shape::split::{self, Combine};
use egg::Id;
use std::sync::Arc;

/// `distribute-sum`.
pub fn rules() -> Vec<TermRewrite> {
    let apply = |g: &mut TermGraph, c| sums(g, c).into_iter().filter_map(|s| s.apply(g)).collect();
    vec![class_rule("distribute-sum", |g, c| !sums(g, c).is_empty(), apply)]
}

/// One way to compute an op as a sum of partial results.
struct PartialSums {
    class: Id,
    head: Arc<Head>,
    /// Each part's inputs.
    parts: Vec<Vec<Id>>,
    /// The whole op's input 0 shape.
    whole_input0: Shape,
}

/// The partial-sum forms of the single-output ops in `class`.
fn sums(egraph: &TermGraph, class: Id) -> Vec<PartialSums> {
    let mut found = Vec::new();
    for node in &egraph[class].nodes {
        let Term::Op(symbol, children) = node else { continue };
        let Some(head) = egraph.analysis.lookup(*symbol) else { continue };
        let [out] = &head.outputs[..] else { continue };
        let types: Option<Vec<TensorType>> =
            children.iter().map(|&c| egraph[c].data.shape().map(|s| TensorType::new(out.dtype, s.clone()))).collect();
        let Some(types) = types else { continue };
        let inputs: Vec<Option<&TensorType>> = types.iter().map(Some).collect();
        let outputs = [out];
        let cost = CostNode { op: &head.op, attrs: &head.attrs, inputs: &inputs, outputs: &outputs };
        for rule in split::rules(&cost).into_iter().filter(|r| r.combine == Combine::Sum) {
            found.extend(match_parts(egraph, class, head, children, &rule.inputs));
        }
    }
    found
}

/// The partial sums of one op whose inputs at `sliced` slots are
/// concatenations along the given axes into parts of equal lengths: one for
/// each concatenation of the first sliced input (a tensor may be split into
/// several part counts) that the other sliced inputs match.
fn match_parts(
    egraph: &TermGraph,
    class: Id,
    head: &Arc<Head>,
    children: &[Id],
    sliced: &[Option<usize>],
) -> Vec<PartialSums> {
    // The concatenations of `children[slot]` along `axis`: parts and lengths.
    let concats = |slot: usize, axis: usize| -> Vec<(&[Id], Vec<usize>)> {
        egraph[children[slot]]
            .nodes
            .iter()
            .filter_map(|n| {
                let Term::Concat(ids) = n else { return None };
                let (d, parts) = ids.split_first()?;
                let d = usize::try_from(egraph[*d].data.int()?).ok()?;
                let lens: Option<Vec<usize>> =
                    parts.iter().map(|&p| egraph[p].data.shape().and_then(|s| s.get(axis).copied())).collect();
                (d == axis).then_some((parts, lens?))
            })
            .collect()
    };
    let slots: Vec<(usize, usize)> = sliced.iter().enumerate().filter_map(|(s, a)| a.map(|a| (s, a))).collect();
    let Some((&(first, first_axis), rest)) = slots.split_first() else { return Vec::new() };
    let mut found = Vec::new();
    for (parts, lens) in concats(first, first_axis) {
        let mut slot_parts: Vec<Option<&[Id]>> = vec![None; children.len()];
        slot_parts[first] = Some(parts);
        let matched = rest.iter().all(|&(slot, axis)| {
            let same = concats(slot, axis).into_iter().find(|(_, l)| *l == lens);
            same.map(|(p, _)| slot_parts[slot] = Some(p)).is_some()
        });
        if !matched {
            continue;
        }
        let parts = (0..lens.len())
            .map(|k| children.iter().zip(&slot_parts).map(|(&whole, ps)| ps.map_or(whole, |ps| ps[k])).collect())
            .collect();
        let whole_input0 = egraph[children[0]].data.shape().cloned().unwrap_or_default();
        found.push(PartialSums { class, head: head.clone(), parts, whole_input0 });
    }
    found
}

impl PartialSums {
    /// Adds the partial ops, their Sum and their running sum (each part
    /// added to the sum of those before it, as the split pass accumulates
    /// them); the Sum's class when it changed.
    fn apply(self, egraph: &mut TermGraph) -> Option<Id> {
        let symbol = part_symbol(egraph, &self.head, &self.whole_input0, self.head.outputs.clone());
        let partials: Vec<Id> = self.parts.into_iter().map(|children| egraph.add(Term::Op(symbol, children))).collect();
        let add_head = egraph.analysis.head("Add", "", &Attrs::new(), self.head.outputs.clone());
        let running = partials[1..].iter().fold(partials[0], |acc, &p| egraph.add(Term::Op(add_head, vec![acc, p])));
        let sum_head = egraph.analysis.head("Sum", "", &Attrs::new(), self.head.outputs.clone());
        let sum = egraph.add(Term::Op(sum_head, partials));
        let changed = egraph.union(running, self.class);
        (egraph.union(sum, self.class) || changed).then_some(sum)
    }
}

#[cfg(test)]
mod tests {
    use super::rules;
    use crate::egraph::testing::Terms;
    use crate::ir::{Attr, Attrs};

    #[test]
    fn a_weight_gradient_over_a_split_batch_is_the_sum_of_the_parts_gradients() {
        let mut t = Terms::new();
        let attrs = Attrs::new().with("pads", Attr::Ints(vec![1, 1, 1, 1]));
        let (dy0, dy1) = (t.leaf("dy0", &[2, 6, 8, 8]), t.leaf("dy1", &[2, 6, 8, 8]));
        let (x0, x1) = (t.leaf("x0", &[2, 3, 8, 8]), t.leaf("x1", &[2, 3, 8, 8]));
        let (dy, x) = (t.concat(0, &[dy0, dy1]), t.concat(0, &[x0, x1]));
        let dw = t.ops("ConvGradWeight", "lms", attrs.clone(), &[dy, x], &[&[6, 3, 3, 3]]);
        let p0 = t.ops("ConvGradWeight", "lms", attrs.clone(), &[dy0, x0], &[&[6, 3, 3, 3]]);
        let p1 = t.ops("ConvGradWeight", "lms", attrs.clone(), &[dy1, x1], &[&[6, 3, 3, 3]]);
        let sum = t.op("Sum", Attrs::new(), &[p0, p1], &[6, 3, 3, 3]);
        let running = t.op("Add", Attrs::new(), &[p0, p1], &[6, 3, 3, 3]);
        // Parts in the other order are a different sum, and a split of only
        // dY does not give partial results.
        let swapped = t.op("Sum", Attrs::new(), &[p1, p0], &[6, 3, 3, 3]);
        let half = t.ops("ConvGradWeight", "lms", attrs, &[dy0, x], &[&[6, 3, 3, 3]]);
        t.run(&rules());
        assert!(t.equal(dw, sum));
        assert!(t.equal(dw, running));
        assert!(!t.equal(dw, swapped));
        assert!(!t.equal(half, sum));
    }

    #[test]
    fn a_tensor_split_into_two_part_counts_gives_both_partial_sums() {
        let mut t = Terms::new();
        let dy = t.leaf("dy", &[6, 4, 2, 2]);
        let mut sums = Vec::new();
        for n in [2, 3] {
            let partials: Vec<_> = t
                .splits(0, n, dy)
                .into_iter()
                .map(|part| t.ops("ConvGradBias", "lms", Attrs::new(), &[part], &[&[4]]))
                .collect();
            sums.push(t.op("Sum", Attrs::new(), &partials, &[4]));
        }
        let db = t.ops("ConvGradBias", "lms", Attrs::new(), &[dy], &[&[4]]);
        let mut all = rules();
        all.extend(crate::egraph::rules::split::rules());
        t.run(&all);
        assert!(sums.iter().all(|&s| t.equal(db, s)));
    }

    #[test]
    fn a_matmul_split_along_its_reduction_is_a_sum() {
        let mut t = Terms::new();
        let (a0, a1) = (t.leaf("a0", &[4, 3]), t.leaf("a1", &[4, 3]));
        let (b0, b1) = (t.leaf("b0", &[3, 5]), t.leaf("b1", &[3, 5]));
        let (a, b) = (t.concat(1, &[a0, a1]), t.concat(0, &[b0, b1]));
        let mm = t.op("MatMul", Attrs::new(), &[a, b], &[4, 5]);
        let p0 = t.op("MatMul", Attrs::new(), &[a0, b0], &[4, 5]);
        let p1 = t.op("MatMul", Attrs::new(), &[a1, b1], &[4, 5]);
        let sum = t.op("Sum", Attrs::new(), &[p0, p1], &[4, 5]);
        // Rows of A with the reduction of B: not a partial sum.
        let (r0, r1) = (t.leaf("r0", &[2, 3]), t.leaf("r1", &[2, 3]));
        let rows = t.concat(0, &[r0, r1]);
        let wrong = t.op("MatMul", Attrs::new(), &[rows, b], &[4, 5]);
        t.run(&rules());
        assert!(t.equal(mm, sum));
        assert_eq!(t.egraph[wrong].nodes.len(), 1);
    }
}
