//! Every TFLMS rewrite of every fixture is proven equivalent to its training
//! graph by equality saturation: the small fixture models and the light
//! model-zoo graphs, each with TFLMS defaults and with the knobs that change
//! the rewrite's shape (direct-order control ops, fused swap-ins, swapped
//! branches, a partial swap).

use lms_compiler::egraph::{self, Limits, Stop};
use lms_compiler::passes::tflms::{self, TflmsConfig};
use lms_tests::training::{sgd_graph, tflms_knobs};
use lms_tests::{fixture, list, onnx_data};
use std::path::PathBuf;

/// The small fixture models at batch 2 and the light model-zoo graphs at batch 1.
fn fixtures() -> Vec<(PathBuf, usize)> {
    let mut models: Vec<(PathBuf, usize)> =
        ["mlp", "cnn_residual", "tiny_gpt"].iter().map(|m| (fixture(&format!("models/{m}.onnx")), 2)).collect();
    let light = list(&onnx_data("light"), |p| p.extension().is_some_and(|e| e == "onnx"));
    assert_eq!(light.len(), 9, "the onnx wheel ships 9 light models");
    models.extend(light.into_iter().map(|p| (p, 1)));
    models
}

/// The knobs that change the rewrite's shape, and a partial swap.
fn knobs() -> Vec<(&'static str, TflmsConfig)> {
    let mut knobs = tflms_knobs();
    knobs.push(("n_tensors_3_lb_3", TflmsConfig { n_tensors: Some(3), lb: 3, ..TflmsConfig::default() }));
    knobs
}

#[test]
fn every_tflms_rewrite_of_every_fixture_is_proven() {
    for (path, batch) in fixtures() {
        let name = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
        let original = sgd_graph(&path, batch);
        for (knob, config) in knobs() {
            let (rewritten, swaps) =
                tflms::rewrite(&original, &config).unwrap_or_else(|e| panic!("{name} {knob}: {e}"));
            let report = egraph::verify(&original, &rewritten, &Limits::default())
                .unwrap_or_else(|e| panic!("{name} {knob}: {e}"));
            println!("{name} {knob}: {}", report.to_text(false).trim_end());
            assert_eq!(report.stop, Stop::Goal, "{name} {knob}");
            assert!(report.items.len() > 1, "{name} {knob}: the loss and at least one update");
            assert_eq!(report.proven(), report.items.len(), "{name} {knob}");
            // Each swapped tensor's swap-ins are one term, removed once.
            let removed = report.applied.get("swap-in-of-swap-out").copied().unwrap_or(0);
            assert_eq!(removed, swaps.tensors.len(), "{name} {knob}: swap pairs removed");
            if knob == "defaults" {
                assert!(!swaps.tensors.is_empty(), "{name}: the default rewrite swaps something");
            }
        }
    }
}
