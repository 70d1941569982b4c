//! Split and merge (TSPLIT §V-A): the two directions of
//! `concat_d(split(d,0,n)(x), ..., split(d,n-1,n)(x)) = x`, a split of a
//! concatenation picking a part, and a split of a concatenation along
//! another axis as the concatenation of the parts' splits, for 2 to
//! [`MAX_PARTS`] parts; and a concatenation of concatenations interchanged.
//!
//! `split-of-concat` takes sizes from the shapes: it fires when every
//! concatenated part has exactly the length the split gives the part at its
//! position (`array_split` lengths), so equal-sized parts of a length `n`
//! divides always qualify.

use super::class_rule::class_rule;
use crate::egraph::lang::{part_len, Term, TermAnalysis, TermGraph, TermRewrite};
use egg::{Applier, ConditionalApplier, Id, Pattern, PatternAst, Rewrite, Subst, Symbol, Var};

/// The largest part count the rules are generated for.
pub const MAX_PARTS: usize = 8;

/// `split-parts`, then for each n in 2..=[`MAX_PARTS`]: `concat-of-splits-{n}`,
/// `split-of-concat-{n}-{i}` for each part i and `split-across-concat-{n}`;
/// then `concat-of-concats`.
pub fn rules() -> Vec<TermRewrite> {
    let mut rules = vec![split_parts()];
    for n in 2..=MAX_PARTS {
        rules.push(concat_of_splits(n));
        rules.extend((0..n).map(|i| split_of_concat(n, i)));
        rules.push(split_across_concat(n));
    }
    rules.push(concat_of_concats());
    rules
}

/// `concat-of-concats`: `(concat e (concat d a0 ... ak) (concat d b0 ... bk)
/// ...) = (concat d (concat e a0 b0 ...) ... (concat e ak bk ...))` for d ≠ e
/// when every input is concatenated from parts of the same lengths along d
/// (an ONNX Concat of batch parts along the features, per part).
fn concat_of_concats() -> TermRewrite {
    class_rule(
        "concat-of-concats",
        |g, c| !interchanges(g, c).is_empty(),
        |g, c| {
            let mut changed = Vec::new();
            for Interchange { outer, inner, rows } in interchanges(g, c) {
                let (d, e) = (g.add(Term::Int(outer)), g.add(Term::Int(inner)));
                let mut children = vec![d];
                for row in rows {
                    children.push(g.add(Term::Concat(std::iter::once(e).chain(row).collect())));
                }
                let concat = g.add(Term::Concat(children.into()));
                if g.union(concat, c) {
                    changed.push(concat);
                }
            }
            changed
        },
    )
}

/// A concatenation along `inner` of inputs concatenated along `outer`.
struct Interchange {
    outer: i64,
    inner: i64,
    /// Per part along `outer`: that part of every input.
    rows: Vec<Vec<Id>>,
}

/// For each concatenation along e in `class` whose inputs each have a
/// concatenation along the first input's axis d ≠ e into parts of the same
/// lengths, its interchange.
fn interchanges(egraph: &TermGraph, class: Id) -> Vec<Interchange> {
    let int = |id: Id| egraph[id].data.int();
    let concats = |id: Id| {
        egraph[id].nodes.iter().filter_map(|n| match n {
            Term::Concat(ids) => Some((int(ids[0])?, &ids[1..])),
            _ => None,
        })
    };
    let lens = |parts: &[Id], d: i64| -> Option<Vec<usize>> {
        parts.iter().map(|&p| egraph[p].data.shape()?.get(usize::try_from(d).ok()?).copied()).collect()
    };
    let mut found = Vec::new();
    for (e, inputs) in concats(class) {
        let Some((&first, rest)) = inputs.split_first() else { continue };
        for (d, parts) in concats(first).filter(|&(d, _)| d != e) {
            let Some(want) = lens(parts, d) else { continue };
            let mut per_input = vec![parts];
            for &input in rest {
                match concats(input).find(|&(d2, ps)| d2 == d && lens(ps, d).as_ref() == Some(&want)) {
                    Some((_, ps)) => per_input.push(ps),
                    None => break,
                }
            }
            if per_input.len() == inputs.len() {
                let rows = (0..want.len()).map(|i| per_input.iter().map(|ps| ps[i]).collect()).collect();
                found.push(Interchange { outer: d, inner: e, rows });
            }
        }
    }
    found
}

