//! Distribution over concatenation: `op(concat_d(a, b)) = concat_d(op(a),
//! op(b))` for ops independent along d, one rule per family of
//! [`independence`](super::independence) (`distribute-elementwise`, ...).
//!
//! The rule matches an op whose inputs that must be split (by its family's
//! condition) each have a concatenation along the right axis into parts of
//! the same lengths; inputs read whole are shared by every part. It adds the
//! op applied to each part (its output types shortened along d) and makes
//! their concatenation equal to the op's output; for a multi-output op, each
//! output `(out j op)` equals the concatenation of the parts' outputs j.

use super::class_rule::class_rule;
use super::independence::{Family, FAMILIES};
use crate::egraph::lang::{Head, Term, TermGraph, TermRewrite};
use crate::ir::{Shape, TensorType};
use crate::shape::split;
use egg::{Id, Symbol};
use std::sync::Arc;

/// `distribute-{family}` for every family.
pub fn rules() -> Vec<TermRewrite> {
    FAMILIES
        .iter()
        .map(|family| {
            // Matches e-classes with a distributable op and distributes every one of them.
            class_rule(
                format!("distribute-{}", family.name),
                move |g, c| !distributions(g, c, family).is_empty(),
                move |g: &mut TermGraph, c| distributions(g, c, family).into_iter().flat_map(|d| d.apply(g)).collect(),
            )
        })
        .collect()
}

/// One way to distribute an op over its split inputs.
struct Distribution {
    /// The op's e-class.
    class: Id,
    head: Arc<Head>,
    /// The output axis the parts split.
    axis: usize,
    /// Each part's length along `axis`.
    lens: Vec<usize>,
    /// Each part's inputs.
    parts: Vec<Vec<Id>>,
    /// The whole op's input 0 shape.
    whole_input0: Shape,
}

/// The distributions of the ops of `family` in e-class `class`.
fn distributions(egraph: &TermGraph, class: Id, family: &Family) -> Vec<Distribution> {
    let mut found = Vec::new();
    for node in &egraph[class].nodes {
        let Term::Op(symbol, children) = node else {
            continue;
        };
        let Some(head) = egraph.analysis.lookup(*symbol) else {
            continue;
        };
        let Some(first) = head.outputs.first() else {
            continue;
        };
        if !children.iter().any(|&c| concats(egraph, c).next().is_some()) {
            continue;
        }
        let shapes: Vec<Option<&Shape>> = children.iter().map(|&c| egraph[c].data.shape()).collect();
        for axis in 0..first.rank() {
            if let Some(splits) = family.split_inputs(head, &shapes, axis, egraph.analysis.opset) {
                found.extend(match_parts(egraph, class, head, children, &splits, axis));
            }
        }
    }
    found
}

/// The concatenations in an e-class: (axis, parts).
fn concats(egraph: &TermGraph, class: Id) -> impl Iterator<Item = (usize, &[Id])> {
    egraph[class].nodes.iter().filter_map(|node| match node {
        Term::Concat(ids) => {
            let (d, parts) = ids.split_first()?;
            let d = usize::try_from(egraph[*d].data.int()?).ok()?;
            Some((d, parts))
        }
        _ => None,
    })
}

/// Lengths of parts along an axis.
fn lens(egraph: &TermGraph, parts: &[Id], axis: usize) -> Option<Vec<usize>> {
    parts.iter().map(|&p| egraph[p].data.shape().and_then(|s| s.get(axis).copied())).collect()
}

/// The distributions of one op along output axis `axis`, whose inputs split
/// as `splits`: one per concatenation of the first split input whose part
/// lengths every other split input also has a concatenation of.
fn match_parts(
    egraph: &TermGraph,
    class: Id,
    head: &Arc<Head>,
    children: &[Id],
    splits: &[Option<usize>],
    axis: usize,
) -> Vec<Distribution> {
    let len = head.outputs[0].shape[axis];
    if !head.outputs.iter().all(|t| t.shape.get(axis) == Some(&len)) {
        return Vec::new();
    }
    let split: Vec<(usize, usize)> = splits.iter().enumerate().filter_map(|(slot, a)| a.map(|a| (slot, a))).collect();
    let Some((&(first, first_axis), others)) = split.split_first() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for (_, parts) in concats(egraph, children[first]).filter(|&(d, _)| d == first_axis) {
        let Some(part_lens) = lens(egraph, parts, first_axis) else {
            continue;
        };
        if part_lens.iter().sum::<usize>() != len {
            continue;
        }
        let mut slot_parts: Vec<Option<&[Id]>> = vec![None; children.len()];
        slot_parts[first] = Some(parts);
        let all_split = others.iter().all(|&(slot, a)| {
            let same = concats(egraph, children[slot])
                .find(|&(d, ps)| d == a && lens(egraph, ps, a).as_ref() == Some(&part_lens))
                .map(|(_, ps)| ps);
            slot_parts[slot] = same;
            same.is_some()
        });
        if !all_split {
            continue;
        }
        let parts = (0..part_lens.len())
            .map(|k| children.iter().zip(&slot_parts).map(|(&whole, ps)| ps.map_or(whole, |ps| ps[k])).collect())
            .collect();
        let whole_input0 = egraph[children[0]].data.shape().cloned().unwrap_or_default();
        found.push(Distribution { class, head: head.clone(), axis, lens: part_lens, parts, whole_input0 });
    }
    found
}

