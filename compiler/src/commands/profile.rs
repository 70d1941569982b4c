//! `lms profile`: measures a backend — the CPU reference backend or the CUDA
//! backend — and writes what it measured as a device profile (format 2,
//! [`crate::analysis::profile`]) the planner and `lms simulate` read: the
//! rate of each kernel class (matrix product, convolution, elementwise,
//! reduction) at a few sizes, the bandwidth of a swap's copy each way and the
//! time of an op beyond its kernel's work (the per-op overhead).
//!
//! Each figure comes from a chain of identical ops built as a program and
//! run through the runtime exactly as `lms run` runs a compiled graph: one
//! warm-up step, then the typical step of several, divided by the ops in the
//! chain. On the CPU backend a step's time is the CPU time of the thread
//! that runs it ([`lms_runtime::cpu_time`]) and the typical step the least of
//! them, so a machine shared with other work measures what a quiet one
//! would; on a GPU it is wall time and the median step. An op's time thus includes all the executor and backend do around
//! its kernel (on the CPU backend: reading the inputs out of their arena
//! blocks and writing the outputs into theirs). The overheads are an op's and each
//! of its inputs' and outputs': each input's and output's from ops on one
//! element with one and eight inputs, the op's from a chain that cycles
//! through eight different kinds of op on 16-element tensors (as a real
//! step runs them: a chain of one op keeps its code and data warm and
//! measures a fraction of it); a kernel's rate at a size is its work over
//! its time less the overhead, as the time model adds them back. The
//! elementwise probe cycles through the kinds a step runs (its sums,
//! activations, their gradients and the optimizer's updates run at rates
//! up to 4x apart) on tensors of their own, so that above the caches it
//! streams from memory as a step does.

use crate::analysis::cost::CostModel;
use crate::analysis::profile::{DeviceProfile, KernelRates, PeakFlops, Precision, FORMAT_VERSION};
use crate::commands::run::DeviceKind;
use crate::emit::serialize;
use crate::error::{Error, Result};
use crate::ir::{Attr, Attrs, DType, Device, Graph, Node, Phase, TensorId, TensorType, INPUT_OP};
use crate::ir::{SWAP_IN_OP, SWAP_OUT_OP};
use lms_proto::contract::LMS_DOMAIN;
use lms_runtime::{Backend, CpuBackend, CudaBackend, Program, RunOptions, RuntimeError, Session, StepReport};
use std::collections::BTreeMap;

/// How much to measure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProfileOptions {
    /// Small sizes and few steps (seconds, for tests); the rates then say
    /// little about large kernels.
    pub quick: bool,
}

/// Memory each probe may use on either side: 2 GiB (the largest probe needs
/// about 100 MiB).
const PROBE_MEMORY: u64 = 2 << 30;

/// Measured time after which a probe takes no more steps than its least
/// (11): short probes take up to 5001, so that their steps span enough of
/// the machine's time (a 100-step chain of small ops lasts 5 ms, one
/// scheduler slice, in which another thread may hold the core's sibling
/// throughout) for the least CPU time to be one that other work on the
/// machine did not lengthen.
const PROBE_SECONDS: f64 = 0.25;

/// One chain of identical ops and what one of its ops does.
struct Probe {
    graph: Graph,
    /// Ops in the chain (the inputs left out).
    ops: usize,
    /// FLOPs (matrix classes) or bytes read and written (the others) of one op.
    size: f64,
    /// Inputs and outputs of one op.
    tensors: usize,
}

/// Measures `device` and returns its profile, named `name`.
pub fn measure(device: DeviceKind, name: &str, options: ProfileOptions) -> Result<DeviceProfile> {
    match device {
        DeviceKind::Cpu => {
            Measurer { options, cpu_clock: true, backend: || Ok(CpuBackend::new()) }.profile(device, name)
        }
        DeviceKind::Cuda => {
            Measurer { options, cpu_clock: false, backend: || CudaBackend::new(0, PROBE_MEMORY) }.profile(device, name)
        }
    }
}

/// Runs probes on fresh backends of one kind.
struct Measurer<F> {
    options: ProfileOptions,
    /// Steps are timed by the running thread's CPU time, not the wall clock.
    cpu_clock: bool,
    backend: F,
}

