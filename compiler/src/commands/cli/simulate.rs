//! `lms simulate`: its flags, the files it writes and the report printed.

use crate::analysis::profile::DeviceProfile;
use crate::commands::simulate::SimulateReport;
use crate::{emit, Error};
use clap::Args;
use std::path::PathBuf;

#[derive(Args)]
pub(crate) struct SimulateArgs {
    /// The .lms file.
    pub(crate) graph: PathBuf,
    /// Also simulate this .lms file (e.g. the graph before rewriting) and compare.
    #[arg(long, value_name = "ORIGINAL.lms")]
    pub(crate) before: Option<PathBuf>,
    /// Write a picture of memory and the three streams over the step (both graphs) as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub(crate) svg: Option<PathBuf>,
    /// Write the report as one self-contained HTML page (memory, streams, decisions).
    #[arg(long, value_name = "FILE.html")]
    pub(crate) html: Option<PathBuf>,
    /// Write the predicted timeline of the three streams as a Chrome trace (Perfetto).
    #[arg(long, value_name = "FILE.json")]
    pub(crate) trace: Option<PathBuf>,
    /// Device profile of the time model: a shipped name (h100-sxm, h100-pcie, h200, a100, cpu) or a file
    /// (default: the one the plan was made for, else h100-sxm).
    #[arg(long, value_name = "NAME|FILE")]
    pub(crate) device_profile: Option<String>,
    /// Print the report as JSON.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Runs `lms simulate`.
pub(crate) fn command(args: &SimulateArgs) -> Result<(), Error> {
    let mut inputs = vec![("graph", args.graph.as_path())];
    inputs.extend(args.before.as_deref().map(|b| ("--before graph", b)));
    inputs.extend(args.device_profile.as_deref().and_then(DeviceProfile::file).map(|p| ("--device-profile", p)));
    let mut outputs = Vec::new();
    outputs.extend(args.svg.as_deref().map(|p| ("--svg", p)));
    outputs.extend(args.html.as_deref().map(|p| ("--html", p)));
    outputs.extend(args.trace.as_deref().map(|p| ("--trace", p)));
    emit::output::check_distinct(&inputs, &outputs)?;
    let (graph, schedule) = emit::serialize::read(&args.graph)?;
    let device = match &args.device_profile {
        Some(name) => DeviceProfile::load(name)?,
        None => DeviceProfile::of_plan(&graph.plan).map_err(|e| {
            Error::Hinted { source: Box::new(e), hint: "give --device-profile".into() }.in_file(&args.graph)
        })?,
    };
    let after = SimulateReport::new(&graph, &schedule, &device);
    // The graph before the rewrite: the same model, compiled at the same batch.
    let before = match &args.before {
        Some(path) => {
            let (original, schedule) = emit::serialize::read(path)?;
            if let Some(difference) = original.input_difference(&graph, ["--before", "the graph"]) {
                let why = format!("--before is not this graph before a rewrite: {difference}");
                return Err(Error::Usage(why).in_file(path));
            }
            Some(SimulateReport::new(&original, &schedule, &device))
        }
        None => None,
    };
    let mut series = Vec::new();
    if let Some(b) = &before {
        series.push(("before", b));
    }
    series.push((if before.is_some() { "after" } else { "graph" }, &after));
    if let Some(path) = &args.svg {
        emit::output::write_atomically(path, crate::commands::simulate::svg::memory_and_streams(&series).as_bytes())?;
    }
    if let Some(path) = &args.html {
        let title = format!("{} ({})", after.graph, crate::commands::provenance::model_file_name(&args.graph));
        emit::output::write_atomically(path, crate::commands::simulate::html::report(&title, &series).as_bytes())?;
    }
    if let Some(path) = &args.trace {
        let json = lms_proto::trace::to_chrome_json(&after.graph, &after.trace);
        emit::output::write_atomically(path, json.as_bytes())?;
    }
    if args.json {
        let json = match &before {
            Some(b) => serde_json::json!({ "before": b, "after": after }),
            None => serde_json::to_value(&after).map_err(|e| Error::Usage(e.to_string()))?,
        };
        out!("{}\n", serde_json::to_string_pretty(&json).map_err(|e| Error::Usage(e.to_string()))?);
    } else {
        if let Some(b) = &before {
            out!("before\n");
            out!("{}", b.to_text());
            out!("after\n");
        }
        out!("{}", after.to_text());
    }
    Ok(())
}
