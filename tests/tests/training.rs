//! Training on the CPU runtime: the loss falls on a fixed synthetic batch,
//! ResNet-50 trains, the runtime's peak equals the simulator's, and a device
//! budget below that peak fails naming the op.

use lms_compiler::analysis::memory;
use lms_compiler::emit::serialize;
use lms_compiler::frontend;
use lms_compiler::train::{Loss, Optimizer, TrainOptions};
use lms_runtime::{CpuBackend, Program, RunOptions, RuntimeError, Session};
use lms_tests::training::{compile, session};
use lms_tests::{fixture, onnx_data};
use std::collections::BTreeMap;

fn adam(lr: f32) -> TrainOptions {
    TrainOptions {
        loss: Loss::SoftmaxCrossEntropy,
        optimizer: Optimizer::Adam { lr, beta1: 0.9, beta2: 0.999, epsilon: 1e-8 },
        trainable: vec![],
        frozen: vec![],
        running_variance: None,
    }
}

fn fixture_model(name: &str) -> lms_proto::onnx::ModelProto {
    frontend::read_model(&fixture(&format!("models/{name}.onnx"))).unwrap()
}

#[test]
fn fifty_steps_halve_the_loss_of_the_cnn_and_the_gpt_block() {
    for name in ["cnn_residual", "tiny_gpt"] {
        let graph = compile(&fixture_model(name), Some(8), &adam(0.01));
        let mut s = session(&graph, 1, &BTreeMap::new());
        let losses: Vec<f32> = (0..50).map(|_| s.step().unwrap().loss.unwrap()).collect();
        println!("{name}: loss {} -> {}", losses[0], losses[49]);
        assert!(losses.iter().all(|l| l.is_finite()), "{name}: {losses:?}");
        assert!(losses[49] <= losses[0] / 2.0, "{name}: loss {} -> {} did not halve", losses[0], losses[49]);
    }
}

#[test]
fn every_optimizer_trains_the_mlp() {
    let optimizers = [
        Optimizer::Sgd { lr: 0.1 },
        Optimizer::Momentum { lr: 0.05, momentum: 0.9 },
        Optimizer::Adam { lr: 0.01, beta1: 0.9, beta2: 0.999, epsilon: 1e-8 },
    ];
    for optimizer in optimizers {
        let options = TrainOptions {
            loss: Loss::SoftmaxCrossEntropy,
            optimizer,
            trainable: vec![],
            frozen: vec![],
            running_variance: None,
        };
        let graph = compile(&fixture_model("mlp"), Some(16), &options);
        let mut s = session(&graph, 3, &BTreeMap::new());
        let losses: Vec<f32> = (0..30).map(|_| s.step().unwrap().loss.unwrap()).collect();
        assert!(losses[29] < losses[0] * 0.8, "{optimizer:?}: {} -> {}", losses[0], losses[29]);
    }
    let mse = TrainOptions {
        loss: Loss::MeanSquaredError,
        optimizer: Optimizer::Sgd { lr: 0.05 },
        trainable: vec![],
        frozen: vec![],
        running_variance: None,
    };
    let graph = compile(&fixture_model("mlp"), Some(16), &mse);
    let mut s = session(&graph, 3, &BTreeMap::new());
    let losses: Vec<f32> = (0..30).map(|_| s.step().unwrap().loss.unwrap()).collect();
    assert!(losses[29] < losses[0] * 0.8, "mse: {} -> {}", losses[0], losses[29]);
}

#[test]
fn only_matching_parameters_train() {
    let options = TrainOptions { trainable: vec!["fc3.*".into()], ..adam(0.01) };
    let graph = compile(&fixture_model("mlp"), Some(4), &options);
    let mut s = session(&graph, 0, &BTreeMap::new());
    let before: BTreeMap<_, _> = s.variables().unwrap().into_iter().collect();
    s.step().unwrap();
    let after: BTreeMap<_, _> = s.variables().unwrap().into_iter().collect();
    assert_ne!(before["fc3.weight"], after["fc3.weight"]);
    assert_eq!(before["fc1.weight"], after["fc1.weight"]);
}

/// The runtime's per-step peak equals the simulator's, the arena it used equals the
/// placement's, and a device limit one byte below that arena is refused, naming a node.
#[test]
fn runtime_peak_equals_simulation_and_the_budget_is_enforced() {
    for name in ["mlp", "cnn_residual", "tiny_gpt"] {
        let graph = compile(&fixture_model(name), Some(4), &adam(0.001));
        let (ir, schedule) = serialize::from_program(&Program::new(graph.clone(), "test.lms").unwrap()).unwrap();
        let simulated = memory::simulate(&ir, &schedule).peak_bytes;
        let arena = memory::placement(&ir, &schedule, memory::Pool::Device).arena_bytes;
        let mut s = session(&graph, 0, &BTreeMap::new());
        let report = s.step().unwrap().report;
        assert_eq!(report.peak_device_bytes, simulated, "{name}: runtime peak vs simulation");
        assert_eq!(report.arena_device_bytes, arena, "{name}: runtime arena vs placement");
        let program = Program::new(graph.clone(), "test.lms").unwrap();
        let options = RunOptions { device_memory: arena - 1, seed: 0, ..RunOptions::default() };
        match Session::new(program, CpuBackend::new(), options) {
            Err(e @ RuntimeError::OutOfMemory(_)) => {
                let text = e.to_string();
                assert!(text.contains("out of device memory at node '"), "{text}");
            }
            other => panic!("{name}: expected out of memory, got {:?}", other.err()),
        }
    }
}

/// ResNet-50 from the model zoo, batch 2 at 224x224, trains three SGD steps.
#[test]
fn resnet50_trains_three_steps() {
    let model = frontend::read_model(&onnx_data("light/light_resnet50.onnx")).unwrap();
    let options = TrainOptions {
        loss: Loss::SoftmaxCrossEntropy,
        optimizer: Optimizer::Sgd { lr: 0.01 },
        trainable: vec![],
        frozen: vec![],
        running_variance: None,
    };
    let graph = compile(&model, Some(2), &options);
    let mut s = session(&graph, 0, &BTreeMap::new());
    for step in 0..3 {
        let out = s.step().unwrap();
        let loss = out.loss.unwrap();
        println!(
            "resnet50 step {step}: loss {loss}, peak {} bytes, {:.2} s",
            out.report.peak_device_bytes, out.report.step_seconds
        );
        assert!(loss.is_finite(), "step {step}: loss {loss}");
    }
}
