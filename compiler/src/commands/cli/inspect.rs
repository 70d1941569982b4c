//! `lms inspect`: its flags, and the report printed.

use super::{show, ShapeArgs};
use crate::commands::inspect::InspectReport;
use crate::{emit, frontend, Error};
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub(crate) struct InspectArgs {
    /// The ONNX model.
    pub(crate) model: PathBuf,
    #[command(flatten)]
    pub(crate) shapes: ShapeArgs,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also print the graph in lms's stable text form.
    #[arg(long, conflicts_with = "json")]
    pub(crate) ir: bool,
}

/// Runs `lms inspect`.
pub(crate) fn command(args: &InspectArgs) -> Result<(), Error> {
    if args.model.extension().is_some_and(|e| e == "lms") {
        // A compiled graph: what `lms show` prints; its shapes are fixed.
        let given =
            [(args.shapes.batch.is_some(), "--batch"), (!args.shapes.dims.is_empty(), "--dim"), (args.ir, "--ir")];
        if let Some((_, flag)) = given.iter().find(|(given, _)| *given) {
            return Err(Error::Usage(format!("{flag} has no effect on a .lms file (its shapes are compiled in)")));
        }
        return show::print(&args.model, args.json);
    }
    let model = frontend::load(&args.model, &args.shapes.options())?;
    let report = InspectReport::new(&model).map_err(|e| e.in_file(&args.model))?;
    if args.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| Error::Usage(e.to_string()))?;
        out!("{json}\n");
    } else {
        out!("{}", report.to_text());
        if args.ir {
            out!("\n");
            out!("{}", emit::text::to_text(&model.graph).map_err(|e| Error::from(e).in_file(&args.model))?);
        }
    }
    Ok(())
}
