//! The CUDA backend against the CPU reference backend: every kernel on random inputs
//! (one-node graphs), and whole training graphs (original and with TFLMS swaps).
//!
//! The GPU half runs on the GPU where a CUDA driver exists, else on the emulated device
//! (`lms-cuda-emulator`: the same kernels compiled for the CPU, behind fake CUDA
//! libraries, cuDNN's convolutions among them), which each test names in its output. With
//! `LMS_REQUIRE_GPU=1` a missing driver is a failure instead (no fallback; set
//! `LMS_CUDA_EMULATOR=1` to choose the emulated device), and so is a driver whose GPU
//! cannot be used.
//!
//! Tolerance: |gpu − cpu| ≤ 1e-4·(1 + |cpu|) for elementwise ops, reductions and
//! normalizations (f32 results of double sums, where summation order differs), and
//! 1e-3·(1 + |cpu|) for matrix products and convolutions (f32 accumulation in another
//! order); integer, bool and data-movement results, dropout masks and GatherGrad must be
//! equal.

mod common;

use common::{float, int, string, training_graph, Builder};
use lms_proto::lms::attribute::Value;
use lms_proto::lms::{Attribute, DType, Ints, TensorValue};
use lms_runtime::backend::cuda::{gpu_test_gate, loader, REQUIRE_GPU_VAR};
use lms_runtime::{Backend, CpuBackend, CudaBackend, HostTensor, Program, RunOptions, Session};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// Chooses the device of the GPU half, once per process before any CUDA library loads:
/// the emulated device where no CUDA driver exists, unless `LMS_REQUIRE_GPU=1` asks for a
/// GPU. Returns whether the emulated device runs it.
fn on_emulator() -> bool {
    static CHOICE: OnceLock<bool> = OnceLock::new();
    *CHOICE.get_or_init(|| {
        let require_gpu = std::env::var(REQUIRE_GPU_VAR).is_ok_and(|v| v == "1");
        if require_gpu {
            loader::emulated()
        } else {
            loader::emulate_where_no_driver()
        }
    })
}

/// Whether the GPU half runs; says once per test on which device (or plainly that it is
/// skipped), and fails where skipping is not allowed.
fn gpu_present() -> bool {
    let emulated = on_emulator();
    let runs =
        gpu_test_gate("the GPU half (the cases ran on the CPU backend only)").unwrap_or_else(|why| panic!("{why}"));
    if runs {
        let device = if emulated { "the emulated device (no GPU)" } else { "the GPU" };
        println!("the GPU half runs on {device}");
    }
    runs
}

/// [`gpu_present`] without the message.
fn gpu_quietly() -> bool {
    on_emulator();
    lms_runtime::backend::cuda::driver_missing().is_none()
}

fn ints(name: &str, v: &[i64]) -> Attribute {
    Attribute { name: name.into(), value: Some(Value::Ints(Ints { values: v.to_vec() })) }
}

/// A small deterministic generator of test values.
struct Rng(u64);

impl Rng {
    /// The generator of a kernel test's cases, seeded `seed`; says first whether the GPU
    /// half of the test is skipped.
    fn for_cases(seed: u64) -> Rng {
        gpu_present();
        Rng(seed)
    }

    fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }

    /// f32 values uniform in [lo, hi).
    fn floats(&mut self, shape: &[usize], lo: f32, hi: f32) -> HostTensor {
        let n = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| lo + (hi - lo) * self.next() as f32).collect();
        HostTensor::from_vec(shape.to_vec(), v).unwrap()
    }

    /// i64 values uniform in [0, below).
    fn indices(&mut self, shape: &[usize], below: i64) -> HostTensor {
        let n = shape.iter().product();
        let v: Vec<i64> = (0..n).map(|_| (self.next() * below as f64) as i64).collect();
        HostTensor::from_vec(shape.to_vec(), v).unwrap()
    }
}

/// One node of op `op` (domain `lms` when `lms`), its inputs fed with `values`, its
/// outputs of the given types the graph's outputs.
struct Case {
    op: &'static str,
    lms: bool,
    opset: i64,
    attributes: Vec<Attribute>,
    inputs: Vec<Option<HostTensor>>,
    outputs: Vec<(DType, Vec<usize>)>,
    tolerance: f64,
    /// The tolerance of f64 outputs, relative as `tolerance`; 0 (equal) unless set.
    f64_tolerance: f64,
}

impl Case {
    fn new(op: &'static str, inputs: Vec<HostTensor>, outputs: Vec<(DType, Vec<usize>)>) -> Case {
        Case {
            op,
            lms: false,
            opset: 17,
            attributes: Vec::new(),
            inputs: inputs.into_iter().map(Some).collect(),
            outputs,
            tolerance: 1e-4,
            f64_tolerance: 0.0,
        }
    }

    fn lms(mut self) -> Case {
        self.lms = true;
        self
    }

    fn attrs(mut self, attributes: Vec<Attribute>) -> Case {
        self.attributes = attributes;
        self
    }

    fn opset(mut self, opset: i64) -> Case {
        self.opset = opset;
        self
    }

    fn tolerance(mut self, tolerance: f64) -> Case {
        self.tolerance = tolerance;
        self
    }

    fn f64_tolerance(mut self, tolerance: f64) -> Case {
        self.f64_tolerance = tolerance;
        self
    }

    /// The one-node program and the given values of its inputs.
    fn program(&self) -> (Program, BTreeMap<String, HostTensor>) {
        let mut b = Builder::new(self.op);
        b.graph.opset = self.opset;
        let mut slots = Vec::new();
        let mut values = BTreeMap::new();
        for (i, input) in self.inputs.iter().enumerate() {
            slots.push(input.as_ref().map(|t| {
                let name = format!("in{i}");
                let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
                values.insert(name.clone(), t.clone());
                b.input(&name, t.dtype(), &shape, vec![])
            }));
        }
        let names: Vec<String> = (0..self.outputs.len()).map(|i| format!("out{i}")).collect();
        let shapes: Vec<Vec<u64>> = self.outputs.iter().map(|(_, s)| s.iter().map(|&d| d as u64).collect()).collect();
        let outs: Vec<(&str, DType, &[u64])> = self
            .outputs
            .iter()
            .enumerate()
            .map(|(i, (dtype, _))| (names[i].as_str(), *dtype, &shapes[i][..]))
            .collect();
        let (node, tensors) = b.node(self.op, self.op, &slots, &outs, self.attributes.clone());
        if self.lms {
            b.graph.nodes[node as usize].domain = "lms".into();
        }
        b.graph.outputs.extend(tensors);
        (Program::new(b.graph, "case.lms").unwrap(), values)
    }

    /// The outputs of one step on `backend`.
    fn run<B: Backend>(&self, backend: B) -> Vec<HostTensor> {
        let (program, values) = self.program();
        run_program(program, backend, &values)
    }

    /// Runs the case on both backends and compares (on the CPU only without a GPU);
    /// returns the CPU's outputs.
    fn check(&self) -> Vec<HostTensor> {
        let cpu = self.run(CpuBackend::new());
        if !gpu_quietly() {
            return cpu;
        }
        let gpu = self.run(gpu());
        assert_eq!(cpu.len(), gpu.len(), "{}", self.op);
        for (i, (c, g)) in cpu.iter().zip(&gpu).enumerate() {
            assert_eq!((c.dtype(), &c.shape), (g.dtype(), &g.shape), "{} output {i}", self.op);
            match (c.as_f32("c"), g.as_f32("g")) {
                (Ok(c), Ok(g)) => {
                    for (j, (a, b)) in c.iter().zip(g).enumerate() {
                        let ok = (a - b).abs() as f64 <= self.tolerance * (1.0 + a.abs() as f64)
                            || (a.is_nan() && b.is_nan());
                        assert!(ok, "{} output {i}[{j}]: cpu {a}, gpu {b}", self.op);
                    }
                }
                _ if c.dtype() == DType::DtypeF64 => {
                    let (c, g) = (c.view::<f64>("c").unwrap(), g.view::<f64>("g").unwrap());
                    for (j, (a, b)) in c.iter().zip(g).enumerate() {
                        let ok = (a - b).abs() <= self.f64_tolerance * (1.0 + a.abs()) || (a.is_nan() && b.is_nan());
                        assert!(ok, "{} output {i}[{j}]: cpu {a:e}, gpu {b:e}", self.op);
                    }
                }
                _ => assert_eq!(c, g, "{} output {i}", self.op),
            }
        }
        cpu
    }
}

impl Case {
    /// Runs the case on both backends (on the CPU only without a GPU): each step fails,
    /// the same way (the error names the node and says `message`).
    fn check_error(&self, message: &str) {
        let fail = |backend: &str, error: String| {
            assert!(error.contains(message) && error.contains(self.op), "{} on the {backend}: {error}", self.op);
        };
        let (program, values) = self.program();
        fail("CPU", step_error(program, CpuBackend::new(), &values));
        if gpu_quietly() {
            let (program, values) = self.program();
            fail("GPU", step_error(program, gpu(), &values));
        }
    }
}

