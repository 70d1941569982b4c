//! The `lms` command line.

use clap::{Args, Parser, Subcommand};
use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::inspect::InspectReport;
use lms_compiler::run::DeviceKind;
use lms_runtime::RunOptions;
use lms_compiler::simulate::SimulateReport;
use lms_compiler::train::{self, Loss, Optimizer, TrainOptions};
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
    /// Build the training graph of a model and write it as a .lms file.
    Compile(CompileArgs),
    /// Memory over the schedule of a .lms file, without a GPU.
    Simulate(SimulateArgs),
    /// Train a .lms graph on synthetic data; report loss, peak memory and speed.
    Run(RunArgs),
}

#[derive(Args)]
struct RunArgs {
    /// The .lms file.
    graph: PathBuf,
    /// Backend that executes the graph.
    #[arg(long, value_enum, default_value = "cpu")]
    device: DeviceArg,
    /// Training steps.
    #[arg(long, default_value_t = 10)]
    steps: usize,
    /// Device memory budget, a hard limit (e.g. 16GiB); default unlimited.
    #[arg(long, value_parser = parse_size)]
    device_memory: Option<u64>,
    /// Pinned host memory budget; default half the machine's RAM.
    #[arg(long, value_parser = parse_size)]
    host_memory: Option<u64>,
    /// Seed of initialisation and synthetic data.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum DeviceArg {
    Cpu,
    Cuda,
}

fn parse_size(s: &str) -> Result<u64, String> {
    lms_compiler::units::parse_bytes(s)
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum OptimizerKind {
    Sgd,
    Momentum,
    Adam,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LossKind {
    /// Softmax cross-entropy on integer labels over the last axis.
    SoftmaxXent,
    /// Mean squared error against a float target.
    Mse,
}

#[derive(Args)]
struct CompileArgs {
    /// The ONNX model (forward graph).
    model: PathBuf,
    #[command(flatten)]
    shapes: ShapeArgs,
    /// Optimizer of the training graph.
    #[arg(long, value_enum, default_value = "sgd")]
    train: OptimizerKind,
    /// Learning rate (default 0.01; 0.001 for Adam).
    #[arg(long)]
    lr: Option<f32>,
    /// Momentum of the momentum optimizer.
    #[arg(long, default_value_t = 0.9)]
    momentum: f32,
    /// Loss on the model's first output.
    #[arg(long, value_enum, default_value = "softmax-xent")]
    loss: LossKind,
    /// Train only parameters whose names match a glob (repeatable; default all).
    #[arg(long, value_name = "GLOB")]
    trainable: Vec<String>,
    /// The .lms file to write.
    #[arg(short, long)]
    output: PathBuf,
    /// Also write the graph's stable text form to this file.
    #[arg(long, value_name = "FILE")]
    text: Option<PathBuf>,
}

#[derive(Args)]
struct SimulateArgs {
    /// The .lms file.
    graph: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
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

fn compile(args: &CompileArgs) -> Result<(), Error> {
    let model = frontend::load(&args.model, &args.shapes.options())?;
    let optimizer = match args.train {
        OptimizerKind::Sgd => Optimizer::Sgd { lr: args.lr.unwrap_or(0.01) },
        OptimizerKind::Momentum => Optimizer::Momentum { lr: args.lr.unwrap_or(0.01), momentum: args.momentum },
        OptimizerKind::Adam => Optimizer::Adam { lr: args.lr.unwrap_or(0.001), beta1: 0.9, beta2: 0.999, epsilon: 1e-8 },
    };
    let loss = match args.loss {
        LossKind::SoftmaxXent => Loss::SoftmaxCrossEntropy,
        LossKind::Mse => Loss::MeanSquaredError,
    };
    let options = TrainOptions { loss, optimizer, trainable: args.trainable.clone() };
    let graph = train::build(&model.graph, &options).map_err(|e| e.in_file(&args.model))?;
    let metadata = vec![
        ("source".to_string(), args.model.display().to_string()),
        ("batch".to_string(), args.shapes.batch.map_or_else(|| "model".to_string(), |b| b.to_string())),
        ("optimizer".to_string(), format!("{optimizer:?}")),
        ("loss".to_string(), format!("{loss:?}")),
    ];
    emit::serialize::write(&args.output, &graph, None, &metadata)?;
    if let Some(path) = &args.text {
        let text = emit::text::to_text(&graph)?;
        emit::serialize::write_atomically(path, text.as_bytes()).map_err(|e| Error::from(e).in_file(path))?;
    }
    let ops = graph.node_ids().filter(|&id| !graph.node(id).parameterized).count();
    eprintln!("lms: wrote {} ({ops} ops, {} tensors)", args.output.display(), graph.tensor_count());
    Ok(())
}

fn simulate(args: &SimulateArgs) -> Result<(), Error> {
    let (graph, schedule) = emit::serialize::read(&args.graph)?;
    let report = SimulateReport::new(&graph, &schedule);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).map_err(|e| Error::Usage(e.to_string()))?);
    } else {
        print!("{}", report.to_text());
    }
    Ok(())
}

fn run(args: &RunArgs) -> Result<(), Error> {
    let defaults = RunOptions::default();
    let options = RunOptions {
        device_memory: args.device_memory.unwrap_or(defaults.device_memory),
        host_memory: args.host_memory.unwrap_or(defaults.host_memory),
        seed: args.seed,
    };
    let device = match args.device {
        DeviceArg::Cpu => DeviceKind::Cpu,
        DeviceArg::Cuda => DeviceKind::Cuda,
    };
    let bar = indicatif::ProgressBar::new(args.steps as u64);
    bar.set_style(indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} steps, loss {msg}").expect("valid template"));
    let report = lms_compiler::run::run(&args.graph, device, args.steps, options, |step| {
        bar.set_message(step.loss.map_or_else(String::new, |l| format!("{l:.4}")));
        bar.inc(1);
    })
    .map_err(|e| Error::Usage(e.to_string()));
    bar.finish_and_clear();
    let report = report?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report).map_err(|e| Error::Usage(e.to_string()))?);
    } else {
        print!("{}", report.to_text());
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Inspect(args) => inspect(args),
        Command::Compile(args) => compile(args),
        Command::Simulate(args) => simulate(args),
        Command::Run(args) => run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lms: error: {e}");
            ExitCode::from(2)
        }
    }
}
