//! Measures the figures of the `cpu` device profile (compiler/profiles/cpu.json)
//! on this machine: the CPU backend's matrix product (the `MatMul` kernel the
//! runtime runs, 1024×1024×1024 f32), a copy of a 256 MiB tensor into a new
//! one (what a swap is on the CPU backend), an elementwise kernel (`Relu` on
//! 64 Mi elements, output allocated as the runtime does: the memory bandwidth
//! kernels see) and the time of a kernel on one element (the per-op overhead).
//!
//! Run with `cargo bench -p lms-compiler --bench cpu_profile`; each figure is
//! the best of 5 runs.

use lms_proto::lms::DType;
use lms_runtime::attrs::Attrs;
use lms_runtime::cpu::kernels;
use lms_runtime::HostTensor;
use std::time::Instant;

/// Best wall time of `runs` calls of `f`, seconds.
fn best(runs: usize, mut f: impl FnMut()) -> f64 {
    (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let no_attrs = Attrs::new(&[]);
    let n = 1024usize;
    let a = HostTensor::from_vec(vec![n, n], vec![1.0f32; n * n]).expect("tensor");
    let b = HostTensor::from_vec(vec![n, n], vec![0.5f32; n * n]).expect("tensor");
    let gemm = best(5, || {
        kernels::forward("MatMul", 13, &no_attrs, &[Some(&a), Some(&b)], &[(DType::DtypeF32, vec![n, n])])
            .expect("MatMul");
    });
    let gemm_flops = 2.0 * (n * n * n) as f64 / gemm;

    let len = 64usize << 20;
    let src = HostTensor::from_vec(vec![len], vec![1.0f32; len]).expect("tensor");
    let copy = best(5, || drop(std::hint::black_box(std::hint::black_box(&src).clone())));
    let copy_bandwidth = (4 * len) as f64 / copy;

    let x = HostTensor::from_vec(vec![len], vec![-1.0f32; len]).expect("tensor");
    let relu = best(5, || {
        kernels::forward("Relu", 13, &no_attrs, &[Some(&x)], &[(DType::DtypeF32, vec![len])]).expect("Relu");
    });
    let relu_bandwidth = (8 * len) as f64 / relu;

    let one = HostTensor::from_vec(vec![1], vec![1.0f32]).expect("tensor");
    let launch = best(5, || {
        for _ in 0..10_000 {
            kernels::forward("Relu", 13, &no_attrs, &[Some(&one)], &[(DType::DtypeF32, vec![1])]).expect("Relu");
        }
    }) / 10_000.0;

    println!("MatMul 1024^3 f32: {:.4} s, {:.1} GFLOP/s", gemm, gemm_flops / 1e9);
    println!("clone of a 256 MiB tensor: {:.4} s, {:.2} GB/s", copy, copy_bandwidth / 1e9);
    println!("Relu 64 Mi f32 (read + write 512 MiB): {:.4} s, {:.2} GB/s", relu, relu_bandwidth / 1e9);
    println!("Relu on one element: {:.2} µs", launch * 1e6);
}
