//! Kernels on tensors of more than 2^31 elements on the GPU, against the CPU backend: the
//! index arithmetic past `i32` (elementwise with and without broadcast, a transpose, a
//! reduction, softmax, a gather of the last rows and a concatenation).
//!
//! Each case holds about 17 GB on the device and 35 GB on the host, so the test runs only
//! on a GPU (48 GiB of device memory asked) and skips elsewhere, the emulated device included
//! (whose kernels run on this machine's CPU); with `LMS_REQUIRE_GPU=1` a skip is a failure.
//! Tolerance as in `cuda.rs`: |gpu − cpu| ≤ 1e-4·(1 + |cpu|); moved values must be equal.

mod common;

use common::{int, Builder};
use lms_proto::lms::attribute::Value;
use lms_proto::lms::{Attribute, DType, Ints};
use lms_runtime::backend::cuda::{gpu_test_gate, loader, REQUIRE_GPU_VAR};
use lms_runtime::{Backend, CpuBackend, CudaBackend, HostTensor, Program, RunOptions, Session};
use std::collections::BTreeMap;

/// The device memory the cases need (the largest holds two 8.6 GB tensors and its scratch).
const DEVICE_BYTES: u64 = 48 << 30;

/// Rows of 1024 columns past 2^31 elements: 2^21 + 3 rows.
const ROWS: usize = (1 << 21) + 3;
const COLS: usize = 1024;

/// Whether a GPU (not the emulated device) runs the cases; says why not, and fails instead
/// of skipping under `LMS_REQUIRE_GPU=1`. A GPU without [`DEVICE_BYTES`] free fails the
/// cases (the H100 and H200 the project runs on have 80 GB and more).
fn large_gpu() -> bool {
    let require = std::env::var(REQUIRE_GPU_VAR).is_ok_and(|v| v == "1");
    let skip = |why: &str| {
        assert!(!require, "tensors over 2^31 elements: {REQUIRE_GPU_VAR}=1 but {why}");
        println!("skipped tensors over 2^31 elements: {why}");
        false
    };
    if !require && loader::emulate_where_no_driver() {
        return skip("no GPU (the emulated device runs kernels on this machine's CPU, too slowly for 8 GB tensors)");
    }
    match gpu_test_gate("tensors over 2^31 elements") {
        Err(why) => panic!("{why}"),
        Ok(false) => false,
        Ok(true) if loader::emulated() => skip("the emulated device is not a GPU"),
        Ok(true) => true,
    }
}

/// `n` f32 values in [-1, 1), a cheap deterministic pattern of period far above any axis.
fn pattern(shape: &[usize]) -> HostTensor {
    let n: usize = shape.iter().product();
    let v: Vec<f32> =
        (0..n as u64).map(|i| ((i.wrapping_mul(2_654_435_761) >> 7) % 2001) as f32 / 1000.0 - 1.0).collect();
    HostTensor::from_vec(shape.to_vec(), v).unwrap()
}

fn ints(name: &str, v: &[i64]) -> Attribute {
    Attribute { name: name.into(), value: Some(Value::Ints(Ints { values: v.to_vec() })) }
}

/// A one-node program of `op` over `inputs`, with one output of `out_shape`.
fn one_node(
    op: &str,
    inputs: &BTreeMap<String, HostTensor>,
    out: (DType, &[usize]),
    attributes: Vec<Attribute>,
) -> Program {
    let mut b = Builder::new(op);
    let slots: Vec<Option<u32>> = inputs
        .iter()
        .map(|(name, t)| {
            let shape: Vec<u64> = t.shape.iter().map(|&d| d as u64).collect();
            Some(b.input(name, t.dtype(), &shape, vec![]))
        })
        .collect();
    let shape: Vec<u64> = out.1.iter().map(|&d| d as u64).collect();
    let (_, tensors) = b.node(op, op, &slots, &[("out", out.0, &shape)], attributes);
    b.graph.outputs.extend(tensors);
    Program::new(b.graph, "large.lms").unwrap()
}