/// `split-across-concat-{n}`: `(split d i m (concat e x0 ... x{n-1})) =
/// (concat e (split d i m x0) ... (split d i m x{n-1}))` for d ≠ e: every
/// part has the whole length along d, so each is cut alike (an ONNX Split
/// of batch parts is the concatenation of the parts' Splits).
fn split_across_concat(n: usize) -> TermRewrite {
    let parts: Vec<String> = (0..n).map(|k| format!("?x{k}")).collect();
    let lhs = pattern(&format!("(split ?d ?i ?m (concat ?e {}))", parts.join(" ")));
    let splits: Vec<String> = parts.iter().map(|p| format!("(split ?d ?i ?m {p})")).collect();
    let (d, e) = (var("?d"), var("?e"));
    let applier = ConditionalApplier {
        condition: move |egraph: &mut TermGraph, _: Id, subst: &Subst| {
            let (d, e) = (egraph[subst[d]].data.int(), egraph[subst[e]].data.int());
            d.is_some() && e.is_some() && d != e
        },
        applier: pattern(&format!("(concat ?e {})", splits.join(" "))),
    };
    Rewrite::new(format!("split-across-concat-{n}"), lhs, applier).unwrap_or_else(|e| panic!("{e}"))
}

fn pattern(text: &str) -> Pattern<Term> {
    text.parse().unwrap_or_else(|e| panic!("rule pattern '{text}' does not parse: {e}"))
}

fn var(name: &str) -> Var {
    name.parse().unwrap_or_else(|e| panic!("'{name}' is not a pattern variable: {e}"))
}

/// `concat-of-splits-{n}`: `(concat d (split d 0 n x) ... (split d n-1 n x)) = x`.
fn concat_of_splits(n: usize) -> TermRewrite {
    let parts: Vec<String> = (0..n).map(|i| format!("(split ?d {i} {n} ?x)")).collect();
    let lhs = pattern(&format!("(concat ?d {})", parts.join(" ")));
    Rewrite::new(format!("concat-of-splits-{n}"), lhs, pattern("?x")).unwrap_or_else(|e| panic!("{e}"))
}

/// `split-of-concat-{n}-{i}`: `(split d i n (concat d x0 ... x{n-1})) = xi`
/// when the parts have the split's lengths ([`parts_fit`]).
fn split_of_concat(n: usize, i: usize) -> TermRewrite {
    let parts: Vec<String> = (0..n).map(|k| format!("?x{k}")).collect();
    let lhs = pattern(&format!("(split ?d {i} {n} (concat ?d {}))", parts.join(" ")));
    let applier = ConditionalApplier {
        condition: parts_fit(parts.iter().map(|p| var(p)).collect()),
        applier: pattern(&format!("?x{i}")),
    };
    Rewrite::new(format!("split-of-concat-{n}-{i}"), lhs, applier).unwrap_or_else(|e| panic!("{e}"))
}

/// Condition: the parts bound to `parts`, concatenated along `?d`, have the
/// lengths a split of their concatenation into that many parts gives.
fn parts_fit(parts: Vec<Var>) -> impl Fn(&mut TermGraph, Id, &Subst) -> bool {
    let d = var("?d");
    move |egraph, _, subst| {
        let Some(d) = egraph[subst[d]].data.int().and_then(|d| usize::try_from(d).ok()) else {
            return false;
        };
        let lens: Option<Vec<usize>> =
            parts.iter().map(|&p| egraph[subst[p]].data.shape().and_then(|s| s.get(d).copied())).collect();
        let Some(lens) = lens else { return false };
        let total = lens.iter().sum();
        lens.iter().enumerate().all(|(k, &len)| len == part_len(total, k, lens.len()))
    }
}

