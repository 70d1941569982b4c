//! The `lms` command line.

use clap::{Args, Parser, Subcommand};
use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::inspect::InspectReport;
use lms_compiler::{emit, Error};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

/// lms: make deep-learning training graphs fit in GPU memory.
#[derive(Parser)]
#[command(name = "lms", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// What a model holds and how much memory it needs.
    Inspect(InspectArgs),
}

/// Options that make a model's shapes concrete.
#[derive(Args)]
struct ShapeArgs {
    /// Leading dimension of every data input.
    #[arg(long)]
    batch: Option<usize>,
    /// Value of a named symbolic dimension, as NAME=N (repeatable).
    #[arg(long = "dim", value_name = "NAME=N", value_parser = parse_dim)]
    dims: Vec<(String, usize)>,
}

#[derive(Args)]
struct InspectArgs {
    /// The ONNX model.
    model: PathBuf,
    #[command(flatten)]
    shapes: ShapeArgs,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Also print the graph in lms's stable text form.
    #[arg(long, conflicts_with = "json")]
    ir: bool,
}

fn parse_dim(s: &str) -> Result<(String, usize), String> {
    let (name, value) = s.split_once('=').ok_or_else(|| format!("'{s}' is not NAME=N"))?;
    let value = value.parse().map_err(|_| format!("'{value}' is not a dimension size"))?;
    Ok((name.to_string(), value))
}

impl ShapeArgs {
    fn options(&self) -> FrontendOptions {
        FrontendOptions { batch: self.batch, dims: self.dims.iter().cloned().collect::<BTreeMap<_, _>>() }
    }
}

fn inspect(args: &InspectArgs) -> Result<(), Error> {
    let model = frontend::load(&args.model, &args.shapes.options())?;
    let report = InspectReport::new(&model).map_err(|e| e.in_file(&args.model))?;
    if args.json {
        let json = serde_json::to_string_pretty(&report).map_err(|e| Error::Usage(e.to_string()))?;
        println!("{json}");
    } else {
        print!("{}", report.to_text());
        if args.ir {
            println!();
            print!("{}", emit::text::to_text(&model.graph).map_err(|e| Error::from(e).in_file(&args.model))?);
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Inspect(args) => inspect(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lms: error: {e}");
            ExitCode::from(2)
        }
    }
}