/// The error of one step of `program` on `backend`, which must fail.
fn step_error<B: Backend>(program: Program, backend: B, values: &BTreeMap<String, HostTensor>) -> String {
    let options = RunOptions { device_memory: 1 << 30, host_memory: 1 << 30, seed: 3 };
    let mut session = Session::with_values(program, backend, options, values).unwrap_or_else(|e| panic!("{e}"));
    match session.step() {
        Ok(_) => panic!("the step succeeded"),
        Err(e) => e.to_string(),
    }
}

/// The outputs of one step of `program` on `backend` with its inputs fed `values`.
fn run_program<B: Backend>(program: Program, backend: B, values: &BTreeMap<String, HostTensor>) -> Vec<HostTensor> {
    let name = program.graph().name.clone();
    if backend.name() == "cuda" {
        record_ops(&program);
    }
    let options = RunOptions { device_memory: 1 << 30, host_memory: 1 << 30, seed: 3 };
    let mut session = Session::with_values(program, backend, options, values).unwrap_or_else(|e| panic!("{name}: {e}"));
    session.step().unwrap_or_else(|e| panic!("{name}: {e}")).outputs
}

/// The variable naming a file to which each program run on the CUDA backend appends its
/// nodes' ops, one `domain op` line each (the coverage test sets it).
const OPS_RUN_VAR: &str = "LMS_CUDA_OPS_RUN";

/// Appends `program`'s ops to the file [`OPS_RUN_VAR`] names, if any.
fn record_ops(program: &Program) {
    use std::io::Write;
    let Some(path) = std::env::var_os(OPS_RUN_VAR) else { return };
    let lines: String = program.graph().nodes.iter().map(|n| format!("{} {}\n", domain_of(&n.domain), n.op)).collect();
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(path).unwrap();
    file.write_all(lines.as_bytes()).unwrap();
}

/// A node's domain as the coverage lines write it (`onnx` for the default one).
fn domain_of(domain: &str) -> &str {
    if domain.is_empty() || domain == "ai.onnx" {
        "onnx"
    } else {
        domain
    }
}

/// A CUDA backend with 1 GiB of device memory.
fn gpu() -> CudaBackend {
    CudaBackend::new(0, 1 << 30).unwrap_or_else(|e| panic!("{e}"))
}

fn f32s(shape: &[usize]) -> (DType, Vec<usize>) {
    (DType::DtypeF32, shape.to_vec())
}

#[test]
fn unary_ops_and_their_gradients_match_the_cpu() {
    let mut rng = Rng::for_cases(1);
    let x = rng.floats(&[3, 50], -3.0, 3.0);
    let positive = rng.floats(&[3, 50], 0.1, 4.0);
    for op in [
        "Relu",
        "Neg",
        "Abs",
        "Sigmoid",
        "Tanh",
        "Erf",
        "Exp",
        "Floor",
        "Ceil",
        "Round",
        "Softplus",
        "Softsign",
        "Selu",
        "HardSigmoid",
        "Gelu",
        "LeakyRelu",
        "Elu",
        "Cos",
        "Sin",
        "HardSwish",
        "Mish",
    ] {
        Case::new(op, vec![x.clone()], vec![f32s(&[3, 50])]).check();
    }
    for op in ["Log", "Sqrt", "Reciprocal"] {
        Case::new(op, vec![positive.clone()], vec![f32s(&[3, 50])]).check();
    }
    Case::new("Gelu", vec![x.clone()], vec![f32s(&[3, 50])]).attrs(vec![string("approximate", "tanh")]).check();
    let slope = rng.floats(&[50], -0.5, 0.5);
    Case::new("PReluGrad", vec![rng.floats(&[3, 50], -1.0, 1.0), x.clone(), slope], vec![f32s(&[3, 50]), f32s(&[50])])
        .lms()
        .check();
    let channel = rng.floats(&[3, 1], -0.5, 0.5);
    Case::new(
        "PReluGrad",
        vec![rng.floats(&[3, 50], -1.0, 1.0), x.clone(), channel],
        vec![f32s(&[3, 50]), f32s(&[3, 1])],
    )
    .lms()
    .check();
    let special =
        HostTensor::from_vec(vec![2, 3], vec![f32::NAN, f32::INFINITY, -f32::INFINITY, 0.0, -1.5, f32::MAX]).unwrap();
    // Round takes halves to the even integer on both devices.
    let halves = HostTensor::from_vec(vec![2, 4], vec![-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 4.5, f32::NAN]).unwrap();
    Case::new("Round", vec![halves], vec![f32s(&[2, 4])]).check();
    let bools = (DType::DtypeBool, vec![2, 3]);
    Case::new("IsNaN", vec![special.clone()], vec![bools.clone()]).check();
    for (positive, negative) in [(1, 1), (1, 0), (0, 1)] {
        Case::new("IsInf", vec![special.clone()], vec![bools.clone()])
            .attrs(vec![int("detect_positive", positive), int("detect_negative", negative)])
            .check();
    }
    Case::new("Clip", vec![x.clone()], vec![f32s(&[3, 50])])
        .attrs(vec![float("min", -1.0), float("max", 0.5)])
        .opset(6)
        .check();
    let dy = rng.floats(&[3, 50], -1.0, 1.0);
    for op in [
        "Relu",
        "Sigmoid",
        "Tanh",
        "Erf",
        "Exp",
        "Softplus",
        "Selu",
        "LeakyRelu",
        "Abs",
        "Neg",
        "Cos",
        "Sin",
        "HardSigmoid",
        "HardSwish",
        "Mish",
    ] {
        Case::new("UnaryGrad", vec![dy.clone(), x.clone()], vec![f32s(&[3, 50])])
            .lms()
            .attrs(vec![string("op", op)])
            .check();
    }
    for op in ["Log", "Sqrt", "Reciprocal"] {
        Case::new("UnaryGrad", vec![dy.clone(), positive.clone()], vec![f32s(&[3, 50])])
            .lms()
            .attrs(vec![string("op", op)])
            .check();
    }
}

#[test]
fn broadcast_binary_ops_compare_logic_where_and_cast_match_the_cpu() {
    let mut rng = Rng::for_cases(2);
    let a = rng.floats(&[2, 3, 4], -2.0, 2.0);
    let b = rng.floats(&[3, 1], 0.5, 2.0);
    for op in ["Add", "Sub", "Mul", "Div", "Pow", "Max", "Min"] {
        Case::new(op, vec![a.clone(), b.clone()], vec![f32s(&[2, 3, 4])]).check();
    }
    let c = rng.floats(&[4], -1.0, 1.0);
    Case::new("Sum", vec![a.clone(), b.clone(), c.clone()], vec![f32s(&[2, 3, 4])]).check();
    Case::new("Mean", vec![a.clone(), c.clone()], vec![f32s(&[2, 3, 4])]).check();
    Case::new("PRelu", vec![a.clone(), c.clone()], vec![f32s(&[2, 3, 4])]).check();
    for op in ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"] {
        Case::new(op, vec![a.clone(), b.clone()], vec![(DType::DtypeBool, vec![2, 3, 4])]).check();
    }
    let i = rng.indices(&[2, 3], 5);
    let j = rng.indices(&[3], 5);
    Case::new("Add", vec![i.clone(), j.clone()], vec![(DType::DtypeI64, vec![2, 3])]).check();
    Case::new("Equal", vec![i.clone(), j], vec![(DType::DtypeBool, vec![2, 3])]).check();
    let cond =
        Case::new("Less", vec![a.clone(), b.clone()], vec![(DType::DtypeBool, vec![2, 3, 4])]).run(CpuBackend::new());
    Case::new("Where", vec![cond[0].clone(), a.clone(), c], vec![f32s(&[2, 3, 4])]).check();
    Case::new("Not", vec![cond[0].clone()], vec![(DType::DtypeBool, vec![2, 3, 4])]).check();
    Case::new("Xor", vec![cond[0].clone(), cond[0].clone()], vec![(DType::DtypeBool, vec![2, 3, 4])]).check();
    Case::new("Cast", vec![a.clone()], vec![(DType::DtypeI64, vec![2, 3, 4])])
        .attrs(vec![int("to", DType::DtypeI64 as i64)])
        .check();
    Case::new("Cast", vec![i], vec![f32s(&[2, 3])]).attrs(vec![int("to", DType::DtypeF32 as i64)]).check();
    let x = rng.floats(&[2, 3, 4], 0.5, 2.0);
    let p = rng.floats(&[4], 0.5, 2.0);
    let dy = rng.floats(&[2, 3, 4], -1.0, 1.0);
    Case::new("PowGrad", vec![dy.clone(), x.clone(), p.clone()], vec![f32s(&[2, 3, 4])]).lms().check();
    Case::new("PowGrad", vec![dy, p.clone(), x], vec![f32s(&[4])]).lms().check();
}