impl<B: Backend, F: Fn() -> std::result::Result<B, RuntimeError>> Measurer<F> {
    /// The time of a measured step.
    fn seconds(&self, report: &StepReport) -> f64 {
        if self.cpu_clock {
            report.step_cpu_seconds
        } else {
            report.step_seconds
        }
    }

    /// The step seconds of `graph` over the measured steps, after one warm-up
    /// step: the least on the CPU clock ([`Measurer::typical`]), else the median.
    fn step_seconds(&self, graph: &Graph) -> Result<f64> {
        let proto = serialize::to_proto(graph, &[])?;
        let source = format!("probe '{}'", graph.name);
        let program = Program::new(proto, &source).map_err(|e| Error::Run(e.into()))?;
        let memory = RunOptions { device_memory: PROBE_MEMORY, host_memory: PROBE_MEMORY, seed: 0 };
        let mut session = Session::new(program, (self.backend)().map_err(Error::Run)?, memory).map_err(Error::Run)?;
        session.set_reading_outputs(false);
        session.step().map_err(Error::Run)?;
        let (least, most) = if self.options.quick { (3, 3) } else { (11, 5001) };
        let mut seconds = Vec::with_capacity(most);
        while seconds.len() < least || (seconds.len() < most && seconds.iter().sum::<f64>() < PROBE_SECONDS) {
            seconds.push(session.step().map(|s| self.seconds(&s.report)).map_err(Error::Run)?);
        }
        seconds.sort_by(f64::total_cmp);
        Ok(seconds[self.typical(seconds.len())])
    }

    /// The index of the figure to take among `steps` sorted step times: on
    /// the CPU clock the least (other work on the machine only adds to a
    /// step's CPU time, through the caches, memory and a hyperthread
    /// sibling it shares), on the wall clock the median.
    fn typical(&self, steps: usize) -> usize {
        if self.cpu_clock {
            0
        } else {
            steps / 2
        }
    }

    /// Seconds of one op of `probe`.
    fn op_seconds(&self, probe: &Probe) -> Result<f64> {
        Ok(self.step_seconds(&probe.graph)? / probe.ops as f64)
    }

    /// `[size, rate]` points of `probes`, each rate the size over the op's
    /// time less its `overhead` (at least a tenth of the op's time).
    fn rates(&self, probes: Vec<Probe>, overhead: impl Fn(&Probe) -> f64) -> Result<Vec<[f64; 2]>> {
        probes
            .iter()
            .map(|probe| {
                let seconds = self.op_seconds(probe)?;
                Ok([probe.size, significant(probe.size / (seconds - overhead(probe)).max(seconds / 10.0))])
            })
            .collect()
    }

