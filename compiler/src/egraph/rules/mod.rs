//! The rewrite rules, one file per family; each family's `rules()` returns
//! its rules, named in kebab-case.
//!
//! - [`identity`] has `id-of-id` and `id-elim`;
//! - [`swap`] has `swap-in-of-swap-out`;
//! - [`split`] has `split-parts`, `concat-of-splits-{n}`,
//!   `split-of-concat-{n}-{i}`, `split-across-concat-{n}` and
//!   `concat-of-concats`;
//! - [`distribute`] has `distribute-{family}` for the op families of
//!   [`independence`], whose conditions say when an op is independent along
//!   an axis;
//! - [`partial_sum`] has `distribute-sum`: an op that reduces over a split
//!   axis as the sum of its parts' results;
//! - [`halo`] has `distribute-halo`: a windowed op, or its gradient, split
//!   spatially into parts with overlapping windows and their own pads;
//! - [`batch_norm`] has `batch-norm-parts`: batch normalization and its
//!   gradient over batch parts by merged statistics;
//! - [`reshape`] has `reshape-to`: a Reshape is the `ReshapeTo` of its type.
//!
//! Every rule is an equation the graph semantics validate (TFLMS §4: the
//! rewrites must be provable), and no rule makes a term larger without
//! bound: the split and distribution rules only add terms for splits that
//! already occur.

pub mod batch_norm;
mod class_rule;
pub mod distribute;
pub mod halo;
pub mod identity;
pub mod independence;
pub mod partial_sum;
pub mod reshape;
pub mod split;
pub mod swap;

use super::lang::TermRewrite;

/// Every rule of every family.
pub fn all() -> Vec<TermRewrite> {
    let mut rules = identity::rules();
    rules.extend(swap::rules());
    rules.extend(split::rules());
    rules.extend(distribute::rules());
    rules.extend(partial_sum::rules());
    rules.extend(halo::rules());
    rules.extend(batch_norm::rules());
    rules.extend(reshape::rules());
    rules
}