#[test]
fn matrix_products_match_the_cpu() {
    let mut rng = Rng::for_cases(3);
    let (a, b) = (rng.floats(&[2, 3, 4, 5], -1.0, 1.0), rng.floats(&[2, 3, 5, 6], -1.0, 1.0));
    Case::new("MatMul", vec![a.clone(), b], vec![f32s(&[2, 3, 4, 6])]).tolerance(1e-3).check();
    let shared = rng.floats(&[5, 6], -1.0, 1.0);
    Case::new("MatMul", vec![a.clone(), shared], vec![f32s(&[2, 3, 4, 6])]).tolerance(1e-3).check();
    let (p, q) = (rng.floats(&[2, 1, 4, 5], -1.0, 1.0), rng.floats(&[3, 5, 6], -1.0, 1.0));
    Case::new("MatMul", vec![p, q], vec![f32s(&[2, 3, 4, 6])]).tolerance(1e-3).check();
    let (v, m) = (rng.floats(&[5], -1.0, 1.0), rng.floats(&[3, 5, 2], -1.0, 1.0));
    Case::new("MatMul", vec![v, m], vec![f32s(&[3, 2])]).tolerance(1e-3).check();
    let (ga, gb, gc) = (rng.floats(&[7, 4], -1.0, 1.0), rng.floats(&[9, 7], -1.0, 1.0), rng.floats(&[9], -1.0, 1.0));
    Case::new("Gemm", vec![ga, gb, gc], vec![f32s(&[4, 9])])
        .attrs(vec![int("transA", 1), int("transB", 1), float("alpha", 0.5), float("beta", 2.0)])
        .tolerance(1e-3)
        .check();
}

#[test]
fn convolutions_and_pools_match_the_cpu() {
    let mut rng = Rng::for_cases(4);
    let x = rng.floats(&[2, 4, 9, 9], -1.0, 1.0);
    let w = rng.floats(&[6, 2, 3, 3], -0.5, 0.5);
    let bias = rng.floats(&[6], -0.5, 0.5);
    let conv = vec![int("group", 2), ints("pads", &[1, 1, 1, 1]), ints("strides", &[2, 2])];
    Case::new("Conv", vec![x.clone(), w.clone(), bias], vec![f32s(&[2, 6, 5, 5])])
        .attrs(conv.clone())
        .tolerance(1e-3)
        .check();
    let dy = rng.floats(&[2, 6, 5, 5], -1.0, 1.0);
    Case::new("ConvGradData", vec![dy.clone(), w.clone()], vec![f32s(&[2, 4, 9, 9])])
        .lms()
        .attrs(conv.clone())
        .tolerance(1e-3)
        .check();
    Case::new("ConvGradWeight", vec![dy.clone(), x.clone()], vec![f32s(&[6, 2, 3, 3])])
        .lms()
        .attrs(conv)
        .tolerance(1e-3)
        .check();
    Case::new("ConvGradBias", vec![dy], vec![f32s(&[6])]).lms().check();
    // Asymmetric pads (an explicitly padded X on the GPU), forward and both gradients.
    let asym = vec![ints("pads", &[0, 1, 2, 1]), ints("strides", &[2, 1])];
    let w2 = rng.floats(&[3, 4, 3, 2], -0.5, 0.5);
    Case::new("Conv", vec![x.clone(), w2.clone()], vec![f32s(&[2, 3, 5, 10])])
        .attrs(asym.clone())
        .tolerance(1e-3)
        .check();
    let dy2 = rng.floats(&[2, 3, 5, 10], -1.0, 1.0);
    Case::new("ConvGradData", vec![dy2.clone(), w2.clone()], vec![f32s(&[2, 4, 9, 9])])
        .lms()
        .attrs(asym.clone())
        .tolerance(1e-3)
        .check();
    Case::new("ConvGradWeight", vec![dy2, x.clone()], vec![f32s(&[3, 4, 3, 2])])
        .lms()
        .attrs(asym)
        .tolerance(1e-3)
        .check();
    // SAME pads resolved unevenly (stride 2 over an even input): the padded copy of X the
    // scratch rule plans from the resolved window, both ways round.
    let x8 = rng.floats(&[2, 4, 8, 8], -1.0, 1.0);
    let w3 = rng.floats(&[3, 4, 3, 3], -0.5, 0.5);
    for mode in ["SAME_UPPER", "SAME_LOWER"] {
        Case::new("Conv", vec![x8.clone(), w3.clone()], vec![f32s(&[2, 3, 4, 4])])
            .attrs(vec![string("auto_pad", mode), ints("strides", &[2, 2])])
            .tolerance(1e-3)
            .check();
    }
    // ConvTranspose: grouped, strided, with asymmetric pads and output padding, and bias.
    let wt = rng.floats(&[4, 3, 3, 3], -0.5, 0.5);
    let bt = rng.floats(&[6], -0.5, 0.5);
    let transpose =
        vec![int("group", 2), ints("strides", &[2, 2]), ints("pads", &[1, 0, 0, 1]), ints("output_padding", &[1, 0])];
    Case::new("ConvTranspose", vec![x.clone(), wt.clone(), bt], vec![f32s(&[2, 6, 19, 18])])
        .attrs(transpose)
        .tolerance(1e-3)
        .check();
    // Its gradient's ops (the compiler's ConvTranspose rule): dX = Conv(dY, W) and
    // dW = ConvGradWeight(X, dY), pads: the cropped begin pads, end pads to X's size.
    let adjoint = vec![int("group", 2), ints("strides", &[2, 2]), ints("pads", &[1, 0, 0, 1])];
    let dyt = rng.floats(&[2, 6, 19, 18], -1.0, 1.0);
    Case::new("Conv", vec![dyt.clone(), wt.clone()], vec![f32s(&[2, 4, 9, 9])])
        .attrs(adjoint.clone())
        .tolerance(1e-3)
        .check();
    Case::new("ConvGradWeight", vec![x.clone(), dyt], vec![f32s(&[4, 3, 3, 3])])
        .lms()
        .attrs(adjoint)
        .tolerance(1e-3)
        .check();
    // Symmetric pads: cuDNN writes Y directly, with the same pads.
    let symmetric = vec![ints("strides", &[2, 2]), ints("pads", &[1, 1, 1, 1]), ints("output_padding", &[1, 0])];
    Case::new("ConvTranspose", vec![x.clone(), rng.floats(&[4, 3, 4, 4], -0.5, 0.5)], vec![f32s(&[2, 3, 19, 18])])
        .attrs(symmetric)
        .tolerance(1e-3)
        .check();
    let x1d = rng.floats(&[2, 4, 7], -1.0, 1.0);
    Case::new("ConvTranspose", vec![x1d, rng.floats(&[4, 2, 3], -0.5, 0.5)], vec![f32s(&[2, 2, 9])])
        .tolerance(1e-3)
        .check();
    let x1 = rng.floats(&[2, 3, 10], -1.0, 1.0);
    let w1 = rng.floats(&[5, 3, 3], -0.5, 0.5);
    Case::new("Conv", vec![x1, w1], vec![f32s(&[2, 5, 8])]).tolerance(1e-3).check();
    let pool = vec![ints("kernel_shape", &[3, 3]), ints("strides", &[2, 2]), ints("pads", &[1, 1, 1, 1])];
    Case::new("MaxPool", vec![x.clone()], vec![f32s(&[2, 4, 5, 5])]).attrs(pool.clone()).check();
    Case::new("AveragePool", vec![x.clone()], vec![f32s(&[2, 4, 5, 5])]).attrs(pool.clone()).check();
    let mut with_pad = pool.clone();
    with_pad.push(int("count_include_pad", 1));
    Case::new("AveragePool", vec![x.clone()], vec![f32s(&[2, 4, 5, 5])]).attrs(with_pad.clone()).check();
    let dy = rng.floats(&[2, 4, 5, 5], -1.0, 1.0);
    Case::new("MaxPoolGrad", vec![dy.clone(), x.clone()], vec![f32s(&[2, 4, 9, 9])]).lms().attrs(pool).check();
    Case::new("AveragePoolGrad", vec![dy], vec![f32s(&[2, 4, 9, 9])]).lms().attrs(with_pad).check();
    // Column-major Indices, and NaN never winning a window (as on the CPU).
    let mut values = x.as_f32("x").unwrap().to_vec();
    (values[0], values[10], values[11]) = (f32::NAN, f32::NAN, f32::NEG_INFINITY);
    let nan_x = HostTensor::from_vec(x.shape.clone(), values).unwrap();
    let column_major = vec![ints("kernel_shape", &[2, 2]), ints("strides", &[2, 2]), int("storage_order", 1)];
    Case::new("MaxPool", vec![nan_x], vec![f32s(&[2, 4, 4, 4]), (DType::DtypeI64, vec![2, 4, 4, 4])])
        .attrs(column_major)
        .check();
    Case::new("GlobalAveragePool", vec![x.clone()], vec![f32s(&[2, 4, 1, 1])]).check();
    let lrn = vec![int("size", 3), float("alpha", 1e-2), float("beta", 0.75), float("bias", 2.0)];
    Case::new("LRN", vec![x.clone()], vec![f32s(&[2, 4, 9, 9])]).attrs(lrn.clone()).check();
    let dy = rng.floats(&[2, 4, 9, 9], -1.0, 1.0);
    Case::new("LRNGrad", vec![dy, x.clone()], vec![f32s(&[2, 4, 9, 9])]).lms().attrs(lrn).check();
    Case::new("GlobalMaxPool", vec![x], vec![f32s(&[2, 4, 1, 1])]).check();
    let g = rng.floats(&[2, 4, 1, 1], -1.0, 1.0);
    Case::new("GlobalAveragePoolGrad", vec![g], vec![f32s(&[2, 4, 9, 9])]).lms().check();
}