    fn profile(&self, device: DeviceKind, name: &str) -> Result<DeviceProfile> {
        let quick = self.options.quick;
        // One op of one input and one output, and of eight inputs and one output.
        let (one, eight) = (self.op_seconds(&overhead(1))?, self.op_seconds(&overhead(8))?);
        let tensor = ((eight - one) / 7.0).max(0.0);
        let mixed = mixed_small_ops();
        let per_op = self.op_seconds(&mixed)?;
        let launch = (per_op - mixed.tensors as f64 * tensor).max(per_op / 10.0);
        let overhead = |probe: &Probe| launch + tensor * probe.tensors as f64;
        // The sizes up to a step's on the CPU; a GPU reaches its rates only on larger
        // kernels, so it is measured on those too.
        fn big<T: Copy>(quick: bool, device: DeviceKind, sizes: &[T], gpu_sizes: &[T]) -> Vec<T> {
            match (quick, device) {
                (true, _) => sizes[..2].to_vec(),
                (false, DeviceKind::Cpu) => sizes.to_vec(),
                (false, DeviceKind::Cuda) => [sizes, gpu_sizes].concat(),
            }
        }
        let vector_sizes = big(quick, device, &[1 << 10, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22], &[1 << 24]);
        let matmul_sizes = big(quick, device, &[16, 64, 256, 512], &[1024, 2048, 4096]);
        let conv_sizes = big(quick, device, &[(8, 8), (16, 16), (32, 28), (64, 56)], &[(128, 56), (256, 56)]);
        let kernel_rates = KernelRates {
            matmul: self.rates(matmul_sizes.into_iter().map(matmul).collect(), overhead)?,
            conv: self.rates(conv_sizes.into_iter().map(conv).collect(), overhead)?,
            conv_by_image: device == DeviceKind::Cpu,
            elementwise: self.rates(vector_sizes.iter().map(|&n| elementwise(n)).collect(), overhead)?,
            reduction: self.rates(vector_sizes.iter().map(|&n| normalisation(n)).collect(), overhead)?,
            transcendental: self.rates(vector_sizes.iter().map(|&n| transcendental(n)).collect(), overhead)?,
        };
        let (to_host, to_device) = self.copy_bandwidths(if quick { 1 << 18 } else { 1 << 23 }, launch)?;
        let best = |points: &[[f64; 2]]| points.iter().map(|p| p[1]).fold(0.0, f64::max);
        let matrix = best(&kernel_rates.matmul).max(best(&kernel_rates.conv));
        let (what, host_link, overlap) = match device {
            DeviceKind::Cpu => {
                let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
                (
                    format!("lms's CPU reference backend ({threads} hardware threads)"),
                    "none: device and host arenas are both host memory; a swap copies between them, in line \
                     with the kernels",
                    false,
                )
            }
            DeviceKind::Cuda => {
                let gpu = CudaBackend::new(0, PROBE_MEMORY).map_err(Error::Run)?.device_name().to_string();
                (format!("lms's CUDA backend ({gpu})"), "the GPU's link to pinned host memory", true)
            }
        };
        let mut profile = DeviceProfile {
            format_version: FORMAT_VERSION,
            name: name.to_string(),
            description: format!(
                "{what}, measured by `lms profile --device {}{}`: kernel rates by class and size, swap copies \
                 each way, per-op overhead; the peaks are the best measured rates",
                device_name(device),
                if quick { " --quick" } else { "" }
            ),
            peak_flops: PeakFlops { fp32: matrix, tf32: matrix, bf16: matrix },
            matrix_precision: Precision::Fp32,
            matrix_precision_note: "measured in f32, the precision the backend computes in".into(),
            memory_bytes_per_second: best(&kernel_rates.elementwise),
            host_link: host_link.into(),
            host_to_device_bytes_per_second: to_device,
            device_to_host_bytes_per_second: to_host,
            launch_seconds: significant(launch),
            tensor_seconds: significant(tensor),
            node_seconds: 0.0,
            copies_overlap_compute: overlap,
            op_seconds: BTreeMap::new(),
            kernel_rates: Some(kernel_rates),
        };
        profile.node_seconds = self.node_seconds(&profile)?;
        Ok(profile)
    }

    /// The time a node of a training step takes beyond what `profile`
    /// predicts for it from the chains of one kind of op: a step-shaped
    /// schedule ([`schedule`]) measured against its prediction, the
    /// difference shared among its nodes (views included). A chain keeps its
    /// few kernels' code and data warm and its live set small; a step does
    /// not.
    fn node_seconds(&self, profile: &DeviceProfile) -> Result<f64> {
        let probe = schedule();
        let predicted: f64 = CostModel::new(profile).costs(&probe.graph).iter().map(|c| c.seconds).sum();
        let measured = self.step_seconds(&probe.graph)?;
        Ok(significant(((measured - predicted) / probe.ops as f64).max(0.0)))
    }

    /// Bandwidths (device to host, host to device) of swaps of `elements`
    /// f32: a chain of swap-out/swap-in pairs whose time, less each copy's
    /// fixed `overhead` (the launch latency the time model charges a swap),
    /// is shared between the two copies by their traced durations.
    fn copy_bandwidths(&self, elements: usize, overhead: f64) -> Result<(f64, f64)> {
        let pairs = 4;
        let probe = swaps(elements, pairs);
        let proto = serialize::to_proto(&probe.graph, &[])?;
        let program = Program::new(proto, "probe 'swaps'").map_err(|e| Error::Run(e.into()))?;
        let memory = RunOptions { device_memory: PROBE_MEMORY, host_memory: PROBE_MEMORY, seed: 0 };
        let mut session = Session::new(program, (self.backend)().map_err(Error::Run)?, memory).map_err(Error::Run)?;
        session.set_tracing(true);
        session.set_reading_outputs(false);
        session.step().map_err(Error::Run)?;
        let steps = if self.options.quick { 3 } else { 7 };
        let mut measured = Vec::with_capacity(steps);
        for _ in 0..steps {
            let step = session.step().map_err(Error::Run)?;
            let traced = |op: &str| step.report.trace.iter().filter(|e| e.op == op).map(|e| e.dur_us).sum::<f64>();
            let (out, back) = (traced(SWAP_OUT_OP), traced(SWAP_IN_OP));
            measured.push((self.seconds(&step.report), out / (out + back).max(f64::MIN_POSITIVE)));
        }
        measured.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (step, out_share) = measured[self.typical(measured.len())];
        let copies = (step / pairs as f64 - 2.0 * overhead).max(step / pairs as f64 / 10.0);
        let bytes = probe.size;
        let out_share = out_share.clamp(0.1, 0.9);
        Ok((significant(bytes / (copies * out_share)), significant(bytes / (copies * (1.0 - out_share)))))
    }
}

