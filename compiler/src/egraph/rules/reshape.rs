//! `reshape-to`: an ONNX `Reshape` of `x` to type T is the lms `ReshapeTo`
//! of `x` with type T, `(Reshape->T x s) = (ReshapeTo->T x)`. Shape
//! inference gave the Reshape its type from `s`, so the type alone says
//! what it computes; the split pass runs a Reshape's parts as `ReshapeTo`s
//! (`shape::split::part_op`), and the layout family distributes those.

use super::class_rule::class_rule;
use crate::egraph::lang::{Term, TermGraph, TermRewrite};
use crate::ir::Attrs;
use crate::shape::split::{part_op, RESHAPE_TO_OP};
use egg::Id;
use lms_proto::contract::LMS_DOMAIN;

/// `reshape-to`.
pub fn rules() -> Vec<TermRewrite> {
    vec![class_rule("reshape-to", |g, c| !reshapes(g, c).is_empty(), apply)]
}

/// The Reshapes in `class`: their output types and data inputs.
fn reshapes(egraph: &TermGraph, class: Id) -> Vec<(Vec<crate::ir::TensorType>, Id)> {
    egraph[class]
        .nodes
        .iter()
        .filter_map(|node| {
            let Term::Op(symbol, children) = node else { return None };
            let head = egraph.analysis.lookup(*symbol)?;
            let [x, _shape] = children[..] else { return None };
            (part_op(&head.op, &head.domain) == Some(RESHAPE_TO_OP)).then(|| (head.outputs.clone(), x))
        })
        .collect()
}

/// Adds the `ReshapeTo` of every Reshape in `class` to it.
fn apply(egraph: &mut TermGraph, class: Id) -> Vec<Id> {
    let mut changed = Vec::new();
    for (outputs, x) in reshapes(egraph, class) {
        let head = egraph.analysis.head(RESHAPE_TO_OP, LMS_DOMAIN, &Attrs::new(), outputs);
        let view = egraph.add(Term::Op(head, vec![x]));
        if egraph.union(view, class) {
            changed.push(view);
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::rules;
    use crate::egraph::rules::distribute;
    use crate::egraph::testing::Terms;
    use crate::ir::Attrs;

    #[test]
    fn a_reshape_keeping_the_batch_distributes_over_batch_parts_and_not_over_column_parts() {
        let mut t = Terms::new();
        let x = t.leaf("x", &[4, 6]);
        let shape = t.leaf("s", &[3]);
        let whole = t.op("Reshape", Attrs::new(), &[x, shape], &[4, 2, 3]);
        let rows = t.splits(0, 2, x);
        let parts: Vec<_> =
            rows.iter().map(|&r| t.ops("ReshapeTo", "lms", Attrs::new(), &[r], &[&[2, 2, 3]])).collect();
        let by_rows = t.concat(0, &parts);
        // The same lengths from column parts: the right type, the wrong values.
        let columns = t.splits(1, 2, x);
        let wrong: Vec<_> =
            columns.iter().map(|&c| t.ops("ReshapeTo", "lms", Attrs::new(), &[c], &[&[2, 2, 3]])).collect();
        let by_columns = t.concat(0, &wrong);
        let mut all = rules();
        all.extend(distribute::rules());
        all.extend(crate::egraph::rules::split::rules());
        t.run(&all);
        assert!(t.equal(whole, by_rows));
        assert!(!t.equal(whole, by_columns));
    }
}