#[test]
fn normalizations_match_the_cpu() {
    let mut rng = Rng::for_cases(5);
    let x = rng.floats(&[4, 3, 5, 5], -2.0, 2.0);
    let (scale, bias) = (rng.floats(&[3], 0.5, 1.5), rng.floats(&[3], -0.5, 0.5));
    let (mean, var) = (rng.floats(&[3], -0.2, 0.2), rng.floats(&[3], 0.5, 1.5));
    let c = f32s(&[3]);
    // BatchNormTrain: Y, the running mean and variance, the saved mean and inverse std.
    let train_outs = [vec![f32s(&[4, 3, 5, 5])], vec![c.clone(); 4]].concat();
    // The running variance by ONNX's biased and PyTorch's unbiased batch variance.
    for unbiased in [0, 1] {
        Case::new(
            "BatchNormTrain",
            vec![x.clone(), scale.clone(), bias.clone(), mean.clone(), var.clone()],
            train_outs.clone(),
        )
        .lms()
        .attrs(vec![float("epsilon", 1e-5), float("momentum", 0.9), int("unbiased", unbiased)])
        .check();
    }
    Case::new("BatchNormalization", vec![x.clone(), scale.clone(), bias.clone(), mean, var], vec![f32s(&[4, 3, 5, 5])])
        .check();
    let train = Case::new(
        "BatchNormTrain",
        vec![x.clone(), scale.clone(), bias.clone(), rng.floats(&[3], 0.0, 0.1), rng.floats(&[3], 1.0, 1.1)],
        train_outs,
    )
    .lms()
    .run(CpuBackend::new());
    let dy = rng.floats(&[4, 3, 5, 5], -1.0, 1.0);
    Case::new(
        "BatchNormGrad",
        vec![dy, x.clone(), scale.clone(), train[3].clone(), train[4].clone()],
        vec![f32s(&[4, 3, 5, 5]), c.clone(), c.clone()],
    )
    .lms()
    .check();
    Case::new("InstanceNormalization", vec![x.clone(), scale, bias], vec![f32s(&[4, 3, 5, 5])]).check();
    // Its gradient's ops (the compiler's InstanceNormalization rule): each plane normalized
    // (axis 2) with a scale of one [1], and LayerNormGrad there.
    let (one, planes) = (HostTensor::from_vec(vec![1], vec![1.0f32]).unwrap(), f32s(&[4, 3, 1, 1]));
    let normalized = Case::new(
        "LayerNormalization",
        vec![x.clone(), one.clone()],
        vec![f32s(&[4, 3, 5, 5]), planes.clone(), planes],
    )
    .attrs(vec![int("axis", 2)]);
    normalized.check();
    let stats = normalized.run(CpuBackend::new());
    Case::new(
        "LayerNormGrad",
        vec![rng.floats(&[4, 3, 5, 5], -1.0, 1.0), x, one, stats[1].clone(), stats[2].clone()],
        vec![f32s(&[4, 3, 5, 5]), f32s(&[1]), f32s(&[1])],
    )
    .lms()
    .attrs(vec![int("axis", 2)])
    .check();
    let h = rng.floats(&[2, 5, 32], -2.0, 2.0);
    let (gamma, beta) = (rng.floats(&[32], 0.5, 1.5), rng.floats(&[32], -0.5, 0.5));
    let stats = f32s(&[2, 5, 1]);
    Case::new(
        "LayerNormalization",
        vec![h.clone(), gamma.clone(), beta.clone()],
        vec![f32s(&[2, 5, 32]), stats.clone(), stats.clone()],
    )
    .check();
    let ln = Case::new(
        "LayerNormalization",
        vec![h.clone(), gamma.clone(), beta],
        vec![f32s(&[2, 5, 32]), stats.clone(), stats],
    )
    .run(CpuBackend::new());
    let dy = rng.floats(&[2, 5, 32], -1.0, 1.0);
    Case::new(
        "LayerNormGrad",
        vec![dy.clone(), h.clone(), gamma.clone(), ln[1].clone(), ln[2].clone()],
        vec![f32s(&[2, 5, 32]), f32s(&[32]), f32s(&[32])],
    )
    .lms()
    .check();
    // Over the last two axes with Scale and B broadcast from [32] to [5, 32].
    let stats = f32s(&[2, 1, 1]);
    let ln = Case::new(
        "LayerNormalization",
        vec![h.clone(), gamma.clone(), rng.floats(&[32], -0.5, 0.5)],
        vec![f32s(&[2, 5, 32]), stats.clone(), stats.clone()],
    )
    .attrs(vec![int("axis", 1)]);
    ln.check();
    let ln = ln.run(CpuBackend::new());
    Case::new(
        "LayerNormGrad",
        vec![dy, h, gamma, ln[1].clone(), ln[2].clone()],
        vec![f32s(&[2, 5, 32]), f32s(&[32]), f32s(&[32])],
    )
    .lms()
    .attrs(vec![int("axis", 1)])
    .check();
}

/// The compiler's tolerance for a split that reorders sums (`shape::split::SUM_TOLERANCE`):
/// relative to the largest magnitude of the unsplit op's output. The runtime does not
/// depend on the compiler, so it is restated here.
const SPLIT_TOLERANCE: f64 = 1e-6;

/// Tolerance of the batch-norm split ops' f64 rows (counts, means, M2, gradient sums),
/// relative as [`Case::tolerance`]: f64 sums of the same f32 values in another order (the
/// GPU adds warp-strided chunks, the CPU in sequence). Their difference is rounding, about
/// k·2⁻⁵³ times the typical term for k terms: ≈ 3e-13 for the 4551-term sums here (terms
/// of magnitude ≤ 1, or values near 50 whose sum is divided by k). 1e-10 leaves a wide
/// margin and is still far below one f32 rounding (6e-8); a wrong index or argument is
/// off by order 1.
const ROWS_TOLERANCE: f64 = 1e-10;

/// Tolerance of the batch-norm split ops' f32 outputs, given the same inputs on both
/// backends: each computes in f64 and rounds once to f32; fused multiply-adds on the GPU
/// move the f64 value by ≈ 1e-16, so the f32 results differ by at most one unit in the
/// last place (6e-8 relative).
const ONE_ROUNDING: f64 = 1e-6;

/// `x` [N, ...] cut along the batch into parts of `lengths` samples.
fn batch_parts(x: &HostTensor, lengths: &[usize]) -> Vec<HostTensor> {
    let values = x.as_f32("x").unwrap();
    let row = values.len() / x.shape[0];
    let mut start = 0;
    lengths
        .iter()
        .map(|&len| {
            let mut shape = x.shape.clone();
            shape[0] = len;
            let part = HostTensor::from_vec(shape, values[start * row..(start + len) * row].to_vec()).unwrap();
            start += len;
            part
        })
        .collect()
}