/// The head of a part of the op of `head` whose whole input 0 has shape
/// `input0`, with the part's `outputs`: the op's attributes, or those
/// telling a part the whole op's count (`shape::split::whole_count_attrs`).
pub(super) fn part_symbol(egraph: &mut TermGraph, head: &Head, input0: &[usize], outputs: Vec<TensorType>) -> Symbol {
    match split::whole_count_attrs(&head.op, &head.attrs, input0) {
        Some(attrs) => egraph.analysis.head(&head.op, &head.domain, &attrs, outputs),
        None => egraph.analysis.with_outputs(head, outputs),
    }
}

impl Distribution {
    /// Adds the parts and their concatenations; returns the classes that
    /// changed.
    fn apply(self, egraph: &mut TermGraph) -> Vec<Id> {
        let axis = egraph.add(Term::Int(self.axis as i64));
        let part_ops: Vec<Id> = self
            .parts
            .into_iter()
            .zip(&self.lens)
            .map(|(children, &len)| {
                let outputs = self
                    .head
                    .outputs
                    .iter()
                    .map(|ty| {
                        let mut ty = ty.clone();
                        ty.shape[self.axis] = len;
                        ty
                    })
                    .collect();
                let symbol = part_symbol(egraph, &self.head, &self.whole_input0, outputs);
                egraph.add(Term::Op(symbol, children))
            })
            .collect();
        let mut changed = Vec::new();
        if self.head.outputs.len() == 1 {
            let concat = egraph.add(Term::Concat(std::iter::once(axis).chain(part_ops).collect()));
            if egraph.union(concat, self.class) {
                changed.push(concat);
            }
            return changed;
        }
        for j in 0..self.head.outputs.len() {
            let j = egraph.add(Term::Int(j as i64));
            let whole = egraph.add(Term::Out([j, self.class]));
            let parts: Vec<Id> = part_ops.iter().map(|&p| egraph.add(Term::Out([j, p]))).collect();
            let concat = egraph.add(Term::Concat(std::iter::once(axis).chain(parts).collect()));
            if egraph.union(concat, whole) {
                changed.push(concat);
            }
        }
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::rules;
    use crate::egraph::lang::TermRewrite;
    use crate::egraph::rules::split;
    use crate::egraph::testing::Terms;
    use crate::ir::{Attr, Attrs};
    use egg::Id;

    fn rule(name: &str) -> Vec<TermRewrite> {
        rules().into_iter().filter(|r| r.name.as_str() == name).collect()
    }

    /// `x` of shape `[4, rest...]` as the concatenation of two halves along
    /// axis `d`: (x, the halves, the concat).
    fn halves(t: &mut Terms, name: &str, shape: &[usize], d: usize) -> (Vec<Id>, Id) {
        let mut half = shape.to_vec();
        half[d] /= 2;
        let parts = vec![t.leaf(&format!("{name}0"), &half), t.leaf(&format!("{name}1"), &half)];
        let whole = t.concat(d as i64, &parts);
        (parts, whole)
    }

    fn with(name: &str, value: Attr) -> Attrs {
        Attrs::new().with(name, value)
    }

    #[test]
    fn elementwise_unary_distributes_along_any_axis() {
        let mut t = Terms::new();
        for d in 0..2 {
            let (parts, x) = halves(&mut t, &format!("x{d}_"), &[4, 6], d);
            let relu = t.op("Relu", Attrs::new(), &[x], &[4, 6]);
            let half: &[usize] = if d == 0 { &[2, 6] } else { &[4, 3] };
            let p0 = t.op("Relu", Attrs::new(), &[parts[0]], half);
            let p1 = t.op("Relu", Attrs::new(), &[parts[1]], half);
            let split_form = t.concat(d as i64, &[p0, p1]);
            t.run(&rule("distribute-elementwise"));
            assert!(t.equal(relu, split_form), "axis {d}");
        }
    }

    #[test]
    fn elementwise_binary_distributes_with_a_broadcast_or_equally_split_operand() {
        let mut t = Terms::new();
        let (a, x) = halves(&mut t, "a", &[4, 6], 0);
        let bias = t.leaf("bias", &[6]);
        let add = t.op("Add", Attrs::new(), &[x, bias], &[4, 6]);
        let (b, y) = halves(&mut t, "b", &[4, 6], 0);
        let mul = t.op("Mul", Attrs::new(), &[x, y], &[4, 6]);
        let add_parts: Vec<Id> = a.iter().map(|&p| t.op("Add", Attrs::new(), &[p, bias], &[2, 6])).collect();
        let mul_parts: Vec<Id> = a.iter().zip(&b).map(|(&p, &q)| t.op("Mul", Attrs::new(), &[p, q], &[2, 6])).collect();
        let (add_split, mul_split) = (t.concat(0, &add_parts), t.concat(0, &mul_parts));
        t.run(&rule("distribute-elementwise"));
        assert!(t.equal(add, add_split));
        assert!(t.equal(mul, mul_split));
    }

    #[test]
    fn elementwise_binary_does_not_distribute_with_a_whole_full_size_operand_or_other_parts() {
        let mut t = Terms::new();
        let (_, x) = halves(&mut t, "a", &[4, 6], 0);
        let full = t.leaf("full", &[4, 6]);
        let add = t.op("Add", Attrs::new(), &[x, full], &[4, 6]);
        // Parts of lengths 1 and 3 against parts of 2 and 2.
        let (c, d) = (t.leaf("c", &[1, 6]), t.leaf("d", &[3, 6]));
        let y = t.concat(0, &[c, d]);
        let mul = t.op("Mul", Attrs::new(), &[x, y], &[4, 6]);
        t.run(&rule("distribute-elementwise"));
        assert_eq!(t.egraph[add].nodes.len(), 1, "Add got no split form");
        assert_eq!(t.egraph[mul].nodes.len(), 1, "Mul got no split form");
    }

    #[test]
    fn windowed_ops_distribute_per_sample_and_pooling_per_channel() {
        let mut t = Terms::new();
        let (xs, x) = halves(&mut t, "x", &[4, 3, 8, 8], 0);
        let w = t.leaf("w", &[6, 3, 3, 3]);
        let conv_attrs = with("pads", Attr::Ints(vec![1, 1, 1, 1]));
        let conv = t.op("Conv", conv_attrs.clone(), &[x, w], &[4, 6, 8, 8]);
        let parts: Vec<Id> = xs.iter().map(|&p| t.op("Conv", conv_attrs.clone(), &[p, w], &[2, 6, 8, 8])).collect();
        let conv_split = t.concat(0, &parts);
        let (cs, c) = halves(&mut t, "c", &[2, 4, 8, 8], 1);
        let pool_attrs = with("kernel_shape", Attr::Ints(vec![2, 2])).with("strides", Attr::Ints(vec![2, 2]));
        let pool = t.op("MaxPool", pool_attrs.clone(), &[c], &[2, 4, 4, 4]);
        let pool_parts: Vec<Id> =
            cs.iter().map(|&p| t.op("MaxPool", pool_attrs.clone(), &[p], &[2, 2, 4, 4])).collect();
        let pool_split = t.concat(1, &pool_parts);
        t.run(&rule("distribute-windowed"));
        assert!(t.equal(conv, conv_split));
        assert!(t.equal(pool, pool_split));
    }

    #[test]
    fn windowed_ops_do_not_distribute_spatially_nor_conv_across_channels_nor_weight_gradients() {
        let mut t = Terms::new();
        let w = t.leaf("w", &[6, 3, 3, 3]);
        let (_, rows) = halves(&mut t, "h", &[2, 3, 8, 8], 2);
        let spatial = t.op("Conv", with("pads", Attr::Ints(vec![1, 1, 1, 1])), &[rows, w], &[2, 6, 8, 8]);
        let (_, channels) = halves(&mut t, "c", &[2, 4, 8, 8], 1);
        let w4 = t.leaf("w4", &[6, 4, 1, 1]);
        let across = t.op("Conv", Attrs::new(), &[channels, w4], &[2, 6, 8, 8]);
        let (_, dy) = halves(&mut t, "dy", &[4, 6, 8, 8], 0);
        let (_, x) = halves(&mut t, "x", &[4, 3, 8, 8], 0);
        let dw = t.ops("ConvGradWeight", "lms", with("pads", Attr::Ints(vec![1, 1, 1, 1])), &[dy, x], &[&[6, 3, 3, 3]]);
        let db = t.ops("ConvGradBias", "lms", Attrs::new(), &[dy], &[&[6]]);
        let before = t.egraph.total_number_of_nodes();
        t.run(&rule("distribute-windowed"));
        assert_eq!(t.egraph.total_number_of_nodes(), before);
        for op in [spatial, across, dw, db] {
            assert_eq!(t.egraph[op].nodes.len(), 1);
        }
    }

    #[test]
    fn batch_norm_in_training_does_not_distribute_across_the_batch() {
        let mut t = Terms::new();
        let (_, x) = halves(&mut t, "x", &[4, 3, 2, 2], 0);
        let c: Vec<Id> = ["scale", "bias", "mean", "var"].iter().map(|n| t.leaf(n, &[3])).collect();
        let shapes: &[&[usize]] = &[&[4, 3, 2, 2], &[3], &[3], &[3], &[3]];
        let bn = t.ops("BatchNormTrain", "lms", Attrs::new(), &[x, c[0], c[1], c[2], c[3]], shapes);
        let y = t.out(0, bn);
        let before = t.egraph.total_number_of_nodes();
        t.run(&rules());
        assert_eq!(t.egraph.total_number_of_nodes(), before);
        assert_eq!(t.egraph[y].nodes.len(), 1);
    }

    #[test]
    fn softmax_distributes_along_other_axes_only() {
        let mut t = Terms::new();
        let (rows, x) = halves(&mut t, "x", &[4, 10], 0);
        let softmax = t.op("Softmax", with("axis", Attr::Int(-1)), &[x], &[4, 10]);
        let parts: Vec<Id> =
            rows.iter().map(|&p| t.op("Softmax", with("axis", Attr::Int(-1)), &[p], &[2, 10])).collect();
        let split_form = t.concat(0, &parts);
        let (_, cols) = halves(&mut t, "y", &[4, 10], 1);
        let own_axis = t.op("Softmax", with("axis", Attr::Int(1)), &[cols], &[4, 10]);
        t.run(&rule("distribute-normalization"));
        assert!(t.equal(softmax, split_form));
        assert_eq!(t.egraph[own_axis].nodes.len(), 1, "Softmax along its own axis");
    }

    #[test]
    fn layer_norm_distributes_every_output_outside_its_normalized_axes() {
        let mut t = Terms::new();
        let (rows, x) = halves(&mut t, "x", &[4, 8], 0);
        let (scale, bias) = (t.leaf("scale", &[8]), t.leaf("bias", &[8]));
        let attrs = with("axis", Attr::Int(-1));
        let ln = t.ops("LayerNormalization", "", attrs.clone(), &[x, scale, bias], &[&[4, 8], &[4, 1], &[4, 1]]);
        let parts: Vec<Id> = rows
            .iter()
            .map(|&p| t.ops("LayerNormalization", "", attrs.clone(), &[p, scale, bias], &[&[2, 8], &[2, 1], &[2, 1]]))
            .collect();
        let mut pairs = Vec::new();
        for j in 0..3 {
            let whole = t.out(j, ln);
            let outs: Vec<Id> = parts.iter().map(|&p| t.out(j, p)).collect();
            pairs.push((whole, t.concat(0, &outs)));
        }
        let (_, cols) = halves(&mut t, "y", &[4, 8], 1);
        let own = t.ops("LayerNormalization", "", attrs, &[cols, scale, bias], &[&[4, 8], &[4, 1], &[4, 1]]);
        let own_y = t.out(0, own);
        t.run(&rule("distribute-normalization"));
        for (whole, split_form) in pairs {
            assert!(t.equal(whole, split_form));
        }
        assert_eq!(t.egraph[own_y].nodes.len(), 1, "LayerNormalization along its normalized axis");
    }

    #[test]
    fn matmul_distributes_rows_and_columns_and_gemm_rows() {
        let mut t = Terms::new();
        let (a_rows, a) = halves(&mut t, "a", &[4, 8], 0);
        let b = t.leaf("b", &[8, 6]);
        let rows = t.op("MatMul", Attrs::new(), &[a, b], &[4, 6]);
        let row_parts: Vec<Id> = a_rows.iter().map(|&p| t.op("MatMul", Attrs::new(), &[p, b], &[2, 6])).collect();
        let rows_split = t.concat(0, &row_parts);
        let whole_a = t.leaf("whole_a", &[4, 8]);
        let (b_cols, b_split) = halves(&mut t, "c", &[8, 6], 1);
        let cols = t.op("MatMul", Attrs::new(), &[whole_a, b_split], &[4, 6]);
        let col_parts: Vec<Id> = b_cols.iter().map(|&p| t.op("MatMul", Attrs::new(), &[whole_a, p], &[4, 3])).collect();
        let cols_split = t.concat(1, &col_parts);
        let bias = t.leaf("bias", &[6]);
        let gemm = t.op("Gemm", Attrs::new(), &[a, b, bias], &[4, 6]);
        let gemm_parts: Vec<Id> = a_rows.iter().map(|&p| t.op("Gemm", Attrs::new(), &[p, b, bias], &[2, 6])).collect();
        let gemm_split = t.concat(0, &gemm_parts);
        t.run(&rule("distribute-matmul"));
        assert!(t.equal(rows, rows_split));
        assert!(t.equal(cols, cols_split));
        assert!(t.equal(gemm, gemm_split));
    }

    #[test]
    fn matmul_split_along_its_reduction_axis_does_not_distribute() {
        let mut t = Terms::new();
        let (_, a) = halves(&mut t, "a", &[4, 8], 1);
        let (_, b) = halves(&mut t, "b", &[8, 6], 0);
        let mm = t.op("MatMul", Attrs::new(), &[a, b], &[4, 6]);
        let before = t.egraph.total_number_of_nodes();
        t.run(&rule("distribute-matmul"));
        assert_eq!(t.egraph.total_number_of_nodes(), before);
        assert_eq!(t.egraph[mm].nodes.len(), 1, "the parts would need a sum");
    }

    #[test]
    fn layout_ops_move_or_keep_the_split_axis() {
        let mut t = Terms::new();
        let (xs, x) = halves(&mut t, "x", &[4, 6], 0);
        let perm = with("perm", Attr::Ints(vec![1, 0]));
        let transposed = t.op("Transpose", perm.clone(), &[x], &[6, 4]);
        let parts: Vec<Id> = xs.iter().map(|&p| t.op("Transpose", perm.clone(), &[p], &[6, 2])).collect();
        let transposed_split = t.concat(1, &parts);
        let (ys, y) = halves(&mut t, "y", &[4, 2, 3], 0);
        let flat = t.op("Flatten", Attrs::new(), &[y], &[4, 6]);
        let flat_parts: Vec<Id> = ys.iter().map(|&p| t.op("Flatten", Attrs::new(), &[p], &[2, 6])).collect();
        let flat_split = t.concat(0, &flat_parts);
        let (_, z) = halves(&mut t, "z", &[4, 2, 3], 0);
        let merged = t.op("Flatten", with("axis", Attr::Int(2)), &[z], &[8, 3]);
        let reshaped = t.ops("ReshapeTo", "lms", Attrs::new(), &[y], &[&[4, 6]]);
        let reshaped_parts: Vec<Id> =
            ys.iter().map(|&p| t.ops("ReshapeTo", "lms", Attrs::new(), &[p], &[&[2, 6]])).collect();
        let reshaped_split = t.concat(0, &reshaped_parts);
        let regrouped = t.ops("ReshapeTo", "lms", Attrs::new(), &[y], &[&[2, 12]]);
        t.run(&rule("distribute-layout"));
        assert!(t.equal(reshaped, reshaped_split));
        assert_eq!(t.egraph[regrouped].nodes.len(), 1, "a reshape that changes the leading axis mixes samples");
        assert!(t.equal(transposed, transposed_split));
        assert!(t.equal(flat, flat_split));
        assert_eq!(t.egraph[merged].nodes.len(), 1, "Flatten at axis 2 merges samples with the next axis");
    }

    #[test]
    fn splits_travel_through_a_chain_and_back() {
        // relu(x) with x split: the split form of relu is found, and the
        // concat of the parts of x is x again.
        let mut t = Terms::new();
        let x = t.leaf("x", &[4, 6]);
        let parts = t.splits(0, 2, x);
        let relu = t.op("Relu", Attrs::new(), &[x], &[4, 6]);
        let relu_parts: Vec<Id> = parts.iter().map(|&p| t.op("Relu", Attrs::new(), &[p], &[2, 6])).collect();
        let split_form = t.concat(0, &relu_parts);
        let mut all = split::rules();
        all.extend(rules());
        t.run(&all);
        assert!(t.equal(relu, split_form));
    }
}
