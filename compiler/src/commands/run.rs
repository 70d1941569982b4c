//! `lms run`: trains a compiled graph with the runtime — on synthetic data,
//! or on a user's `.npz` data for some epochs — and reports the loss per
//! step, peak memory and time per step; it can resume from a saved state,
//! save the state, and write the original model with the trained weights.
//! Its caller sees each step as it completes and may stop the run there
//! (SIGINT): what was asked to be kept is still written. No output names an
//! input or another output, and `--save-onnx` writes only into the model
//! the graph was compiled from (the sha256 its metadata records).

use crate::budget::{Budget, Limits};
use crate::commands::dataset::Dataset;
use crate::commands::op_times::{Predicted, Recorder};
use crate::commands::provenance;
use crate::commands::setup::Setup;
use crate::emit::{output, trained_onnx};
use crate::error::{Error, Result};
use crate::npz;
use crate::units::format_bytes;
use lms_proto::contract::{placement, NodeKind, TensorType, VARIABLE_OP};
use lms_proto::lms::DType;
use lms_runtime::tensor::dtype_name;
use lms_runtime::{
    Backend, CpuBackend, CudaBackend, HostTensor, Pool, Program, RunOptions, RuntimeError, Session, Step,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

/// Which backend executes the graph.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceKind {
    Cpu,
    Cuda,
}

/// What `lms run` reports; serialized as its `--json` output.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct RunReport {
    /// The graph's batch, optimizer, strategy and budgets.
    pub setup: Setup,
    pub device: String,
    /// The device memory limit of the run.
    pub device_memory_limit: u64,
    /// Where that limit comes from: `--device-memory`, the plan's budget, or the
    /// machine's memory when the plan has none.
    pub device_memory_limit_from: String,
    /// The loss after each step (absent for a graph without one).
    pub losses: Vec<f32>,
    /// Largest device bytes of any step.
    pub peak_device_bytes: u64,
    /// Largest host-pool bytes of any step.
    pub peak_host_bytes: u64,
    /// The device arena the run used: the end of the highest block any step placed in it
    /// (the plan's `arena_device_bytes`, which `lms simulate` reports).
    pub arena_device_bytes: u64,
    /// The host arena the run used (the plan's `arena_host_bytes`).
    pub arena_host_bytes: u64,
    /// The backend's fixed device reserve beside the device arena (the CUDA backend's
    /// library workspace and error flag; 0 on the CPU).
    pub fixed_device_bytes: u64,
    pub bytes_device_to_host: u64,
    pub bytes_host_to_device: u64,
    /// Wall time of each step.
    pub step_seconds: Vec<f64>,
    /// CPU time of each step on the thread that ran it: on the CPU backend, the step's
    /// time less the time the system ran other work (the figure to compare with the time
    /// model on a loaded machine).
    pub step_cpu_seconds: Vec<f64>,
    /// The least CPU time of the steps after the first (none with one step): other work
    /// on the machine only adds to a step's CPU time (through the caches and memory it
    /// shares, a hyperthread sibling, the hypervisor), so this is the figure the time
    /// model predicts and `lms profile` measures the same way.
    pub step_cpu_least_seconds: Option<f64>,
    /// With data: whole batches per pass, and the samples after the last one, left out.
    pub batches_per_epoch: Option<usize>,
    pub samples_left_out: usize,
    /// With `--resume`: the steps the saved run had made.
    pub resumed_after_steps: Option<u64>,
    /// With `--save-onnx`: the weights written into the model.
    pub weights_saved: Option<usize>,
    /// True when the caller stopped the run (SIGINT) before its last step.
    pub interrupted: bool,
    /// The steps the run was to make (those made are `step_seconds`).
    pub planned_steps: usize,
}