/// The six ops of a batch norm split along the batch, each on its own, over parts of X
/// `[N, C, ...]` (several channels, odd planes, a part of 4551 elements per channel that
/// the GPU sums in two chunks, and 2-D X). The rows, merged statistics and sums each op
/// reads are the CPU's, so both backends get the same inputs. Tolerances:
/// [`ROWS_TOLERANCE`] for f64 outputs, [`ONE_ROUNDING`] for f32 outputs.
#[test]
fn batch_norm_split_ops_match_the_cpu() {
    let mut rng = Rng::for_cases(9);
    let cases: [(&[usize], &[usize]); 3] =
        [(&[7, 5, 5, 3], &[3, 2, 2]), (&[7, 4, 37, 41], &[3, 2, 2]), (&[9, 6], &[4, 3, 2])];
    for (shape, lengths) in cases {
        let c = shape[1];
        // Values around 50: a mean far from zero, where M2 must not cancel.
        let x = rng.floats(shape, 49.0, 51.0);
        let dy = rng.floats(shape, -1.0, 1.0);
        let (scale, bias) = (rng.floats(&[c], 0.5, 1.5), rng.floats(&[c], -0.5, 0.5));
        let (running_mean, running_var) = (rng.floats(&[c], -0.2, 0.2), rng.floats(&[c], 0.5, 1.5));
        let (xs, dys) = (batch_parts(&x, lengths), batch_parts(&dy, lengths));
        let rows = |k: usize| (DType::DtypeF64, vec![k, c]);
        let case = |op, inputs, outputs| {
            Case::new(op, inputs, outputs).lms().tolerance(ONE_ROUNDING).f64_tolerance(ROWS_TOLERANCE)
        };
        let stats: Vec<HostTensor> = xs
            .iter()
            .map(|part| case("BatchNormStatistics", vec![part.clone()], vec![rows(3)]).check().remove(0))
            .collect();
        let merge = |unbiased| {
            case(
                "BatchNormMerge",
                [vec![running_mean.clone(), running_var.clone()], stats.clone()].concat(),
                [vec![f32s(&[c]); 4], vec![rows(2)]].concat(),
            )
            .attrs(vec![float("epsilon", 1e-3), float("momentum", 0.8), int("unbiased", unbiased)])
            .check()
        };
        let unbiased = merge(1);
        let merged = merge(0);
        assert_ne!(unbiased[1], merged[1], "the unbiased running variance is another");
        let (saved_mean, saved_invstd, batch) = (&merged[2], &merged[3], &merged[4]);
        for part in &xs {
            let inputs = vec![part.clone(), scale.clone(), bias.clone(), batch.clone()];
            case("BatchNormApply", inputs, vec![f32s(&part.shape)]).check();
        }
        let sums: Vec<HostTensor> = xs
            .iter()
            .zip(&dys)
            .map(|(x, dy)| {
                let inputs = vec![dy.clone(), x.clone(), saved_mean.clone(), saved_invstd.clone()];
                case("BatchNormGradSums", inputs, vec![rows(3)]).check().remove(0)
            })
            .collect();
        let total = case("BatchNormGradMerge", sums, vec![f32s(&[c]), f32s(&[c]), rows(3)]).check().remove(2);
        for (x, dy) in xs.iter().zip(&dys) {
            let inputs =
                vec![dy.clone(), x.clone(), scale.clone(), saved_mean.clone(), saved_invstd.clone(), total.clone()];
            case("BatchNormGradData", inputs, vec![f32s(&x.shape)]).check();
        }
    }
}

/// Adds a node of `lms` op `op` reading `inputs`; returns its output tensors.
fn lms_node(
    b: &mut Builder,
    op: &str,
    inputs: &[u32],
    outputs: &[(&str, DType, &[u64])],
    attributes: Vec<Attribute>,
) -> Vec<u32> {
    let ins: Vec<Option<u32>> = inputs.iter().copied().map(Some).collect();
    let (node, outs) = b.node(op, op, &ins, outputs, attributes);
    b.graph.nodes[node as usize].domain = "lms".into();
    outs
}

/// One graph: BatchNormTrain on the whole X `[8, 6, 7, 5]`, and the same batch norm split
/// in 3 parts (SplitPart, BatchNormStatistics per part, BatchNormMerge, BatchNormApply per
/// part, Concat), its f64 rows kept on the device. Outputs: the train op's five, then the
/// split's Y and the merge's running and saved statistics.
fn batch_norm_split_against_train(shape: &[usize], parts: usize) -> Program {
    let mut b = Builder::new("batch_norm_split");
    let dims: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
    let (n, c) = (dims[0], [dims[1]]);
    let f32 = DType::DtypeF32;
    let x = b.input("x", f32, &dims, vec![]);
    let params: Vec<u32> =
        ["scale", "bias", "running_mean", "running_var"].iter().map(|name| b.input(name, f32, &c, vec![])).collect();
    let attrs = vec![float("epsilon", 1e-3), float("momentum", 0.8)];
    let stat = ("stat", f32, &c[..]);
    let whole = lms_node(
        &mut b,
        "BatchNormTrain",
        &[x, params[0], params[1], params[2], params[3]],
        &[("y", f32, &dims), stat, stat, stat, stat],
        attrs.clone(),
    );
    let part_dims: Vec<Vec<u64>> = (0..parts as u64)
        .map(|i| [vec![n / parts as u64 + u64::from(i < n % parts as u64)], dims[1..].to_vec()].concat())
        .collect();
    let xs: Vec<u32> = part_dims
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let attrs = vec![int("axis", 0), int("index", i as i64), int("parts", parts as i64)];
            lms_node(&mut b, "SplitPart", &[x], &[("x_part", f32, d)], attrs)[0]
        })
        .collect();
    let rows = |k: u64| [k, c[0]];
    let (three, two) = (rows(3), rows(2));
    let mut merge_inputs = vec![params[2], params[3]];
    for &part in &xs {
        merge_inputs
            .push(lms_node(&mut b, "BatchNormStatistics", &[part], &[("rows", DType::DtypeF64, &three)], vec![])[0]);
    }
    let merged = lms_node(
        &mut b,
        "BatchNormMerge",
        &merge_inputs,
        &[stat, stat, stat, stat, ("batch", DType::DtypeF64, &two)],
        attrs,
    );
    let ys: Vec<Option<u32>> = xs
        .iter()
        .zip(&part_dims)
        .map(|(&part, d)| {
            let inputs = [part, params[0], params[1], merged[4]];
            Some(lms_node(&mut b, "BatchNormApply", &inputs, &[("y_part", f32, d)], vec![])[0])
        })
        .collect();
    let (_, y) = b.node("Concat", "Concat", &ys, &[("y_split", f32, &dims)], vec![int("axis", 0)]);
    b.graph.outputs.extend(whole.iter().chain(&y).chain(&merged[..4]));
    Program::new(b.graph, "batch_norm_split.lms").unwrap()
}

/// BatchNormStatistics → BatchNormMerge → BatchNormApply over 3 parts equal BatchNormTrain
/// on the whole batch on the same backend (the GPU, and the CPU, which also checks the
/// case): Y and the running and saved statistics within [`SPLIT_TOLERANCE`] of the
/// largest magnitude of each of the train op's outputs.
#[test]
fn batch_norm_statistics_merge_and_apply_equal_batch_norm_train_within_the_split_tolerance() {
    let mut rng = Rng::for_cases(10);
    let shape = [8usize, 6, 7, 5];
    let c = shape[1];
    let values = BTreeMap::from([
        ("x".to_string(), rng.floats(&shape, 49.0, 51.0)),
        ("scale".to_string(), rng.floats(&[c], 0.5, 1.5)),
        ("bias".to_string(), rng.floats(&[c], -0.5, 0.5)),
        ("running_mean".to_string(), rng.floats(&[c], -0.2, 0.2)),
        ("running_var".to_string(), rng.floats(&[c], 0.5, 1.5)),
    ]);
    let compare = |backend: &str, outputs: Vec<HostTensor>| {
        assert_eq!(outputs.len(), 10, "{backend}");
        let (whole, split) = outputs.split_at(5);
        for (k, (w, s)) in whole.iter().zip(split).enumerate() {
            assert_eq!(w.shape, s.shape, "{backend} output {k}");
            let (w, s) = (w.as_f32("whole").unwrap(), s.as_f32("split").unwrap());
            let largest = w.iter().fold(f64::MIN_POSITIVE, |m, v| m.max(f64::from(v.abs())));
            for (j, (a, b)) in w.iter().zip(s).enumerate() {
                let err = f64::from((a - b).abs()) / largest;
                assert!(err <= SPLIT_TOLERANCE, "{backend} output {k}[{j}]: whole {a}, split {b} (relative {err:e})");
            }
        }
    };
    compare("cpu", run_program(batch_norm_split_against_train(&shape, 3), CpuBackend::new(), &values));
    if gpu_quietly() {
        compare("gpu", run_program(batch_norm_split_against_train(&shape, 3), gpu(), &values));
    }
}