/// `split-parts`: wherever `(split d i n x)` occurs, `x` equals the
/// concatenation of all its n parts (the other direction of
/// `concat-of-splits`, applied only to tensors that are split somewhere, so
/// that splitting `x` lets ops on `x` distribute over its parts).
fn split_parts() -> TermRewrite {
    Rewrite::new("split-parts", pattern("(split ?d ?i ?n ?x)"), SplitParts { d: var("?d"), n: var("?n"), x: var("?x") })
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The applier of `split-parts`.
struct SplitParts {
    d: Var,
    n: Var,
    x: Var,
}

impl Applier<Term, TermAnalysis> for SplitParts {
    fn apply_one(
        &self,
        egraph: &mut TermGraph,
        _: Id,
        subst: &Subst,
        _: Option<&PatternAst<Term>>,
        _: Symbol,
    ) -> Vec<Id> {
        let (d, n, x) = (subst[self.d], subst[self.n], subst[self.x]);
        let Some(count) = egraph[n].data.int().and_then(|n| usize::try_from(n).ok()) else {
            return vec![];
        };
        let axis = egraph[d].data.int().and_then(|d| usize::try_from(d).ok());
        let len = axis.and_then(|d| egraph[x].data.shape().and_then(|s| s.get(d).copied()));
        if !(2..=MAX_PARTS).contains(&count) || len.is_none_or(|len| len < count) {
            return vec![];
        }
        let mut children = vec![d];
        for i in 0..count {
            let i = egraph.add(Term::Int(i as i64));
            children.push(egraph.add(Term::Split([d, i, n, x])));
        }
        let concat = egraph.add(Term::Concat(children.into()));
        if egraph.union(concat, x) {
            vec![concat]
        } else {
            vec![]
        }
    }

    fn vars(&self) -> Vec<Var> {
        vec![self.d, self.n, self.x]
    }
}

#[cfg(test)]
mod tests {
    use super::{rules, MAX_PARTS};
    use crate::egraph::lang::TermRewrite;
    use crate::egraph::testing::Terms;

    fn named(prefix: &str) -> Vec<TermRewrite> {
        rules().into_iter().filter(|r| r.name.as_str().starts_with(prefix)).collect()
    }

    #[test]
    fn concat_of_all_splits_in_order_is_the_tensor() {
        let mut t = Terms::new();
        let x = t.leaf("x", &[4, 3]);
        let halves = t.splits(0, 2, x);
        let whole = t.concat(0, &halves);
        // 7 is not a multiple of 3: parts of 3, 2 and 2.
        let z = t.leaf("z", &[2, 7]);
        let thirds = t.splits(1, 3, z);
        let whole_z = t.concat(1, &thirds);
        t.run(&named("concat-of-splits"));
        assert!(t.equal(whole, x));
        assert!(t.equal(whole_z, z));
    }

    #[test]
    fn concat_of_splits_needs_every_part_in_order_on_the_split_axis() {
        let mut t = Terms::new();
        let x = t.leaf("x", &[4, 4]);
        let halves = t.splits(0, 2, x);
        let swapped = t.concat(0, &[halves[1], halves[0]]);
        let missing = t.concat(0, &[halves[0]]);
        let repeated = t.concat(0, &[halves[0], halves[0]]);
        let other_axis = t.concat(1, &halves);
        let quarters = t.splits(0, 4, x);
        let three_of_four = t.concat(0, &quarters[..3]);
        t.run(&named("concat-of-splits"));
        for wrong in [swapped, missing, repeated, other_axis, three_of_four] {
            assert!(!t.equal(wrong, x));
        }
    }

    #[test]
    fn split_of_concat_picks_the_part_when_lengths_fit() {
        let mut t = Terms::new();
        let (a, b) = (t.leaf("a", &[2, 5]), t.leaf("b", &[2, 5]));
        let ab = t.concat(0, &[a, b]);
        let second = t.split(0, 1, 2, ab);
        // Unequal parts that are the array_split lengths of 3 in 2: 2 and 1.
        let (c, d) = (t.leaf("c", &[2, 5]), t.leaf("d", &[1, 5]));
        let cd = t.concat(0, &[c, d]);
        let first = t.split(0, 0, 2, cd);
        t.run(&named("split-of-concat"));
        assert!(t.equal(second, b));
        assert!(t.equal(first, c));
    }

    #[test]
    fn split_of_concat_does_not_fire_when_lengths_differ_or_axes_differ() {
        let mut t = Terms::new();
        // 1 + 3: a split of 4 in 2 gives 2 and 2, not these parts.
        let (a, b) = (t.leaf("a", &[1, 5]), t.leaf("b", &[3, 5]));
        let ab = t.concat(0, &[a, b]);
        let first = t.split(0, 0, 2, ab);
        let (c, d) = (t.leaf("c", &[2, 5]), t.leaf("d", &[2, 5]));
        let cd = t.concat(0, &[c, d]);
        let across = t.split(1, 0, 2, cd);
        t.run(&named("split-of-concat"));
        assert!(!t.equal(first, a));
        assert!(!t.equal(across, c));
    }

    #[test]
    fn split_parts_makes_a_split_tensor_the_concat_of_its_parts() {
        let mut t = Terms::new();
        let x = t.leaf("x", &[6, 2]);
        t.split(0, 1, 3, x);
        let thirds = t.splits(0, 3, x);
        let whole = t.concat(0, &thirds);
        t.run(&named("split-parts"));
        assert!(t.equal(whole, x));
    }

    #[test]
    fn split_parts_does_not_fire_on_too_short_axes_or_too_many_parts() {
        let mut t = Terms::new();
        let x = t.leaf("x", &[1, 4]);
        t.split(0, 0, 2, x);
        let y = t.leaf("y", &[16]);
        let many = MAX_PARTS as i64 + 1;
        t.split(0, 0, many, y);
        let before = t.egraph.total_number_of_nodes();
        t.run(&named("split-parts"));
        assert_eq!(t.egraph.total_number_of_nodes(), before, "no concatenation was added");
    }

    #[test]
    fn a_split_of_a_concatenation_along_another_axis_is_the_concatenation_of_the_parts_splits() {
        let mut t = Terms::new();
        let (a, b) = (t.leaf("a", &[2, 6]), t.leaf("b", &[3, 6]));
        let ab = t.concat(0, &[a, b]);
        let whole = t.split(1, 1, 3, ab);
        let (sa, sb) = (t.split(1, 1, 3, a), t.split(1, 1, 3, b));
        let parts = t.concat(0, &[sa, sb]);
        // Another chunk of each part, and a split along the concatenation's own axis.
        let (oa, ob) = (t.split(1, 0, 3, a), t.split(1, 0, 3, b));
        let other = t.concat(0, &[oa, ob]);
        let same_axis = t.split(0, 0, 2, ab);
        let (ra, rb) = (t.split(0, 0, 2, a), t.split(0, 0, 2, b));
        let rows = t.concat(0, &[ra, rb]);
        t.run(&named("split-across-concat"));
        assert!(t.equal(whole, parts));
        assert!(!t.equal(whole, other));
        assert!(!t.equal(same_axis, rows), "not along the concatenation's axis");
    }

    #[test]
    fn a_concatenation_of_batch_parts_along_the_features_is_the_batch_concatenation_of_the_parts_concatenations() {
        let mut t = Terms::new();
        let (a0, a1, b0, b1) =
            (t.leaf("a0", &[2, 3]), t.leaf("a1", &[1, 3]), t.leaf("b0", &[2, 5]), t.leaf("b1", &[1, 5]));
        let (a, b) = (t.concat(0, &[a0, a1]), t.concat(0, &[b0, b1]));
        let whole = t.concat(1, &[a, b]);
        let (p0, p1) = (t.concat(1, &[a0, b0]), t.concat(1, &[a1, b1]));
        let parts = t.concat(0, &[p0, p1]);
        // Parts of other lengths do not pair up.
        let (c0, c1) = (t.leaf("c0", &[1, 5]), t.leaf("c1", &[2, 5]));
        let c = t.concat(0, &[c0, c1]);
        let uneven = t.concat(1, &[a, c]);
        t.run(&named("concat-of-concats"));
        assert!(t.equal(whole, parts));
        assert_eq!(t.egraph[uneven].nodes.len(), 1, "nothing added for parts of other lengths");
    }
}