/// What a run trains on and what it keeps.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunPlan {
    /// Steps on the synthetic batch, when there is no data.
    pub steps: usize,
    /// An `.npz` file with one array per graph input ([`Dataset`]).
    pub data: Option<PathBuf>,
    /// Passes over the data.
    pub epochs: usize,
    /// Start from the variables and optimizer state saved by `save_state`.
    pub resume: Option<PathBuf>,
    /// After the run, save every variable (weights, running statistics,
    /// optimizer slots) and the step count to this `.npz` file.
    pub save_state: Option<PathBuf>,
    /// After the run, write the original forward model with the trained weights.
    pub save_onnx: Option<SaveOnnx>,
    /// After the run, write the last step's per-node timings on the three
    /// queues to this file as a Chrome trace.
    pub trace: Option<PathBuf>,
    /// After the run, write each node's median time over the steps after the
    /// first beside the time model's prediction to this JSON file
    /// ([`crate::commands::op_times`]).
    pub profile_ops: Option<PathBuf>,
}

/// Where `--save-onnx` writes and which model it starts from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SaveOnnx {
    /// The ONNX file to write.
    pub output: PathBuf,
    /// The original forward model; default: the model file the `.lms`
    /// metadata names (`model.file`), in the `.lms` file's folder. Either
    /// way its sha256 must be the one the metadata records (`model.sha256`).
    pub model: Option<PathBuf>,
}

/// The name of the step count in a saved state.
const STEPS_KEY: &str = "lms.steps";

/// What the caller of [`run`] says after each step.
pub type Progress = Result<ControlFlow<()>>;

/// Trains `path` on `device` with `seed` as `plan` says, within `limits` (a side
/// not given takes the plan's budget, else the machine's memory), calling `progress`
/// after each step with the number of steps planned and the step's number
/// (counted from 1 over the whole training, so a resumed run goes on from
/// the steps its state had made): `Break` ends the run
/// there (the outputs are written, the report says `interrupted`), an error
/// ends it with that error. Outputs naming an input or each other are
/// refused before anything runs. Without a CUDA driver or GPU,
/// `DeviceKind::Cuda` fails with a message that says so (and suggests
/// `--device cpu`), never a panic.
pub fn run(
    path: &Path,
    device: DeviceKind,
    plan: &RunPlan,
    limits: Limits,
    seed: u64,
    progress: impl FnMut(usize, u64, &Step) -> Progress,
) -> Result<RunReport> {
    let program = Program::load(path).map_err(|e| runtime(e.into()))?;
    let (graph, schedule) = crate::emit::serialize::from_program(&program).map_err(|e| e.in_file(path))?;
    let setup = Setup::of(&graph);
    let predicted =
        plan.profile_ops.as_ref().map(|_| Predicted::of(&graph, &schedule)).transpose().map_err(|e| e.in_file(path))?;
    let recorded = program.graph().plan.as_ref();
    let planned = Limits {
        device: recorded.and_then(|p| p.budget_device_bytes),
        host: recorded.and_then(|p| p.budget_host_bytes),
    };
    let defaults = RunOptions::default();
    let budget = limits.or(planned).unwrap_or(Budget { device: defaults.device_memory, host: defaults.host_memory });
    let mut device_memory_from = match (limits.device, planned.device) {
        (Some(_), _) => "--device-memory",
        (None, Some(_)) => "the plan's budget",
        (None, None) => "the machine's memory: the plan has no budget",
    };
    let options = RunOptions { device_memory: budget.device, host_memory: budget.host, seed };
    let plan = &RunPlan {
        save_onnx: plan.save_onnx.as_ref().map(|s| original_model(s, path, &program)).transpose()?,
        ..plan.clone()
    };
    check_paths(path, plan)?;
    let (values, resumed) = match &plan.resume {
        Some(state) => resume_values(state, &program)?,
        None => (BTreeMap::new(), None),
    };
    let mut device_limit = budget.device;
    let mut report = match device {
        DeviceKind::Cpu => {
            let session = Session::with_values(program, CpuBackend::new(), options, &values).map_err(runtime)?;
            train(session, "cpu".into(), plan, predicted.as_ref(), resumed, progress)?
        }
        DeviceKind::Cuda => {
            // The device allocation is the plan's placed arena (as recorded, which loading
            // checked against the placement); the limit is checked against it by the session.
            let arena = recorded
                .and_then(|p| p.arena_device_bytes)
                .unwrap_or_else(|| placement::of_program(&program, Pool::Device).arena_bytes);
            let backend = CudaBackend::new(0, arena).map_err(runtime)?;
            let name = format!("cuda ({})", backend.device_name());
            let fixed = backend.fixed_device_bytes();
            // A plan's budget bounds what the plan places; the backend's fixed reserve comes
            // on top of it (as `lms doctor`'s largest budget leaves room for it). A limit the
            // user gives is the whole device's, the reserve inside it.
            let options = match (limits.device, planned.device) {
                (None, Some(_)) => {
                    device_memory_from = "the plan's budget and the backend's fixed reserve";
                    RunOptions { device_memory: options.device_memory.saturating_add(fixed), ..options }
                }
                _ => options,
            };
            device_limit = options.device_memory;
            let session = Session::with_values(program, backend, options, &values).map_err(runtime)?;
            RunReport {
                fixed_device_bytes: fixed,
                ..train(session, name, plan, predicted.as_ref(), resumed, progress)?
            }
        }
    };
    report.setup = setup;
    report.device_memory_limit = device_limit;
    report.device_memory_limit_from = device_memory_from.to_string();
    Ok(report)
}