#[test]
fn reductions_softmax_and_losses_match_the_cpu() {
    let mut rng = Rng::for_cases(6);
    let x = rng.floats(&[3, 4, 5], -2.0, 2.0);
    for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin"] {
        Case::new(op, vec![x.clone()], vec![f32s(&[3, 1, 5])]).attrs(vec![ints("axes", &[1])]).opset(11).check();
        Case::new(op, vec![x.clone()], vec![f32s(&[4])])
            .attrs(vec![ints("axes", &[0, 2]), int("keepdims", 0)])
            .opset(11)
            .check();
    }
    let big = rng.floats(&[3, 200_000], -1.0, 1.0);
    Case::new("ReduceSum", vec![big], vec![f32s(&[3, 1])])
        .attrs(vec![ints("axes", &[1])])
        .opset(11)
        .tolerance(1e-3)
        .check();
    Case::new("SumTo", vec![x.clone()], vec![f32s(&[4, 1])]).lms().check();
    let dy = rng.floats(&[3, 1, 5], -1.0, 1.0);
    Case::new("ReduceGrad", vec![dy], vec![f32s(&[3, 4, 5])])
        .lms()
        .attrs(vec![ints("axes", &[1]), int("keepdims", 1), int("mean", 1)])
        .check();
    for (op, grad) in [("Softmax", "SoftmaxGrad"), ("LogSoftmax", "LogSoftmaxGrad")] {
        Case::new(op, vec![x.clone()], vec![f32s(&[3, 4, 5])]).attrs(vec![int("axis", 1)]).check();
        Case::new(op, vec![x.clone()], vec![f32s(&[3, 4, 5])]).attrs(vec![int("axis", 1)]).opset(11).check();
        let y = Case::new(op, vec![x.clone()], vec![f32s(&[3, 4, 5])]).run(CpuBackend::new());
        let dy = rng.floats(&[3, 4, 5], -1.0, 1.0);
        Case::new(grad, vec![dy, y[0].clone()], vec![f32s(&[3, 4, 5])]).lms().check();
    }
    let logits = rng.floats(&[2, 7, 11], -3.0, 3.0);
    let labels = rng.indices(&[2, 7], 11);
    Case::new("SoftmaxCrossEntropy", vec![logits.clone(), labels.clone()], vec![f32s(&[])]).lms().check();
    Case::new("SoftmaxCrossEntropyGrad", vec![logits.clone(), labels.clone()], vec![f32s(&[2, 7, 11])]).lms().check();
    // A part of a batch split divides by the whole batch's positions.
    for (op, out) in [("SoftmaxCrossEntropy", f32s(&[])), ("SoftmaxCrossEntropyGrad", f32s(&[2, 7, 11]))] {
        Case::new(op, vec![logits.clone(), labels.clone()], vec![out]).lms().attrs(vec![int("positions", 42)]).check();
    }
    let target = rng.floats(&[2, 7, 11], -3.0, 3.0);
    Case::new("MeanSquaredError", vec![logits.clone(), target.clone()], vec![f32s(&[])]).lms().check();
    Case::new("MeanSquaredErrorGrad", vec![logits, target], vec![f32s(&[2, 7, 11])]).lms().check();
}

#[test]
fn data_movement_matches_the_cpu_exactly() {
    let mut rng = Rng::for_cases(7);
    let x = rng.floats(&[2, 3, 4], -1.0, 1.0);
    Case::new("Transpose", vec![x.clone()], vec![f32s(&[4, 2, 3])]).attrs(vec![ints("perm", &[2, 0, 1])]).check();
    for (upper, k) in [(1, 0), (1, 2), (0, -1), (0, 5)] {
        let k = HostTensor::from_vec(vec![], vec![k as i64]).unwrap();
        Case::new("Trilu", vec![x.clone(), k], vec![f32s(&[2, 3, 4])]).attrs(vec![int("upper", upper)]).check();
    }
    Case::new("Trilu", vec![x.clone()], vec![f32s(&[2, 3, 4])]).check();
    Case::new("Concat", vec![x.clone(), x.clone()], vec![f32s(&[2, 6, 4])]).attrs(vec![int("axis", 1)]).check();
    Case::new("Split", vec![x.clone()], vec![f32s(&[2, 3, 1]), f32s(&[2, 3, 3])])
        .attrs(vec![ints("split", &[1, 3]), int("axis", -1)])
        .opset(11)
        .check();
    Case::new("ConcatGrad", vec![x.clone()], vec![f32s(&[2, 1, 4]), f32s(&[2, 2, 4])])
        .lms()
        .attrs(vec![int("axis", 1)])
        .check();
    for (index, shape) in [(0, [2, 3, 2]), (1, [2, 3, 1]), (2, [2, 3, 1])] {
        Case::new("SplitPart", vec![x.clone()], vec![f32s(&shape)])
            .lms()
            .attrs(vec![int("axis", -1), int("index", index), int("parts", 3)])
            .check();
    }
    Case::new("SplitWindow", vec![x.clone()], vec![f32s(&[2, 3, 3])])
        .lms()
        .attrs(vec![int("axis", 2), int("begin", 1), int("end", 4)])
        .check();
    let (top, bottom) = (rng.floats(&[2, 3, 3], -1.0, 1.0), rng.floats(&[2, 3, 2], -1.0, 1.0));
    Case::new("OverlapAdd", vec![top, bottom], vec![f32s(&[2, 3, 5])])
        .lms()
        .attrs(vec![int("axis", -1), ints("begins", &[0, 2])])
        .check();
    let slice = vec![ints("starts", &[1, 0]), ints("ends", &[-1, 3]), ints("axes", &[2, 1])];
    Case::new("Slice", vec![x.clone()], vec![f32s(&[2, 3, 2])]).attrs(slice).opset(9).check();
    let starts = HostTensor::from_vec(vec![2], vec![3i64, 1]).unwrap();
    let ends = HostTensor::from_vec(vec![2], vec![0i64, 3]).unwrap();
    let axes = HostTensor::from_vec(vec![2], vec![2i64, 1]).unwrap();
    let steps = HostTensor::from_vec(vec![2], vec![-2i64, 1]).unwrap();
    Case::new("Slice", vec![x.clone(), starts, ends, axes, steps], vec![f32s(&[2, 2, 2])]).check();
    let dy = rng.floats(&[2, 2, 2], -1.0, 1.0);
    Case::new("SliceGrad", vec![dy], vec![f32s(&[2, 3, 4])])
        .lms()
        .attrs(vec![ints("starts", &[3, 1]), ints("ends", &[0, 3]), ints("axes", &[2, 1]), ints("steps", &[-2, 1])])
        .check();
    let shape = HostTensor::from_vec(vec![4], vec![3i64, 2, 1, 4]).unwrap();
    Case::new("Expand", vec![x.clone(), shape], vec![f32s(&[3, 2, 3, 4])]).check();
    let repeats = HostTensor::from_vec(vec![3], vec![2i64, 1, 3]).unwrap();
    Case::new("Tile", vec![x.clone(), repeats], vec![f32s(&[4, 3, 12])]).check();
    let pads = HostTensor::from_vec(vec![6], vec![0i64, 1, 2, 0, 2, 1]).unwrap();
    for mode in ["constant", "reflect", "edge", "wrap"] {
        Case::new("Pad", vec![x.clone(), pads.clone()], vec![f32s(&[2, 6, 7])])
            .attrs(vec![string("mode", mode)])
            .check();
    }
    let table = rng.floats(&[10, 6], -1.0, 1.0);
    let idx = HostTensor::from_vec(vec![2, 4], vec![3i64, -1, 3, 0, 9, 3, 2, 3]).unwrap();
    Case::new("Gather", vec![table, idx.clone()], vec![f32s(&[2, 4, 6])]).check();
    let dy = rng.floats(&[2, 4, 6], -1.0, 1.0);
    Case::new("GatherGrad", vec![dy, idx], vec![f32s(&[10, 6])]).lms().tolerance(0.0).check();
    let big_idx = rng.indices(&[64, 33], 50);
    let dy = rng.floats(&[64, 33, 8], -1.0, 1.0);
    Case::new("GatherGrad", vec![dy, big_idx], vec![f32s(&[50, 8])]).lms().tolerance(0.0).check();
    // GatherElements along axis 1 with indices shorter than data on axis 2, repeats and negatives.
    let data = rng.floats(&[3, 5, 4], -1.0, 1.0);
    let idx = rng.indices(&[3, 7, 2], 5);
    let idx = HostTensor::from_vec(
        vec![3, 7, 2],
        idx.as_i64("idx").unwrap().iter().enumerate().map(|(i, &j)| if i % 3 == 0 { j - 5 } else { j }).collect(),
    )
    .unwrap();
    Case::new("GatherElements", vec![data, idx.clone()], vec![f32s(&[3, 7, 2])]).attrs(vec![int("axis", 1)]).check();
    let dy = rng.floats(&[3, 7, 2], -1.0, 1.0);
    Case::new("GatherElementsGrad", vec![dy, to_i32(&idx)], vec![f32s(&[3, 5, 4])])
        .lms()
        .attrs(vec![int("axis", -2)])
        .tolerance(0.0)
        .check();
    Case::new("Reshape", vec![x.clone(), HostTensor::from_vec(vec![2], vec![6i64, 4]).unwrap()], vec![f32s(&[6, 4])])
        .check();
}

