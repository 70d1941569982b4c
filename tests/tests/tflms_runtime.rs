//! TFLMS rewrites on the CPU runtime: the rewritten graph trains bit for bit
//! like the original, its peaks equal the simulation's, and it fits a device
//! budget the original does not. On the ResNet-50 and VGG-19 model-zoo
//! graphs the default rewrite swaps every forward→backward tensor.

use lms_compiler::analysis::profile::DeviceProfile;
use lms_compiler::analysis::{memory, order};
use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::ir::{Action, Graph, Phase, SWAP_OUT_OP};
use lms_compiler::passes::tflms::{self, SwapInTrigger, TflmsConfig};
use lms_compiler::train::{self, Loss, Optimizer, TrainOptions};
use lms_runtime::RuntimeError;
use lms_tests::training::{arenas, budgeted_session, train_bits};
use lms_tests::{fixture, onnx_data};
use std::path::Path;

fn training_graph(path: &Path, batch: usize) -> Graph {
    let model = frontend::load(path, &FrontendOptions { batch: Some(batch), ..Default::default() }).unwrap();
    let options = TrainOptions {
        loss: Loss::SoftmaxCrossEntropy,
        optimizer: Optimizer::Momentum { lr: 0.05, momentum: 0.9 },
        trainable: vec![],
        frozen: vec![],
        running_variance: None,
    };
    train::build(&model.graph, &options).unwrap()
}

#[test]
fn rewritten_graphs_train_bit_for_bit_and_fit_where_the_original_does_not() {
    let models = [
        ("cnn_residual", fixture("models/cnn_residual.onnx"), 4),
        ("tiny_gpt", fixture("models/tiny_gpt.onnx"), 4),
        ("light_resnet50", onnx_data("light/light_resnet50.onnx"), 2),
    ];
    for (name, path, batch) in models {
        let original = training_graph(&path, batch);
        let (rewritten, report) = tflms::rewrite(&original, &TflmsConfig::default()).unwrap();
        assert!(!report.tensors.is_empty(), "{name}: nothing swapped");
        let (losses_a, vars_a, peak_a, _) = train_bits(&original);
        let (losses_b, vars_b, peak_b, host_b) = train_bits(&rewritten);
        assert_eq!(losses_a, losses_b, "{name}: losses differ after the rewrite");
        assert_eq!(vars_a, vars_b, "{name}: parameters differ after the rewrite");
        let schedule = order::schedule(&rewritten).unwrap();
        let sim = memory::simulate(&rewritten, &schedule);
        assert_eq!((peak_b, host_b), (sim.peak_bytes, sim.host_peak_bytes), "{name}: runtime vs simulated peaks");
        assert!(peak_b < peak_a, "{name}: rewrite did not lower the peak ({peak_a} -> {peak_b})");
        println!("{name}: {} tensors swapped, peak {peak_a} -> {peak_b} bytes, host {host_b}", report.tensors.len());
        // The rewritten graph runs in its own device arena; the original's is larger and
        // is refused there.
        let (arena_b, _) = arenas(&rewritten);
        budgeted_session(&rewritten, arena_b).unwrap().step().unwrap();
        match budgeted_session(&original, arena_b) {
            Err(RuntimeError::OutOfMemory(_)) => {}
            other => panic!("{name}: the original should not fit in {arena_b} bytes: {:?}", other.err()),
        }
    }
}

/// Float tensors that TFLMS's default must swap: made by a forward op that
/// is neither a parameterized vertex nor a swap-out, read by a backward op,
/// and not a graph output.
fn forward_to_backward_tensors(g: &Graph) -> usize {
    let mut tensors: Vec<_> = g
        .edges()
        .filter(|(src, dst, e)| {
            e.action == Action::Read
                && !g.node(*src).parameterized
                && g.node(*src).op != SWAP_OUT_OP
                && g.node(*src).phase == Phase::Forward
                && g.node(*dst).phase == Phase::Backward
                && e.tensor.is_some_and(|t| g.tensor(t).ty.dtype.is_float() && !g.outputs.contains(&t))
        })
        .filter_map(|(_, _, e)| e.tensor)
        .collect();
    tensors.sort();
    tensors.dedup();
    tensors.len()
}

#[test]
fn default_rewrite_swaps_every_forward_to_backward_tensor_of_resnet50_and_vgg19() {
    for name in ["light_resnet50", "light_vgg19"] {
        let g = training_graph(&onnx_data(&format!("light/{name}.onnx")), 2);
        let (rewritten, report) = tflms::rewrite(&g, &TflmsConfig::default()).unwrap();
        let expected = forward_to_backward_tensors(&g);
        println!("{name}: {} tensors swapped, {} ops added", report.tensors.len(), report.ops_added);
        assert_eq!(report.tensors.len(), expected, "{name}: swapped tensors");
        assert_eq!(forward_to_backward_tensors(&rewritten), 0, "{name}: forward tensors still read by backward ops");
    }
}

/// A time-triggered rewrite (on the default GPU profile, and on the CPU
/// profile whose swap-ins follow the last op before their consumer) trains
/// bit for bit like the original, with the simulated peaks.
#[test]
fn time_triggered_rewrites_train_bit_for_bit() {
    for (name, path) in
        [("cnn_residual", fixture("models/cnn_residual.onnx")), ("tiny_gpt", fixture("models/tiny_gpt.onnx"))]
    {
        let original = training_graph(&path, 4);
        let (losses_a, vars_a, _, _) = train_bits(&original);
        for profile in ["h100-sxm", "cpu"] {
            let profile = DeviceProfile::load(profile).unwrap();
            let cfg = TflmsConfig { trigger: SwapInTrigger::Time, profile: profile.into(), ..TflmsConfig::default() };
            let (rewritten, report) = tflms::rewrite(&original, &cfg).unwrap();
            assert!(report.swap_ins_without_control < report.tensors.len(), "{name}: triggers were placed");
            let (losses_b, vars_b, peak_b, host_b) = train_bits(&rewritten);
            assert_eq!(losses_a, losses_b, "{name}: losses differ after the time-triggered rewrite");
            assert_eq!(vars_a, vars_b, "{name}: parameters differ after the time-triggered rewrite");
            let sim = memory::simulate(&rewritten, &order::schedule(&rewritten).unwrap());
            assert_eq!((peak_b, host_b), (sim.peak_bytes, sim.host_peak_bytes), "{name}: runtime vs simulated peaks");
        }
    }
}
