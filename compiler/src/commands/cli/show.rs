//! `lms show`: its flags, and the report printed.

use crate::Error;
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub(crate) struct ShowArgs {
    /// The .lms file.
    pub(crate) graph: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `lms show`.
pub(crate) fn command(args: &ShowArgs) -> Result<(), Error> {
    print(&args.graph, args.json)
}

/// Prints what the `.lms` file `graph` holds, as text or JSON.
pub(crate) fn print(graph: &Path, json: bool) -> Result<(), Error> {
    let report = crate::commands::show::ShowReport::read(graph)?;
    if json {
        out!("{}\n", serde_json::to_string_pretty(&report).map_err(|e| Error::Usage(e.to_string()))?);
    } else {
        out!("{}", report.to_text());
    }
    Ok(())
}
