//! Provenance of a compiled graph: the `.lms` metadata, as structured
//! key/value facts (lms version, the model file's name and content hash,
//! batch and dimensions, loss, optimizer and its hyper-parameters, strategy,
//! its knobs and budgets). Values are plain numbers and names, never Rust
//! debug strings, and the model is named by its file name only, so the path
//! as typed (`dn.onnx`, `./dn.onnx`) never changes the bytes written.

use crate::commands::compile::{CompileOptions, CompileReport, Strategy};
use crate::train::{Loss, Optimizer};

/// The metadata of a compile of `options`, whose model file holds
/// `model_bytes`, that produced `report`; keys in a fixed order.
pub fn metadata(options: &CompileOptions, model_bytes: &[u8], report: &CompileReport) -> Vec<(String, String)> {
    let mut facts = Facts::default();
    facts.add("lms.version", env!("CARGO_PKG_VERSION"));
    facts.add("model.file", model_file_name(&options.model));
    facts.add("model.sha256", sha256_hex(model_bytes));
    facts.add("batch", options.frontend.batch.map_or_else(|| "model".to_string(), |b| b.to_string()));
    for (name, value) in &options.frontend.dims {
        facts.add(&format!("dim.{name}"), value);
    }
    facts.add(
        "loss",
        match options.train.loss {
            Loss::SoftmaxCrossEntropy => "softmax-xent",
            Loss::MeanSquaredError => "mse",
        },
    );
    match options.train.optimizer {
        Optimizer::Sgd { lr } => {
            facts.add("optimizer", "sgd");
            facts.add("optimizer.lr", lr);
        }
        Optimizer::Momentum { lr, momentum } => {
            facts.add("optimizer", "momentum");
            facts.add("optimizer.lr", lr);
            facts.add("optimizer.momentum", momentum);
        }
        Optimizer::Adam { lr, beta1, beta2, epsilon } => {
            facts.add("optimizer", "adam");
            facts.add("optimizer.lr", lr);
            facts.add("optimizer.beta1", beta1);
            facts.add("optimizer.beta2", beta2);
            facts.add("optimizer.epsilon", epsilon);
        }
    }
    if !options.train.trainable.is_empty() {
        facts.add("trainable", options.train.trainable.join(","));
    }
    if !options.train.frozen.is_empty() {
        facts.add("frozen", options.train.frozen.join(","));
    }
    facts.add("strategy", &report.strategy);
    if let Strategy::Tflms(config) = &options.strategy {
        let knobs = serde_json::to_value(config).unwrap_or_default();
        for (knob, value) in knobs.as_object().into_iter().flatten() {
            if let Some(value) = plain(value) {
                facts.add(&format!("tflms.{knob}"), value);
            }
        }
    }
    if let Some(budget) = options.budget {
        facts.add("budget.device_bytes", budget.device);
        facts.add("budget.host_bytes", budget.host);
        facts.add("budget.force", options.force);
    }
    for knob in &report.chosen_knobs {
        match knob.as_str() {
            "n_tensors" => {
                facts.add("chosen.n_tensors", report.n_tensors.map_or_else(|| "all".into(), |n| n.to_string()))
            }
            "lb" => facts.add("chosen.lb", report.lb.map_or_else(String::new, |lb| lb.to_string())),
            other => facts.add(&format!("chosen.{other}"), "yes"),
        }
    }
    facts.0
}

/// The file name of `path` (the path itself when it has none).
pub fn model_file_name(path: &std::path::Path) -> String {
    path.file_name().map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned())
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hmac_sha256::Hash::hash(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

/// A knob's value as plain text: numbers and booleans as written, strings
/// bare, lists comma-separated; `None` for an unset (null) or empty knob.
fn plain(value: &serde_json::Value) -> Option<String> {
    use serde_json::Value;
    match value {
        Value::Null => None,
        Value::String(s) => Some(s.clone()),
        Value::Array(items) if items.is_empty() => None,
        Value::Array(items) => Some(items.iter().filter_map(plain).collect::<Vec<_>>().join(",")),
        other => Some(other.to_string()),
    }
}

/// Metadata facts in insertion order.
#[derive(Default)]
struct Facts(Vec<(String, String)>);

impl Facts {
    fn add(&mut self, key: &str, value: impl ToString) {
        self.0.push((key.to_string(), value.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_and_names() {
        assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert_eq!(model_file_name(std::path::Path::new("./dir/../dn.onnx")), "dn.onnx");
        assert_eq!(model_file_name(std::path::Path::new("dn.onnx")), "dn.onnx");
    }

    #[test]
    fn knobs_are_plain_text() {
        use serde_json::json;
        assert_eq!(plain(&json!(null)), None);
        assert_eq!(plain(&json!([])), None);
        assert_eq!(plain(&json!(["Conv", "Relu"])).as_deref(), Some("Conv,Relu"));
        assert_eq!(plain(&json!("chain-rule")).as_deref(), Some("chain-rule"));
        assert_eq!(plain(&json!(true)).as_deref(), Some("true"));
        assert_eq!(plain(&json!(7)).as_deref(), Some("7"));
    }
}
