//! `lms run`: trains a compiled graph on synthetic data with the runtime and
//! reports the loss per step, peak memory and time per step.

use crate::units::format_bytes;
use lms_runtime::{Backend, CpuBackend, CudaBackend, Program, RunOptions, RuntimeError, Session, Step};
use serde::Serialize;
use std::fmt::Write;
use std::path::Path;

/// Which backend executes the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    Cpu,
    Cuda,
}

/// What `lms run` reports; serialized as its `--json` output.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RunReport {
    pub device: String,
    /// The loss after each step (absent for a graph without one).
    pub losses: Vec<f32>,
    /// Largest device bytes of any step.
    pub peak_device_bytes: u64,
    /// Largest host-pool bytes of any step.
    pub peak_host_bytes: u64,
    pub bytes_device_to_host: u64,
    pub bytes_host_to_device: u64,
    /// Wall time of each step.
    pub step_seconds: Vec<f64>,
    /// When asked for: per node, when and how long it ran on its queue in the last step.
    #[serde(skip)]
    pub trace: Vec<lms_proto::trace::TraceEvent>,
}

/// Memory limits for a run; `None` takes the budget the file's plan was made
/// for, else the runtime's default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryLimits {
    pub device_bytes: Option<u64>,
    pub host_bytes: Option<u64>,
}

/// Trains `path` for `steps` steps on `device` with `seed`, calling
/// `progress` after each; with `trace`, the report holds the last step's
/// per-node timings. Without a CUDA driver or GPU, `DeviceKind::Cuda`
/// fails with a message that says so (and suggests `--device cpu`), never a
/// panic.
pub fn run(
    path: &Path,
    device: DeviceKind,
    steps: usize,
    limits: MemoryLimits,
    seed: u64,
    trace: bool,
    progress: impl FnMut(&Step),
) -> Result<RunReport, RuntimeError> {
    let program = Program::load(path)?;
    let plan = program.graph().plan.as_ref();
    let defaults = RunOptions::default();
    let options = RunOptions {
        device_memory: limits
            .device_bytes
            .or(plan.and_then(|p| p.budget_device_bytes))
            .unwrap_or(defaults.device_memory),
        host_memory: limits.host_bytes.or(plan.and_then(|p| p.budget_host_bytes)).unwrap_or(defaults.host_memory),
        seed,
    };
    match device {
        DeviceKind::Cpu => {
            train(Session::new(program, CpuBackend::new(), options)?, "cpu".into(), steps, trace, progress)
        }
        DeviceKind::Cuda => {
            let backend = CudaBackend::new(0, options.device_memory)?;
            let name = format!("cuda ({})", backend.device_name());
            train(Session::new(program, backend, options)?, name, steps, trace, progress)
        }
    }
}

fn train<B: Backend>(
    mut session: Session<B>,
    device: String,
    steps: usize,
    trace: bool,
    mut progress: impl FnMut(&Step),
) -> Result<RunReport, RuntimeError> {
    let mut report = RunReport { device, ..RunReport::default() };
    session.set_tracing(trace);
    for _ in 0..steps {
        let step = session.step()?;
        progress(&step);
        report.losses.extend(step.loss);
        report.peak_device_bytes = report.peak_device_bytes.max(step.report.peak_device_bytes);
        report.peak_host_bytes = report.peak_host_bytes.max(step.report.peak_host_bytes);
        report.bytes_device_to_host += step.report.bytes_d2h;
        report.bytes_host_to_device += step.report.bytes_h2d;
        report.step_seconds.push(step.report.step_seconds);
        report.trace = step.report.trace;
    }
    Ok(report)
}

impl RunReport {
    /// The report for people: loss per step, then peaks and times.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for (i, (loss, secs)) in self.losses.iter().zip(&self.step_seconds).enumerate() {
            let _ = writeln!(s, "step {:>4}  loss {loss:.6}  {:.3} s", i + 1, secs);
        }
        let mean = self.step_seconds.iter().sum::<f64>() / self.step_seconds.len().max(1) as f64;
        let _ = writeln!(
            s,
            "peak device {}, peak host {}",
            format_bytes(self.peak_device_bytes),
            format_bytes(self.peak_host_bytes)
        );
        let _ = writeln!(
            s,
            "moved {} to host, {} to device; {:.3} s per step on {}",
            format_bytes(self.bytes_device_to_host),
            format_bytes(self.bytes_host_to_device),
            mean,
            self.device
        );
        s
    }
}