/// The word `--device` takes for `device`.
fn device_name(device: DeviceKind) -> &'static str {
    match device {
        DeviceKind::Cpu => "cpu",
        DeviceKind::Cuda => "cuda",
    }
}

/// `value` to 4 significant digits, so a profile's figures read plainly.
fn significant(value: f64) -> f64 {
    if !(value.is_finite() && value > 0.0) {
        return value;
    }
    format!("{value:.3e}").parse().unwrap_or(value)
}

fn f32s(shape: &[usize]) -> TensorType {
    TensorType::new(DType::F32, shape.to_vec())
}

/// Adds a node computing one output of `ty` on the device.
fn add(g: &mut Graph, op: &str, attrs: Attrs, inputs: &[TensorId], ty: TensorType) -> TensorId {
    add_outputs(g, op, attrs, inputs, vec![ty])[0]
}

/// Adds a node computing outputs of `types` on the device (swaps: on the host).
fn add_outputs(g: &mut Graph, op: &str, attrs: Attrs, inputs: &[TensorId], types: Vec<TensorType>) -> Vec<TensorId> {
    let name = format!("{}{}", op.to_lowercase(), g.node_count());
    let (domain, device) = match op {
        SWAP_OUT_OP | SWAP_IN_OP => (LMS_DOMAIN.to_string(), Device::Cpu),
        "UnaryGrad" | "MomentumUpdate" => (LMS_DOMAIN.to_string(), Device::Gpu),
        _ => (String::new(), Device::Gpu),
    };
    let node = Node {
        name: name.clone(),
        op: op.into(),
        domain,
        attrs,
        parameterized: op == INPUT_OP,
        phase: Phase::Forward,
        device,
        inputs: inputs.iter().map(|&t| Some(t)).collect(),
        outputs: vec![],
    };
    let outputs = types.into_iter().enumerate().map(|(i, ty)| (format!("{name}.{i}"), ty)).collect();
    let id = g.add_node(node, outputs);
    let outs = g.node(id).outputs.clone();
    if op == INPUT_OP {
        g.inputs.extend(&outs);
    }
    outs
}

/// A graph of `ops` nodes, each `step` applied to the previous output,
/// from an input of type `ty`; the last output is the graph's.
fn chain(name: &str, ty: TensorType, ops: usize, step: impl Fn(&mut Graph, TensorId) -> TensorId) -> Graph {
    let mut g = Graph::new(name, 17);
    let mut x = add(&mut g, INPUT_OP, Attrs::new(), &[], ty);
    for _ in 0..ops {
        x = step(&mut g, x);
    }
    g.outputs.push(x);
    g
}

/// 256 sums of `inputs` one-element f32 tensors (the last sum and
/// `inputs - 1` graph inputs; one input: Relus): the per-op and per-tensor
/// overheads.
fn overhead(inputs: usize) -> Probe {
    let (ty, ops) = (f32s(&[1]), 256);
    let mut g = chain("overhead", ty.clone(), 0, |_, x| x);
    let mut x = g.outputs.pop().expect("the chain's input");
    let others: Vec<TensorId> = (1..inputs).map(|_| add(&mut g, INPUT_OP, Attrs::new(), &[], ty.clone())).collect();
    for _ in 0..ops {
        x = match inputs {
            1 => add(&mut g, "Relu", Attrs::new(), &[x], ty.clone()),
            _ => add(&mut g, "Sum", Attrs::new(), &[&[x][..], &others].concat(), ty.clone()),
        };
    }
    g.outputs.push(x);
    Probe { graph: g, ops, size: (4 * (inputs + 1)) as f64, tensors: inputs + 1 }
}