fn train<B: Backend>(
    mut session: Session<B>,
    device: String,
    plan: &RunPlan,
    predicted: Option<&Predicted>,
    resumed: Option<u64>,
    mut progress: impl FnMut(usize, u64, &Step) -> Progress,
) -> Result<RunReport> {
    let mut report = RunReport { device, resumed_after_steps: resumed, ..RunReport::default() };
    session.set_tracing(plan.trace.is_some() || plan.profile_ops.is_some());
    let mut recorder = Recorder::default();
    if let Some(steps) = resumed {
        session.resume_at(steps);
    }
    let data = plan.data.as_ref().map(|p| Dataset::open(p, session.program())).transpose()?;
    let total = match &data {
        Some(d) => {
            report.batches_per_epoch = Some(d.batches());
            report.samples_left_out = d.left_out();
            plan.epochs * d.batches()
        }
        None => plan.steps,
    };
    report.planned_steps = total;
    let mut trace = Vec::new();
    for i in 0..total {
        if let Some(d) = &data {
            session.feed(&d.batch(i % d.batches())?).map_err(runtime)?;
        }
        let step = session.step().map_err(runtime)?;
        let flow = progress(total, session.steps(), &step)?;
        report.losses.extend(step.loss);
        report.peak_device_bytes = report.peak_device_bytes.max(step.report.peak_device_bytes);
        report.peak_host_bytes = report.peak_host_bytes.max(step.report.peak_host_bytes);
        report.arena_device_bytes = report.arena_device_bytes.max(step.report.arena_device_bytes);
        report.arena_host_bytes = report.arena_host_bytes.max(step.report.arena_host_bytes);
        report.bytes_device_to_host += step.report.bytes_d2h;
        report.bytes_host_to_device += step.report.bytes_h2d;
        report.step_seconds.push(step.report.step_seconds);
        report.step_cpu_seconds.push(step.report.step_cpu_seconds);
        if plan.profile_ops.is_some() {
            recorder.record(&step.report);
        }
        trace = step.report.trace;
        if flow.is_break() {
            report.interrupted = i + 1 < total;
            break;
        }
    }
    report.step_cpu_least_seconds = report.step_cpu_seconds.iter().skip(1).copied().reduce(f64::min);
    if let Some(path) = &plan.trace {
        let json = lms_proto::trace::to_chrome_json(&format!("lms run on {}", report.device), &trace);
        output::write_atomically(path, json.as_bytes())?;
    }
    if let (Some(path), Some(predicted)) = (&plan.profile_ops, predicted) {
        let times = recorder.finish(report.device.clone(), predicted);
        let json = serde_json::to_string_pretty(&times).map_err(|e| Error::Usage(e.to_string()))?;
        output::write_atomically(path, format!("{json}\n").as_bytes())?;
    }
    if plan.save_state.is_none() && plan.save_onnx.is_none() {
        return Ok(report);
    }
    let mut variables = session.variables().map_err(runtime)?;
    if let Some(save) = &plan.save_onnx {
        let model = save.model.as_deref().unwrap_or(Path::new(""));
        report.weights_saved = Some(trained_onnx::write(model, &variables, &save.output)?);
    }
    if let Some(path) = &plan.save_state {
        let steps = i64::try_from(session.steps()).unwrap_or(i64::MAX);
        variables.push((STEPS_KEY.to_string(), HostTensor::scalar(steps)));
        npz::write(path, &variables)?;
    }
    Ok(report)
}

