//! Compiles the shipped GPT-style block for training at batch 32 with Adam,
//! rewritten by TFLMS to fit 2200 KiB of device memory, into `OUT_DIR`.
//! Cargo reruns this script when the model (or its external data) changes.

use lms_compiler::passes::tflms::TflmsConfig;
use lms_compiler::train::Optimizer;
use lms_compiler::Compile;
use std::path::PathBuf;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let model = manifest.join("../../../fixtures/models/tiny_gpt.onnx");
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("tiny_gpt.lms");
    let adam = Optimizer::Adam { lr: 0.001, beta1: 0.9, beta2: 0.999, epsilon: 1e-8 };
    Compile::new(model)
        .batch(32)
        .optimizer(adam)
        .tflms(TflmsConfig::default())
        .budget("2200KiB")
        .cargo_rerun_if_changed()
        .write(out)?;
    Ok(())
}