/// 256 small ops cycling through eight kinds (activations, elementwise
/// arithmetic with a second input, a transpose, a softmax, a matrix product,
/// a layer normalisation) on 4×4 f32 tensors; `tensors` counts the inputs
/// and outputs of an average op, rounded.
fn mixed_small_ops() -> Probe {
    let (ty, ops) = (f32s(&[4, 4]), 256);
    let mut g = chain("mixed", ty.clone(), 0, |_, x| x);
    let mut x = g.outputs.pop().expect("the chain's input");
    let other = add(&mut g, INPUT_OP, Attrs::new(), &[], ty.clone());
    let (scale, bias) =
        (add(&mut g, INPUT_OP, Attrs::new(), &[], f32s(&[4])), add(&mut g, INPUT_OP, Attrs::new(), &[], f32s(&[4])));
    let kinds: [(&str, Vec<TensorId>); 8] = [
        ("Relu", vec![]),
        ("Add", vec![other]),
        ("Transpose", vec![]),
        ("Mul", vec![other]),
        ("Softmax", vec![]),
        ("MatMul", vec![other]),
        ("Sigmoid", vec![]),
        ("LayerNormalization", vec![scale, bias]),
    ];
    for i in 0..ops {
        let (op, rest) = &kinds[i % kinds.len()];
        x = add(&mut g, op, Attrs::new(), &[&[x][..], rest].concat(), ty.clone());
    }
    g.outputs.push(x);
    let tensors: usize = kinds.iter().map(|(_, rest)| 2 + rest.len()).sum();
    Probe { graph: g, ops, size: (4 * 16 * tensors / kinds.len()) as f64, tensors: tensors / kinds.len() }
}

/// A training step's shape at the sizes of a small model's (batch 8, width
/// 32): a forward pass of 64 layers (product with a weight of its own, bias,
/// activation, a view), whose inputs and activations stay live for the
/// backward pass that runs the layers in reverse (the activation's
/// gradient, the products for the input's and the weight's gradients, the
/// weight's momentum update); `ops` counts every node but the inputs.
fn schedule() -> Probe {
    let (layers, batch, width) = (64, 8, 32);
    let (ty, weight) = (f32s(&[batch, width]), f32s(&[width, width]));
    let mut g = chain("schedule", ty.clone(), 0, |_, x| x);
    let mut x = g.outputs.pop().expect("the chain's input");
    let relu = Attrs::new().with("op", Attr::String("Relu".into()));
    let momentum = Attrs::new().with("lr", Attr::Float(0.01)).with("momentum", Attr::Float(0.9));
    let mut saved = Vec::with_capacity(layers);
    for _ in 0..layers {
        let w = add(&mut g, INPUT_OP, Attrs::new(), &[], weight.clone());
        let b = add(&mut g, INPUT_OP, Attrs::new(), &[], f32s(&[width]));
        let product = add(&mut g, "MatMul", Attrs::new(), &[x, w], ty.clone());
        let biased = add(&mut g, "Add", Attrs::new(), &[product, b], ty.clone());
        let active = add(&mut g, "Relu", Attrs::new(), &[biased], ty.clone());
        saved.push((x, w, biased));
        x = add(&mut g, "Flatten", Attrs::new(), &[active], ty.clone());
    }
    let mut grad = x;
    for (input, w, biased) in saved.into_iter().rev() {
        let before = add(&mut g, "UnaryGrad", relu.clone(), &[biased, grad], ty.clone());
        let transposed = |a: i64, b: i64| Attrs::new().with("transA", Attr::Int(a)).with("transB", Attr::Int(b));
        grad = add(&mut g, "Gemm", transposed(0, 1), &[before, w], ty.clone());
        let dw = add(&mut g, "Gemm", transposed(1, 0), &[input, before], weight.clone());
        let velocity = add(&mut g, INPUT_OP, Attrs::new(), &[], weight.clone());
        let updated =
            add_outputs(&mut g, "MomentumUpdate", momentum.clone(), &[w, velocity, dw], vec![weight.clone(); 2]);
        g.outputs.extend(updated);
    }
    g.outputs.push(grad);
    Probe { graph: g, ops: 8 * layers, size: 0.0, tensors: 0 }
}

