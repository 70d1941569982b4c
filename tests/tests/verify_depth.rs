//! A batch split along a whole training graph is proven however deep the
//! graph is: facts about the parts travel one op per iteration, so DenseNet-121
//! split along its full depth takes more iterations than the fixed 1024 the
//! proofs once had (the planner's plans at DenseNet-121's largest batches have
//! this shape and stopped unproven), and the work per iteration is what the
//! last one changed, not the whole e-graph.

use lms_compiler::egraph::{self, Limits, Stop};
use lms_compiler::passes::split::{batch_patch, BatchSplit};
use lms_compiler::pipeline;
use lms_tests::onnx_data;
use lms_tests::training::sgd_graph;

#[test]
fn densenet121_split_along_its_whole_depth_is_proven() {
    let original = sgd_graph(&onnx_data("light/light_densenet121.onnx"), 6);
    let (patch, split) = batch_patch(&original, &BatchSplit { parts: 3, min_bytes: 0 }).unwrap();
    let (rewritten, _) = pipeline::apply_checked(&original, &patch).unwrap();
    let report = egraph::verify(&original, &rewritten, &Limits::default()).unwrap_or_else(|e| panic!("{e}"));
    println!("{} ops in parts: {}", split.ops, report.to_text(false).trim_end());
    assert_eq!(report.stop, Stop::Goal);
    assert_eq!(report.proven(), report.items.len());
    assert!(report.iterations > 1024, "{} iterations", report.iterations);
    assert!(
        report.searched < 10 * report.classes,
        "{} class searches for {} classes: each iteration should search only what changed",
        report.searched,
        report.classes
    );
}
