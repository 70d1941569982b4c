//! Swapping (TFLMS eq. 5): a swap-in of a swap-out is the identity
//! `id₂ ∘ id₁ = id`, so it equals the swapped tensor. A swap-in wired to the
//! swap-out of another tensor equals that other tensor, and a lone swap-out
//! or swap-in is not removed: only the pair is proven to be the identity.

use crate::egraph::lang::TermRewrite;
use egg::rewrite;

/// `swap-in-of-swap-out`: `(swap_in (swap_out x)) = x`.
pub fn rules() -> Vec<TermRewrite> {
    vec![rewrite!("swap-in-of-swap-out"; "(swap_in (swap_out ?x))" => "?x")]
}

#[cfg(test)]
mod tests {
    use super::rules;
    use crate::egraph::lang::Term;
    use crate::egraph::testing::Terms;

    #[test]
    fn swap_in_of_swap_out_is_the_swapped_tensor() {
        let mut t = Terms::new();
        let (x, y) = (t.leaf("x", &[2]), t.leaf("y", &[2]));
        let out = t.egraph.add(Term::SwapOut(x));
        let back = t.egraph.add(Term::SwapIn(out));
        let relu_x = t.op("Relu", Default::default(), &[x], &[2]);
        let relu_back = t.op("Relu", Default::default(), &[back], &[2]);
        let other = t.egraph.add(Term::SwapOut(y));
        let other_back = t.egraph.add(Term::SwapIn(other));
        t.run(&rules());
        assert!(t.equal(back, x));
        assert!(t.equal(relu_back, relu_x), "consumers of the swap-in equal the original consumers");
        assert!(!t.equal(other_back, x), "a swap-in of another tensor's swap-out is that tensor");
        assert!(t.equal(other_back, y));
    }

    #[test]
    fn lone_and_reversed_swaps_stay() {
        let mut t = Terms::new();
        let x = t.leaf("x", &[2]);
        let out = t.egraph.add(Term::SwapOut(x));
        let lone_in = t.egraph.add(Term::SwapIn(x));
        let reversed = t.egraph.add(Term::SwapOut(lone_in));
        t.run(&rules());
        assert!(!t.equal(out, x));
        assert!(!t.equal(lone_in, x));
        assert!(!t.equal(reversed, x));
    }
}