/// 16 kernels of `n` f32 elements that evaluate a transcendental function
/// per element, cycling through error function, hyperbolic tangent, sigmoid
/// and softmax over rows of 64; `size` is the average of an f32 read and
/// written per function evaluation (the softmax makes two per element), the
/// unit the time model costs them in.
fn transcendental(n: usize) -> Probe {
    let (ty, ops) = (f32s(&[n / 64, 64]), 16);
    let kinds = ["Erf", "Tanh", "Sigmoid", "Softmax"];
    let graph = chain("transcendental", ty.clone(), ops, |g, x| {
        let op = kinds[g.node_count() % kinds.len()];
        add(g, op, Attrs::new(), &[x], ty.clone())
    });
    let evaluations: u64 = kinds.iter().map(|op| crate::shape::transcendental_evaluations(op, &Attrs::new())).sum();
    Probe { graph, ops, size: (8 * n) as f64 * evaluations as f64 / kinds.len() as f64, tensors: 2 }
}

/// 16 elementwise kernels of `n` f32 elements cycling through the kinds a
/// training step runs most — a sum, an activation, its gradient and the
/// momentum update of a weight — each reading a tensor of its own besides
/// the previous output, so that above the caches the probe streams from
/// memory as a step does (a chain that reuses one input keeps it in cache).
/// `size` is the average bytes read and written per op.
fn elementwise(n: usize) -> Probe {
    let (ty, ops) = (f32s(&[n]), 16);
    let mut g = chain("elementwise", ty.clone(), 0, |_, x| x);
    let mut x = g.outputs.pop().expect("the chain's input");
    let relu = Attrs::new().with("op", Attr::String("Relu".into()));
    let momentum = Attrs::new().with("lr", Attr::Float(0.01)).with("momentum", Attr::Float(0.9));
    let mut tensors = 0;
    for i in 0..ops {
        let mut own = || add(&mut g, INPUT_OP, Attrs::new(), &[], ty.clone());
        x = match i % 4 {
            0 => {
                let other = own();
                add(&mut g, "Add", Attrs::new(), &[x, other], ty.clone())
            }
            1 => add(&mut g, "Relu", Attrs::new(), &[x], ty.clone()),
            2 => {
                let other = own();
                add(&mut g, "UnaryGrad", relu.clone(), &[x, other], ty.clone())
            }
            _ => {
                let (weight, velocity) = (own(), own());
                let types = vec![ty.clone(), ty.clone()];
                add_outputs(&mut g, "MomentumUpdate", momentum.clone(), &[weight, velocity, x], types)[0]
            }
        };
        tensors += [3, 2, 3, 5][i % 4];
    }
    g.outputs.push(x);
    Probe { graph: g, ops, size: (4 * n * tensors / ops) as f64, tensors: tensors / ops }
}

/// 16 layer normalisations over rows of 64 of `n` f32 elements.
fn normalisation(n: usize) -> Probe {
    let (ty, ops) = (f32s(&[n / 64, 64]), 16);
    let mut g = chain("layernorm", ty.clone(), 0, |_, x| x);
    let mut x = g.outputs.pop().expect("the chain's input");
    let scale = add(&mut g, INPUT_OP, Attrs::new(), &[], f32s(&[64]));
    let bias = add(&mut g, INPUT_OP, Attrs::new(), &[], f32s(&[64]));
    for _ in 0..ops {
        x = add(&mut g, "LayerNormalization", Attrs::new(), &[x, scale, bias], ty.clone());
    }
    g.outputs.push(x);
    Probe { graph: g, ops, size: (8 * n) as f64, tensors: 4 }
}

/// Products of `n`×`n` matrices: x·w, then that times w, ...
fn matmul(n: usize) -> Probe {
    let ops = if n >= 256 { 8 } else { 32 };
    let ty = f32s(&[n, n]);
    let mut g = chain("matmul", ty.clone(), 0, |_, x| x);
    let w = add(&mut g, INPUT_OP, Attrs::new(), &[], ty.clone());
    let mut x = g.outputs.pop().unwrap_or(w);
    for _ in 0..ops {
        x = add(&mut g, "MatMul", Attrs::new(), &[x, w], ty.clone());
    }
    g.outputs.push(x);
    Probe { graph: g, ops, size: 2.0 * (n * n * n) as f64, tensors: 3 }
}

