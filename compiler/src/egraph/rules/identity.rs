//! Identities (TFLMS eq. 2-5): `id ∘ id = id` and `id(x) = x`. ONNX
//! `Identity` is built as `id`, so these rules cover it too.

use crate::egraph::lang::TermRewrite;
use egg::rewrite;

/// `id-of-id`: `(id (id x)) = (id x)`; `id-elim`: `(id x) = x`.
pub fn rules() -> Vec<TermRewrite> {
    vec![rewrite!("id-of-id"; "(id (id ?x))" => "(id ?x)"), rewrite!("id-elim"; "(id ?x)" => "?x")]
}

#[cfg(test)]
mod tests {
    use super::rules;
    use crate::egraph::lang::Term;
    use crate::egraph::testing::Terms;

    #[test]
    fn id_of_id_fires_on_nested_ids_only() {
        let mut t = Terms::new();
        let x = t.leaf("x", &[2]);
        let id_x = t.egraph.add(Term::Identity(x));
        let id_id_x = t.egraph.add(Term::Identity(id_x));
        let swap_out = t.egraph.add(Term::SwapOut(x));
        let id_swap_out = t.egraph.add(Term::Identity(swap_out));
        let id_of_id = rules().into_iter().filter(|r| r.name.as_str() == "id-of-id").collect::<Vec<_>>();
        t.run(&id_of_id);
        assert!(t.equal(id_id_x, id_x));
        assert!(!t.equal(id_x, x), "id-of-id alone does not remove the last id");
        assert!(!t.equal(id_swap_out, swap_out), "a swap-out is not an id for id-of-id");
    }

    #[test]
    fn id_elim_removes_ids_and_nothing_else() {
        let mut t = Terms::new();
        let (x, y) = (t.leaf("x", &[2]), t.leaf("y", &[2]));
        let id_x = t.egraph.add(Term::Identity(x));
        let swap_out = t.egraph.add(Term::SwapOut(x));
        t.run(&rules());
        assert!(t.equal(id_x, x));
        assert!(!t.equal(id_x, y));
        assert!(!t.equal(swap_out, x), "swap ops are removed only in pairs (swap rules)");
    }
}
