use lms_compiler::frontend::{self, FrontendOptions};
use lms_compiler::passes::tflms::{self, TflmsConfig};
use lms_compiler::train::{self, Loss, Optimizer, TrainOptions};
#[test]
fn scratch() {
    for name in ["cnn_residual", "tiny_gpt"] {
    let path = lms_tests::fixture(&format!("models/{name}.onnx"));
    let model = frontend::load(&path, &FrontendOptions { batch: Some(2), ..Default::default() }).unwrap();
    let options = TrainOptions { loss: Loss::SoftmaxCrossEntropy, optimizer: Optimizer::Sgd { lr: 0.01 }, trainable: vec![] };
    let g = train::build(&model.graph, &options).unwrap();
    let (_, report) = tflms::rewrite(&g, &TflmsConfig::default()).unwrap();
    for t in &report.tensors { println!("{} {} d={} {:?}", t.tensor, t.bytes, t.distance, t.swap_ins.iter().map(|s| (s.consumers.clone(), s.trigger.to_string())).collect::<Vec<_>>()); }
    let f = tflms::fit(&g, &TflmsConfig::default(), 700_000, 10_000_000);
    match f { Ok(f) => println!("fit: {:?} {} {} {}", f.plan.as_ref().map(|p| (p.config.n_tensors, p.config.lb, p.report.swapped_bytes())), f.device_peak_before, f.device_peak, f.host_peak), Err(e) => println!("fit err: {e}") }
    }
}
