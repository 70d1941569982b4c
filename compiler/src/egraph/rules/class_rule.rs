//! The shape of every rule that is not a pattern: it looks at one e-class at
//! a time, `matches` saying whether it fires there and `apply` adding its
//! equalities there and returning the classes it changed.

use crate::egraph::lang::{Term, TermAnalysis, TermGraph, TermRewrite};
use egg::{Applier, Id, PatternAst, Rewrite, SearchMatches, Searcher, Subst, Symbol, Var};
use std::sync::Arc;

/// Whether a rule fires on an e-class.
type Matches = Arc<dyn Fn(&TermGraph, Id) -> bool + Send + Sync>;
/// What a rule adds on an e-class: the classes it changed.
type Apply = Arc<dyn Fn(&mut TermGraph, Id) -> Vec<Id> + Send + Sync>;

/// Searcher and applier of a class rule.
#[derive(Clone)]
struct ClassRule {
    matches: Matches,
    apply: Apply,
}

/// The rewrite `name` that fires on the e-classes `matches` accepts and
/// there runs `apply`.
pub fn class_rule(
    name: impl Into<Symbol>,
    matches: impl Fn(&TermGraph, Id) -> bool + Send + Sync + 'static,
    apply: impl Fn(&mut TermGraph, Id) -> Vec<Id> + Send + Sync + 'static,
) -> TermRewrite {
    let rule = ClassRule { matches: Arc::new(matches), apply: Arc::new(apply) };
    Rewrite::new(name, rule.clone(), rule).unwrap_or_else(|e| panic!("{e}"))
}

impl Searcher<Term, TermAnalysis> for ClassRule {
    fn search_eclass_with_limit(
        &self,
        egraph: &TermGraph,
        eclass: Id,
        limit: usize,
    ) -> Option<SearchMatches<'_, Term>> {
        (limit > 0 && (self.matches)(egraph, eclass)).then(|| SearchMatches {
            eclass,
            substs: vec![Subst::default()],
            ast: None,
        })
    }

    fn vars(&self) -> Vec<Var> {
        Vec::new()
    }
}

impl Applier<Term, TermAnalysis> for ClassRule {
    fn apply_one(
        &self,
        egraph: &mut TermGraph,
        eclass: Id,
        _: &Subst,
        _: Option<&PatternAst<Term>>,
        _: Symbol,
    ) -> Vec<Id> {
        (self.apply)(egraph, eclass)
    }
}