fn run<B: Backend>(program: Program, backend: B, values: &BTreeMap<String, HostTensor>) -> HostTensor {
    let options = RunOptions { device_memory: DEVICE_BYTES, host_memory: 0, seed: 3 };
    let mut session = Session::with_values(program, backend, options, values).unwrap_or_else(|e| panic!("{e}"));
    session.step().unwrap_or_else(|e| panic!("{e}")).outputs.remove(0)
}

/// Runs `op` on both backends and compares the outputs (inputs named in0, in1, ...: the
/// order of the node's inputs).
fn check(op: &str, inputs: Vec<HostTensor>, out: (DType, &[usize]), attributes: Vec<Attribute>, exact: bool) {
    let values: BTreeMap<String, HostTensor> =
        inputs.into_iter().enumerate().map(|(i, t)| (format!("in{i}"), t)).collect();
    let cpu = run(one_node(op, &values, out, attributes.clone()), CpuBackend::new(), &values);
    let gpu = run(
        one_node(op, &values, out, attributes),
        CudaBackend::new(0, DEVICE_BYTES).unwrap_or_else(|e| panic!("{e}")),
        &values,
    );
    drop(values);
    assert_eq!((cpu.dtype(), &cpu.shape), (gpu.dtype(), &gpu.shape), "{op}");
    if exact || cpu.dtype() != DType::DtypeF32 {
        assert!(cpu == gpu, "{op}: the GPU's output differs from the CPU's");
        println!("{op}: {} elements equal", cpu.shape.iter().product::<usize>());
        return;
    }
    let (c, g) = (cpu.as_f32("cpu").unwrap(), gpu.as_f32("gpu").unwrap());
    if let Some(j) = c.iter().zip(g).position(|(a, b)| (a - b).abs() as f64 > 1e-4 * (1.0 + a.abs() as f64)) {
        panic!("{op} [{j}] of {}: cpu {}, gpu {}", c.len(), c[j], g[j]);
    }
    println!("{op}: {} elements equal within 1e-4", c.len());
}

#[test]
fn kernels_index_tensors_of_more_than_2_pow_31_elements_like_the_cpu() {
    if !large_gpu() {
        return;
    }
    let n = ROWS * COLS;
    assert!(n > 1 << 31);
    check("Relu", vec![pattern(&[n])], (DType::DtypeF32, &[n]), vec![], false);
    check("Add", vec![pattern(&[ROWS, COLS]), pattern(&[COLS])], (DType::DtypeF32, &[ROWS, COLS]), vec![], false);
    let (r, c) = ((1 << 16) + 1, 1 << 15);
    check("Transpose", vec![pattern(&[r, c])], (DType::DtypeF32, &[c, r]), vec![ints("perm", &[1, 0])], true);
    let axes = HostTensor::from_vec(vec![1], vec![1i64]).unwrap();
    check(
        "ReduceSum",
        vec![pattern(&[ROWS, COLS]), axes],
        (DType::DtypeF32, &[ROWS, 1]),
        vec![int("keepdims", 1)],
        false,
    );
    check("Softmax", vec![pattern(&[ROWS, COLS])], (DType::DtypeF32, &[ROWS, COLS]), vec![int("axis", -1)], false);
    let rows = HostTensor::from_vec(vec![4], vec![0i64, 1, ROWS as i64 - 2, ROWS as i64 - 1]).unwrap();
    check("Gather", vec![pattern(&[ROWS, COLS]), rows], (DType::DtypeF32, &[4, COLS]), vec![int("axis", 0)], true);
    let half = ROWS / 2 + 1;
    check(
        "Concat",
        vec![pattern(&[half, COLS]), pattern(&[ROWS - half, COLS])],
        (DType::DtypeF32, &[ROWS, COLS]),
        vec![int("axis", 0)],
        true,
    );
}
