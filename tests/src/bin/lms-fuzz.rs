//! `lms-fuzz`: long fuzz campaigns on the ONNX import, `.lms` load and run, command-line,
//! external-data and `.npz` targets, e.g.
//! `cargo run --release -p lms-tests --bin lms-fuzz -- lms --executions 1000000`.
//! Prints the executions, accepted inputs, time and findings; exits 1 when anything was found.

use clap::{Parser, ValueEnum};
use lms_tests::fuzz::alloc::{self, CountingAlloc};
use lms_tests::fuzz::runner::{self, Options};
use lms_tests::fuzz::{npz, surface, targets};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

#[derive(Clone, Copy, ValueEnum)]
enum TargetArg {
    /// ONNX import: decode, import, shape inference, inspect.
    Onnx,
    /// `.lms` load: decode, validate, rebuild, simulate, verify, one training step.
    Lms,
    /// `lms` command lines (the built binary): exit statuses, one error line, no clobbering.
    Cli,
    /// External-data layouts: locations, offsets, lengths, links, FIFOs.
    External,
    /// `.npz` archives as `lms run --data` and `--resume` read them.
    Npz,
}

/// Fuzz one target of lms with structure-aware mutations of the fixtures.
#[derive(Parser)]
#[command(name = "lms-fuzz")]
struct Cli {
    /// Which target.
    target: TargetArg,
    /// Stop after this many executions.
    #[arg(long, default_value_t = 1_000_000)]
    executions: u64,
    /// Stop after this many seconds.
    #[arg(long, default_value_t = 86_400)]
    seconds: u64,
    /// Seconds one input may run before it counts as slow (ten times this: a hang).
    #[arg(long, default_value_t = 10)]
    per_input: u64,
    /// Seed of the mutations.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Folder for the inputs of findings.
    #[arg(long, default_value = "target/fuzz")]
    out: PathBuf,
    /// Print a progress line every this many executions (0: never).
    #[arg(long, default_value_t = 50_000)]
    progress_every: u64,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let target = match cli.target {
        TargetArg::Onnx => targets::onnx_import(),
        TargetArg::Lms => targets::lms_load(),
        TargetArg::Cli => surface::cli_args(),
        TargetArg::External => surface::external_layouts(),
        TargetArg::Npz => npz::npz_inputs(),
    };
    let options = Options {
        executions: cli.executions,
        time: Duration::from_secs(cli.seconds),
        per_input: Duration::from_secs(cli.per_input),
        seed: cli.seed,
        out: cli.out,
        progress_every: cli.progress_every,
    };
    let s = runner::run(&target, &options);
    println!(
        "{}: {} executions ({} accepted) in {:.1} s, {} seeds; slowest input {:.3} s; peak {} MiB; {} findings",
        target.name,
        s.executions,
        s.accepted,
        s.elapsed.as_secs_f64(),
        target.seeds.len(),
        s.slowest.as_secs_f64(),
        s.peak_bytes >> 20,
        s.findings.len()
    );
    if alloc::children_peak() > 0 {
        println!("{}: child processes peaked at {} MiB resident", target.name, alloc::children_peak() >> 20);
    }
    for f in &s.findings {
        println!("  {:?}: {} ({})", f.kind, f.message, f.input.display());
    }
    if s.findings.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