/// 3×3 convolutions of `c` channels to `c` on `h`×`h` images (batch 1,
/// pads 1), for `(c, h)`.
fn conv((c, h): (usize, usize)) -> Probe {
    let ops = 8;
    let ty = f32s(&[1, c, h, h]);
    let mut g = chain("conv", ty.clone(), 0, |_, x| x);
    let w = add(&mut g, INPUT_OP, Attrs::new(), &[], f32s(&[c, c, 3, 3]));
    let mut x = g.outputs.pop().unwrap_or(w);
    let attrs = Attrs::new().with("pads", Attr::Ints(vec![1; 4])).with("kernel_shape", Attr::Ints(vec![3, 3]));
    for _ in 0..ops {
        x = add(&mut g, "Conv", attrs.clone(), &[x, w], ty.clone());
    }
    g.outputs.push(x);
    Probe { graph: g, ops, size: 2.0 * (c * c * 9 * h * h) as f64, tensors: 3 }
}

/// `pairs` swap-outs of `n` f32 elements, each swapped back in; `size` is the
/// bytes one copy moves.
fn swaps(n: usize, pairs: usize) -> Probe {
    let ty = f32s(&[n]);
    let graph = chain("swaps", ty.clone(), pairs, |g, x| {
        let host = add(g, SWAP_OUT_OP, Attrs::new(), &[x], ty.clone());
        add(g, SWAP_IN_OP, Attrs::new(), &[host], ty.clone())
    });
    Probe { graph, ops: 2 * pairs, size: (4 * n) as f64, tensors: 2 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_keep_four_significant_digits() {
        assert_eq!(significant(123_456_789.0), 123_500_000.0);
        assert_eq!(significant(2.345_678e-6), 2.346e-6);
        assert_eq!(significant(0.0), 0.0);
    }

    #[test]
    fn probes_count_their_work() {
        assert_eq!((matmul(16).size, matmul(16).ops), (8192.0, 32));
        assert_eq!(conv((8, 8)).size, 2.0 * 64.0 * 9.0 * 64.0);
        assert_eq!(elementwise(1024).size, 13.0 * 1024.0);
        assert_eq!(elementwise(1024).tensors, 3);
        let probe = swaps(16, 4);
        assert_eq!((probe.ops, probe.graph.node_count()), (8, 9));
        assert_eq!(transcendental(1024).size, 10.0 * 1024.0);
    }

    #[test]
    fn views_cost_their_copy_on_a_measured_profile_only() {
        let ty = f32s(&[256]);
        let g = chain("views", ty.clone(), 1, |g, x| add(g, "Flatten", Attrs::new(), &[x], f32s(&[256, 1])));
        let flatten = g.node_ids().find(|&id| g.node(id).op == "Flatten").expect("the chain's view");
        let measured = DeviceProfile::load(concat!(env!("CARGO_MANIFEST_DIR"), "/profiles/cpu-2core-measured.json"))
            .expect("the measured CPU profile");
        let copy = CostModel::new(&measured).cost(&g, flatten);
        assert_eq!((copy.bytes, copy.engine), (2048, crate::shape::cost::Engine::Vector));
        assert!(copy.seconds > measured.launch_seconds);
        let h100 = DeviceProfile::load("h100-sxm").expect("the shipped profile");
        assert_eq!(CostModel::new(&h100).cost(&g, flatten).seconds, 0.0);
    }

    #[test]
    fn swaps_cost_their_copy_and_launch_only() {
        let probe = swaps(1024, 1);
        let measured = DeviceProfile::load(concat!(env!("CARGO_MANIFEST_DIR"), "/profiles/cpu-2core-measured.json"))
            .expect("the measured CPU profile");
        assert!(measured.tensor_seconds > 0.0 && measured.node_seconds > 0.0);
        let model = CostModel::new(&measured);
        for (op, bandwidth) in [
            (SWAP_OUT_OP, measured.device_to_host_bytes_per_second),
            (SWAP_IN_OP, measured.host_to_device_bytes_per_second),
        ] {
            let id = probe.graph.node_ids().find(|&id| probe.graph.node(id).op == op).expect("the probe's swap");
            let copy = model.cost(&probe.graph, id).seconds;
            let expected = 4096.0 / bandwidth + measured.launch_seconds;
            assert!((copy - expected).abs() <= 1e-12, "{op}: {copy} s, expected {expected} s");
        }
    }
}