/// The variables saved in `state` and the step count, checked to be exactly
/// the variables of `program`.
fn resume_values(state: &Path, program: &Program) -> Result<(BTreeMap<String, HostTensor>, Option<u64>)> {
    let fail = |message: String| Error::Usage(message).in_file(state);
    let variables: BTreeMap<&str, &TensorType> = (0..program.node_count())
        .filter(|&n| program.kind(n) == NodeKind::Parameter && program.node(n).op == VARIABLE_OP)
        .map(|n| (program.node(n).name.as_str(), program.tensor_type(program.node_outputs(n)[0])))
        .collect();
    let check = |name: &str, dtype: DType, shape: &[usize]| match variables.get(name) {
        _ if name == STEPS_KEY => match (dtype, shape) {
            (DType::DtypeI64, [] | [1]) => Ok(()),
            _ => Err("is not a step count".to_string()),
        },
        Some(ty) if ty.dtype == dtype && ty.shape == shape => Ok(()),
        Some(ty) => Err(format!(
            "is {} {shape:?}, variable '{name}' of {} is {} {:?}",
            dtype_name(dtype),
            program.source(),
            dtype_name(ty.dtype),
            ty.shape
        )),
        None => Err(format!("is not a variable of {}", program.source())),
    };
    let most = variables.values().fold(8u64, |sum, ty| sum.saturating_add(ty.bytes));
    let mut values: BTreeMap<String, HostTensor> = npz::read(state, most, check)?.into_iter().collect();
    let steps = match values.remove(STEPS_KEY) {
        Some(t) => {
            let steps = t.to_i64s(STEPS_KEY).ok().and_then(|v| v.first().copied()).and_then(|s| u64::try_from(s).ok());
            Some(steps.ok_or_else(|| fail(format!("'{STEPS_KEY}' is not a step count")))?)
        }
        None => None,
    };
    if let Some(missing) = variables.keys().find(|v| !values.contains_key(**v)) {
        return Err(fail(format!("has no value for variable '{missing}' of {}", program.source())));
    }
    Ok((values, steps))
}

/// Refuses a run whose outputs name one of its inputs (the graph, the data,
/// the resumed state, the model of `--save-onnx`) or each other.
fn check_paths(graph: &Path, plan: &RunPlan) -> Result<()> {
    let mut inputs = vec![("graph", graph)];
    inputs.extend(plan.data.as_deref().map(|p| ("--data", p)));
    inputs.extend(plan.resume.as_deref().map(|p| ("--resume", p)));
    inputs.extend(plan.save_onnx.as_ref().and_then(|s| s.model.as_deref()).map(|p| ("--model", p)));
    let mut outputs = Vec::new();
    outputs.extend(plan.save_state.as_deref().map(|p| ("--save-state", p)));
    outputs.extend(plan.save_onnx.as_ref().map(|s| ("--save-onnx", s.output.as_path())));
    outputs.extend(plan.trace.as_deref().map(|p| ("--trace", p)));
    outputs.extend(plan.profile_ops.as_deref().map(|p| ("--profile-ops", p)));
    output::check_distinct(&inputs, &outputs)
}