/// The kernels of each element size the runtime's dtypes have (1 byte: bool, u8, i8;
/// 4: f32, i32; 8: f64, i64) on data movement, Where, fills and compares, exactly.
#[test]
fn one_four_and_eight_byte_elements_move_fill_and_compare_like_the_cpu() {
    let mut rng = Rng::for_cases(12);
    let mut pair = |dtype: DType| {
        let mut one = || -> HostTensor {
            let v: Vec<f64> = (0..24).map(|_| rng.next() * 4.0 - 2.0).collect();
            match dtype {
                DType::DtypeBool => HostTensor::from_vec(vec![2, 3, 4], v.iter().map(|&x| x > 0.0).collect()),
                DType::DtypeI64 => HostTensor::from_vec(vec![2, 3, 4], v.iter().map(|&x| (x * 1e12) as i64).collect()),
                _ => HostTensor::from_vec(vec![2, 3, 4], v),
            }
            .unwrap()
        };
        (one(), one())
    };
    let tensors = [pair(DType::DtypeBool), pair(DType::DtypeI64), pair(DType::DtypeF64)];
    let condition = tensors[0].1.clone();
    let pads = HostTensor::from_vec(vec![6], vec![0i64, 1, 2, 0, 2, 1]).unwrap();
    let idx = HostTensor::from_vec(vec![2, 2], vec![1i64, -1, 0, 1]).unwrap();
    for (x, other) in tensors {
        let dtype = x.dtype();
        Case::new("Transpose", vec![x.clone()], vec![(dtype, vec![4, 2, 3])])
            .attrs(vec![ints("perm", &[2, 0, 1])])
            .check();
        Case::new("Pad", vec![x.clone(), pads.clone()], vec![(dtype, vec![2, 6, 7])])
            .attrs(vec![string("mode", "edge")])
            .check();
        Case::new("Gather", vec![x.clone(), idx.clone()], vec![(dtype, vec![2, 2, 3, 4])]).check();
        let elements = HostTensor::from_vec(vec![1, 3, 2], vec![1i64, 0, -1, 1, 0, 0]).unwrap();
        Case::new("GatherElements", vec![x.clone(), elements], vec![(dtype, vec![1, 3, 2])]).check();
        Case::new("Trilu", vec![x.clone()], vec![(dtype, vec![2, 3, 4])]).attrs(vec![int("upper", 0)]).check();
        Case::new("Where", vec![condition.clone(), x, other], vec![(dtype, vec![2, 3, 4])]).check();
    }
    let shape = HostTensor::from_vec(vec![2], vec![3i64, 5]).unwrap();
    let values = [
        (DType::DtypeBool, vec![1u8]),
        (DType::DtypeF32, 2.5f32.to_le_bytes().to_vec()),
        (DType::DtypeI64, (-7i64).to_le_bytes().to_vec()),
    ];
    for (dtype, data) in values {
        let value = Value::Tensor(TensorValue { dtype: dtype as i32, shape: vec![1], data });
        Case::new("ConstantOfShape", vec![shape.clone()], vec![(dtype, vec![3, 5])])
            .attrs(vec![Attribute { name: "value".into(), value: Some(value) }])
            .opset(9)
            .check();
    }
    let mut rng = Rng(13);
    let (a, b) = (to_i32(&rng.indices(&[2, 3, 4], 3)), to_i32(&rng.indices(&[3, 1], 3)));
    for op in ["Equal", "Less"] {
        Case::new(op, vec![a.clone(), b.clone()], vec![(DType::DtypeBool, vec![2, 3, 4])]).check();
    }
    let bytes =
        |v: &[i64]| HostTensor::from_vec(vec![v.len()], v.iter().map(|&x| x as u8).collect::<Vec<u8>>()).unwrap();
    Case::new("Equal", vec![bytes(&[0, 1, 2, 255, 7]), bytes(&[0, 2, 2, 255, 8])], vec![(DType::DtypeBool, vec![5])])
        .check();
}

/// Views (Identity, Flatten, Squeeze, Unsqueeze, ReshapeTo), And and Or, Zeros and Dropout
/// at inference (its mask a fill of ones), exactly.
#[test]
fn views_logic_zeros_and_inference_dropout_match_the_cpu() {
    let mut rng = Rng::for_cases(14);
    let x = rng.floats(&[2, 1, 3, 4], -1.0, 1.0);
    Case::new("Identity", vec![x.clone()], vec![f32s(&[2, 1, 3, 4])]).check();
    Case::new("Flatten", vec![x.clone()], vec![f32s(&[2, 12])]).attrs(vec![int("axis", 1)]).check();
    Case::new("Squeeze", vec![x.clone()], vec![f32s(&[2, 3, 4])]).attrs(vec![ints("axes", &[1])]).opset(11).check();
    Case::new("Unsqueeze", vec![x.clone()], vec![f32s(&[2, 1, 3, 1, 4])])
        .attrs(vec![ints("axes", &[3])])
        .opset(11)
        .check();
    Case::new("ReshapeTo", vec![x.clone()], vec![f32s(&[6, 4])]).lms().check();
    Case::new("Zeros", vec![], vec![f32s(&[3, 5])]).lms().check();
    Case::new("Dropout", vec![x.clone()], vec![f32s(&[2, 1, 3, 4]), (DType::DtypeBool, vec![2, 1, 3, 4])])
        .opset(13)
        .check();
    let bools = |rng: &mut Rng| {
        let v: Vec<bool> = (0..24).map(|_| rng.next() < 0.5).collect();
        HostTensor::from_vec(vec![2, 3, 4], v).unwrap()
    };
    let (a, b) = (bools(&mut rng), bools(&mut rng));
    for op in ["And", "Or"] {
        Case::new(op, vec![a.clone(), b.clone()], vec![(DType::DtypeBool, vec![2, 3, 4])]).check();
    }
}

/// An i64 tensor's values as i32.
fn to_i32(t: &HostTensor) -> HostTensor {
    let v: Vec<i32> = t.view::<i64>("t").unwrap().iter().map(|&x| x as i32).collect();
    HostTensor::from_vec(t.shape.clone(), v).unwrap()
}

#[test]
fn dropout_and_optimizers_match_the_cpu() {
    let mut rng = Rng::for_cases(8);
    let x = rng.floats(&[5, 37], -1.0, 1.0);
    let outs = vec![f32s(&[5, 37]), (DType::DtypeBool, vec![5, 37])];
    // The masks are the CPU backend's bit for bit (same ChaCha8 stream).
    Case::new("DropoutTrain", vec![x.clone()], outs)
        .lms()
        .attrs(vec![float("ratio", 0.3), int("seed", 11)])
        .tolerance(0.0)
        .check();
    let mask = Case::new("DropoutTrain", vec![x.clone()], vec![f32s(&[5, 37]), (DType::DtypeBool, vec![5, 37])])
        .lms()
        .attrs(vec![float("ratio", 0.3)])
        .run(CpuBackend::new());
    Case::new("DropoutGrad", vec![x.clone(), mask[1].clone()], vec![f32s(&[5, 37])])
        .lms()
        .attrs(vec![float("ratio", 0.3)])
        .check();
    let (w, g, v, m) =
        (x.clone(), rng.floats(&[5, 37], -1.0, 1.0), rng.floats(&[5, 37], -1.0, 1.0), rng.floats(&[5, 37], -1.0, 1.0));
    let shape = f32s(&[5, 37]);
    Case::new("SgdUpdate", vec![w.clone(), g.clone()], vec![shape.clone()]).lms().attrs(vec![float("lr", 0.1)]).check();
    Case::new("MomentumUpdate", vec![w.clone(), v.clone(), g.clone()], vec![shape.clone(), shape.clone()])
        .lms()
        .attrs(vec![float("lr", 0.1), float("momentum", 0.9)])
        .check();
    let vv = rng.floats(&[5, 37], 0.0, 1.0);
    let t = HostTensor::scalar(3.0f32);
    Case::new("AdamStep", vec![t.clone()], vec![f32s(&[])]).lms().check();
    Case::new("AdamUpdate", vec![w, m, vv, g, t], vec![shape.clone(), shape.clone(), shape])
        .lms()
        .attrs(vec![float("lr", 0.01)])
        .check();
}

/// Losses and final weights of `steps` steps of a training graph whose arena may take
/// `device_memory` bytes beside the backend's fixed reserve.
fn train<B: Backend>(b: &Builder, backend: B, steps: usize, device_memory: u64) -> (Vec<f32>, Vec<HostTensor>) {
    let program = Program::new(b.graph.clone(), "train.lms").unwrap();
    let device_memory = device_memory + backend.fixed_device_bytes();
    let options = RunOptions { device_memory, host_memory: 1 << 30, seed: 9 };
    let mut session = Session::new(program, backend, options).unwrap_or_else(|e| panic!("{e}"));
    let losses =
        (0..steps).map(|_| session.step().unwrap_or_else(|e| panic!("{e}")).loss.unwrap_or(f32::NAN)).collect();
    let vars = session.variables().unwrap().into_iter().map(|(_, t)| t).collect();
    (losses, vars)
}

