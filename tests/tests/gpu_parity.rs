//! Whole-model parity on the GPU: the CUDA backend trains the small CNN and
//! the GPT block like the CPU backend (losses within a relative 1e-3 over
//! three steps: cuDNN/cuBLAS sum in other orders), and the TFLMS-rewritten
//! graph bit for bit like the original on the same GPU. Skipped, saying so,
//! only where no CUDA driver exists; `LMS_REQUIRE_GPU=1` makes that a failure.

use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::ir::Graph;
use lms_compiler::passes::tflms::{self, TflmsConfig};
use lms_compiler::train::{self, Loss, Optimizer, TrainOptions};
use lms_runtime::{Backend, CpuBackend, CudaBackend, Program, RunOptions, Session};
use lms_tests::training::serialized;
use lms_tests::{fixture, gpu_available};

fn training_graph(name: &str) -> Graph {
    let model = frontend::load(
        &fixture(&format!("models/{name}.onnx")),
        &FrontendOptions { batch: Some(4), ..Default::default() },
    )
    .unwrap();
    let options = TrainOptions {
        loss: Loss::SoftmaxCrossEntropy,
        optimizer: Optimizer::Adam { lr: 0.01, beta1: 0.9, beta2: 0.999, epsilon: 1e-8 },
        trainable: vec![],
        frozen: vec![],
        running_variance: None,
    };
    train::build(&model.graph, &options).unwrap()
}

fn losses<B: Backend>(g: &Graph, backend: B) -> Vec<f32> {
    let program = Program::new(serialized(g), "test.lms").unwrap();
    let mut s = Session::new(program, backend, RunOptions { seed: 9, ..RunOptions::default() }).unwrap();
    (0..3).map(|_| s.step().unwrap().loss.unwrap()).collect()
}

#[test]
fn gpu_trains_like_the_cpu_and_rewrites_are_bit_identical_on_it() {
    if !gpu_available("gpu_parity") {
        return;
    }
    for name in ["cnn_residual", "tiny_gpt"] {
        let original = training_graph(name);
        let (rewritten, _) = tflms::rewrite(&original, &TflmsConfig::default()).unwrap();
        let gpu = losses(&original, CudaBackend::new(0, u64::MAX).unwrap());
        let cpu = losses(&original, CpuBackend::new());
        for (g, c) in gpu.iter().zip(&cpu) {
            assert!((g - c).abs() <= 1e-3 * c.abs().max(1.0), "{name}: gpu {gpu:?} vs cpu {cpu:?}");
        }
        let swapped = losses(&rewritten, CudaBackend::new(0, u64::MAX).unwrap());
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&gpu), bits(&swapped), "{name}: rewritten graph differs on the GPU");
    }
}