/// `save` with its model resolved (given, or the file the metadata names
/// in the graph's folder) and checked to be the model the graph at `graph`
/// was compiled from: the file's sha256 is the one the metadata records.
/// A graph that records none (written by an older lms, or not by `lms
/// compile`) is refused, since nothing would tell a wrong model.
fn original_model(save: &SaveOnnx, graph: &Path, program: &Program) -> Result<SaveOnnx> {
    let recorded = |key: &str| program.graph().metadata.iter().find(|m| m.key == key).map(|m| m.value.as_str());
    let (Some(name), Some(sha256)) = (recorded("model.file"), recorded("model.sha256")) else {
        return Err(Error::Usage(format!(
            "--save-onnx: {} records no source model and its sha256 (not written by this lms's compile): \
             compile the model again",
            graph.display()
        )));
    };
    let model = match &save.model {
        Some(m) => m.clone(),
        None => {
            let beside = graph.parent().unwrap_or(Path::new("")).join(name);
            if !beside.is_file() {
                return Err(Error::Usage(format!(
                    "--save-onnx needs the model {} was compiled from ({name}, not found beside it): \
                     pass --model ORIGINAL.onnx",
                    graph.display()
                )));
            }
            beside
        }
    };
    let bytes = crate::frontend::read_model_bytes(&model).map_err(|e| e.in_file(&model))?;
    if provenance::sha256_hex(&bytes) != sha256 {
        return Err(Error::Usage(format!(
            "--model {} is not the model {} was compiled from ({name}, sha256 {}…): \
             --save-onnx writes trained weights only into that model",
            model.display(),
            graph.display(),
            &sha256[..sha256.len().min(12)]
        )));
    }
    Ok(SaveOnnx { output: save.output.clone(), model: Some(model) })
}

/// A runtime error as the compiler's one-line error.
fn runtime(e: RuntimeError) -> Error {
    Error::Run(e)
}

impl RunReport {
    /// The line for people of step `number` (from 1, over the whole
    /// training) as it completes: its loss, when the graph has one, and its
    /// time.
    pub fn step_line(number: u64, step: &Step) -> String {
        let loss = step.loss.map_or_else(String::new, |l| format!("  loss {l:.6}"));
        format!("step {number:>4}{loss}  {:.3} s\n", step.report.step_seconds)
    }

    /// The report for people after the step lines: data, resume, what was
    /// saved, then peaks and times.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "setup: {}", self.setup.describe());
        if self.interrupted {
            let _ = writeln!(s, "interrupted after step {} of {}", self.step_seconds.len(), self.planned_steps);
        }
        if let Some(batches) = self.batches_per_epoch {
            let _ = writeln!(s, "data: {batches} batches per epoch, {} samples left out", self.samples_left_out);
        }
        if let Some(steps) = self.resumed_after_steps {
            let _ = writeln!(s, "resumed after step {steps}");
        }
        if let Some(n) = self.weights_saved {
            let _ = writeln!(s, "saved the model with {n} trained weights");
        }
        let mean = self.step_seconds.iter().sum::<f64>() / self.step_seconds.len().max(1) as f64;
        let _ = writeln!(
            s,
            "peak device {}, peak host {}; device limit {} ({})",
            format_bytes(self.peak_device_bytes),
            format_bytes(self.peak_host_bytes),
            format_bytes(self.device_memory_limit),
            self.device_memory_limit_from
        );
        let _ = writeln!(
            s,
            "arenas used: device {}, host {} ({} B, {} B)",
            format_bytes(self.arena_device_bytes),
            format_bytes(self.arena_host_bytes),
            self.arena_device_bytes,
            self.arena_host_bytes
        );
        if self.fixed_device_bytes > 0 {
            let _ = writeln!(
                s,
                "fixed device reserve beside the arena: {} ({} B: library workspace and error flag)",
                format_bytes(self.fixed_device_bytes),
                self.fixed_device_bytes
            );
        }
        let _ = writeln!(
            s,
            "moved {} to host, {} to device; {:.3} s per step on {}",
            format_bytes(self.bytes_device_to_host),
            format_bytes(self.bytes_host_to_device),
            mean,
            self.device
        );
        if let Some(least) = self.step_cpu_least_seconds {
            let _ = writeln!(s, "least CPU time of a step after the first: {:.6} s", least);
        }
        s
    }
}
