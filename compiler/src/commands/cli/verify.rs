//! `lms verify`: its flags, and the verdict printed.

use super::spinner;
use crate::{egraph, emit, Error};
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub(crate) struct VerifyArgs {
    /// The original .lms graph (e.g. compiled with --strategy none).
    pub(crate) original: PathBuf,
    /// The rewritten .lms graph.
    pub(crate) rewritten: PathBuf,
    /// List every output and update with its verdict, e-graph sizes, times and rules applied.
    #[arg(long)]
    pub(crate) verbose: bool,
}

/// Runs `lms verify`.
pub(crate) fn command(args: &VerifyArgs) -> Result<(), Error> {
    let (original, _) = emit::serialize::read(&args.original)?;
    let (rewritten, _) = emit::serialize::read(&args.rewritten)?;
    let in_rewritten = |e: Error| e.in_file(&args.rewritten);
    let progress = spinner(format!("proving {} equivalent", args.rewritten.display()));
    let report = egraph::check(&original, &rewritten, &egraph::Limits::default());
    progress.finish_and_clear();
    let report = report.map_err(in_rewritten)?;
    out!("{}", report.to_text(args.verbose));
    report.require_proven().map_err(in_rewritten)?;
    Ok(())
}