#[test]
fn a_training_graph_with_swaps_trains_like_the_cpu_and_bit_for_bit_like_without_swaps() {
    let (cpu_losses, cpu_vars) = train(&training_graph(false), CpuBackend::new(), 4, 1 << 20);
    if !gpu_present() {
        return;
    }
    let (plain_losses, plain_vars) = train(&training_graph(false), gpu(), 4, 1 << 20);
    let (swap_losses, swap_vars) = train(&training_graph(true), gpu(), 4, 1 << 20);
    for (c, g) in cpu_losses.iter().zip(&plain_losses) {
        assert!((c - g).abs() <= 1e-4 * (1.0 + c.abs()), "loss cpu {c}, gpu {g}");
    }
    for (c, g) in cpu_vars.iter().zip(&plain_vars) {
        for (a, b) in c.as_f32("c").unwrap().iter().zip(g.as_f32("g").unwrap()) {
            assert!((a - b).abs() <= 1e-4 * (1.0 + a.abs()), "weight cpu {a}, gpu {b}");
        }
    }
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&plain_losses), bits(&swap_losses), "swaps changed the losses on the GPU");
    assert_eq!(plain_vars, swap_vars, "swaps changed the weights on the GPU");
    // The same run twice gives the same bits: the backend is deterministic.
    let (again, _) = train(&training_graph(true), gpu(), 4, 1 << 20);
    assert_eq!(bits(&again), bits(&swap_losses));
}

#[test]
fn over_budget_fails_at_the_op_and_the_arena_reports_its_state() {
    if !gpu_present() {
        return;
    }
    let program = Program::new(training_graph(false).graph, "train.lms").unwrap();
    let backend = gpu();
    let options = RunOptions { device_memory: 200 + backend.fixed_device_bytes(), host_memory: 1 << 20, seed: 1 };
    let err = Session::new(program, backend, options).and_then(|mut s| s.step().map(|_| ())).unwrap_err();
    assert!(err.to_string().starts_with("out of device memory"), "{err}");
    let backend = gpu();
    let stats = backend.arena_stats();
    assert!(stats.capacity >= 1 << 30 && stats.fragmentation() == 0.0, "{stats}");
    println!("{}: {stats}", backend.device_name());
}

/// Where C++ leaves the result undefined, the kernels give the CPU's: a float cast to an
/// integer saturates (2^63 and above to i64's maximum, NaN to 0), an integer minimum
/// divided by -1 wraps, and a division by zero or a label outside the classes is the
/// CPU's error (a flag the kernel sets, read back after the op).
#[test]
fn casts_integer_division_and_bad_labels_are_defined_like_the_cpu() {
    let mut rng = Rng::for_cases(9);
    let extremes = vec![
        1e19f32,
        -1e19,
        9.223_372e18,
        -9.223_372e18,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        2_147_483_648.0,
        -2_147_483_904.0,
        300.0,
        -300.0,
        127.9,
        -128.9,
        255.5,
        -0.5,
        3.7,
    ];
    let x = HostTensor::from_vec(vec![16], extremes).unwrap();
    for to in [DType::DtypeI64, DType::DtypeI32, DType::DtypeI8, DType::DtypeU8, DType::DtypeBool] {
        Case::new("Cast", vec![x.clone()], vec![(to, vec![16])]).attrs(vec![int("to", to as i64)]).check();
    }
    let a = HostTensor::from_vec(vec![5], vec![i64::MIN, 7, -7, i64::MIN, 5]).unwrap();
    let b = HostTensor::from_vec(vec![5], vec![-1i64, 2, 2, 1, -1]).unwrap();
    let out = Case::new("Div", vec![a, b], vec![(DType::DtypeI64, vec![5])]).check();
    assert_eq!(out[0].view::<i64>("y").unwrap(), [i64::MIN, 3, -3, i64::MIN, -5]);
    let a = HostTensor::from_vec(vec![3], vec![i32::MIN, 9, i32::MAX]).unwrap();
    let b = HostTensor::from_vec(vec![3], vec![-1i32, -2, -1]).unwrap();
    Case::new("Div", vec![a.clone(), b], vec![(DType::DtypeI32, vec![3])]).check();
    let zero = HostTensor::from_vec(vec![3], vec![1i32, 0, 1]).unwrap();
    Case::new("Div", vec![a, zero], vec![(DType::DtypeI32, vec![3])]).check_error("integer division by zero");
    let logits = rng.floats(&[2, 3, 11], -3.0, 3.0);
    for bad in [11, -1] {
        let labels = HostTensor::from_vec(vec![2, 3], vec![0i64, 10, 4, bad, 2, bad]).unwrap();
        let message = format!("label {bad} at position 3 is outside [0, 11)");
        for (op, out) in [("SoftmaxCrossEntropy", f32s(&[])), ("SoftmaxCrossEntropyGrad", f32s(&[2, 3, 11]))] {
            Case::new(op, vec![logits.clone(), labels.clone()], vec![out]).lms().check_error(&message);
        }
    }
}

/// The CPU backend's ops whose CUDA implementation computes its values on the host (by
/// the CPU backend's kernel) and uploads them: shapes, sizes, constants and ranges, small
/// index-like tensors a kernel would only copy.
const HOST_RUN: [&str; 4] = ["Constant", "Range", "Shape", "Size"];

/// The kernels and ops that this file's other tests run on the emulated device: they run
/// again in a child process with `LMS_CUDA_EMULATOR=1`, which writes each kernel's launch
/// count at exit (`LMS_CUDA_EMULATOR_LAUNCHES`) and each program's ops as it runs
/// ([`OPS_RUN_VAR`]). Prints the coverage per kernel source, and fails unless every kernel is
/// launched but the 2-byte variants (no dtype of the runtime has 2-byte elements), and
/// unless every op of the CPU backend runs there or is listed in [`HOST_RUN`], so that
/// neither a kernel nor an op can silently stop being tested.
#[test]
fn the_other_tests_run_every_kernel_and_op_of_the_cpu_backend_on_the_emulated_device() {
    const KERNELS: usize = 90;
    if std::env::var(REQUIRE_GPU_VAR).is_ok_and(|v| v == "1") {
        println!("skipped: kernel coverage is counted on the emulated device, and this run asks for a GPU");
        return;
    }
    let dir = std::env::temp_dir().join(format!("lms-cuda-coverage-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let counts = dir.join("launches.txt");
    let ops_run = dir.join("ops.txt");
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["--skip", "the_other_tests_run_every_kernel", "--test-threads", "2"])
        .env(loader::EMULATOR_VAR, "1")
        .env("LMS_CUDA_EMULATOR_LAUNCHES", &counts)
        .env(OPS_RUN_VAR, &ops_run)
        .env_remove(REQUIRE_GPU_VAR)
        .output()
        .unwrap();
    assert!(out.status.success(), "the tests failed on the emulated device:\n{}", String::from_utf8_lossy(&out.stdout));
    let text = std::fs::read_to_string(&counts).unwrap();
    let ran = std::fs::read_to_string(&ops_run).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    // Per source: (kernels, kernels launched).
    let mut per_source: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    let mut missed = Vec::new();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [source, name, launches] = fields[..] else { panic!("bad launch count line: {line}") };
        let launched = launches.parse::<u64>().unwrap() > 0;
        let entry = per_source.entry(source).or_default();
        entry.0 += 1;
        entry.1 += launched as usize;
        if !launched {
            missed.push(format!("{source}:{name}"));
        }
    }
    let total: usize = per_source.values().map(|c| c.0).sum();
    let launched: usize = per_source.values().map(|c| c.1).sum();
    for (source, (kernels, hit)) in &per_source {
        println!("{source}: {hit} of {kernels} kernels launched");
    }
    println!("{launched} of {total} kernels launched; not launched: {}", missed.join(", "));
    assert_eq!(total, KERNELS, "the emulated device holds {total} kernels");
    let unreachable: Vec<&String> = missed.iter().filter(|k| !k.ends_with("_2")).collect();
    assert!(unreachable.is_empty(), "kernels not launched: {unreachable:?}");
    assert!(launched * 10 >= total * 9, "only {launched} of {total} kernels launched");
    let ran: std::collections::BTreeSet<&str> = ran.lines().collect();
    let cpu = lms_runtime::cpu::kernels::supported_ops().into_iter().map(|op| format!("onnx {op}"));
    let lms = lms_runtime::cpu::kernels::supported_lms_ops().into_iter().map(|op| format!("lms {op}"));
    let all: Vec<String> = cpu.chain(lms).collect();
    let not_run: Vec<&String> = all.iter().filter(|op| !ran.contains(op.as_str())).collect();
    println!(
        "{} of {} ops of the CPU backend run on the emulated device; host-run: {HOST_RUN:?}",
        all.len() - not_run.len(),
        all.len()
    );
    let unlisted: Vec<&&String> =
        not_run.iter().filter(|op| !HOST_RUN.iter().any(|h| op.as_str() == format!("onnx {h}"))).collect();
    assert!(
        unlisted.is_empty(),
        "ops of the CPU backend neither run on the emulated device nor host-run: {unlisted:?}"
    );
}
