//! One training step matches PyTorch's: small seeded PyTorch models exported to ONNX
//! (`fixtures/make_pytorch_references.py`, run by hand; its outputs are committed in
//! `fixtures/pytorch/`) are compiled by lms, stepped once on the recorded batch with SGD,
//! momentum and Adam, and compared with PyTorch's step: the loss within 1e-5 relative,
//! every parameter PyTorch's step moves beyond float32 rounding moved by lms too, and
//! lms's parameters no further from the step computed in float64 than PyTorch's own
//! float32 step is, give or take one float32 rounding of the parameter's largest value
//! (Adam: or within a small share of lr, below). The models whose gradients lower to other
//! ops also step on the emulated CUDA device as on the CPU.

use lms_runtime::backend::cuda::loader;
use lms_runtime::HostTensor;
use lms_tests::{lms_bin, lms_ok, repo_root, scratch_path};
use std::collections::BTreeMap;
use std::path::Path;

/// The models and their batch sizes.
const MODELS: [(&str, usize); 11] = [
    ("cnn", 4),
    ("gpt2", 2),
    ("bert", 2),
    ("vit", 2),
    ("bert_plain", 2),
    ("llama", 2),
    ("mobilenetv3", 4),
    ("prelu_cnn", 4),
    ("conv_transpose", 4),
    ("instance_norm_cnn", 4),
    ("einsum_attention", 2),
];

/// Each optimizer's name and its `lms compile` flags, as the script's PyTorch optimizers.
const OPTIMIZERS: [(&str, &[&str]); 3] = [
    ("sgd", &["--train", "sgd", "--lr", "0.1"]),
    ("momentum", &["--train", "momentum", "--lr", "0.1", "--momentum", "0.9"]),
    ("adam", &["--train", "adam", "--lr", "0.001"]),
];

/// Adam's first step moves a weight by lr·g/(|g| + ε), so where |g| is near ε a
/// float32 rounding of the gradient moves the update by up to about lr·(rounding/ε):
/// lms's Adam step may be further from the float64 step than PyTorch's by at most this
/// share of lr (ViT's key projection, whose gradient is near 0 where softmax ignores a
/// shift of the keys: 1.3e-6 at lr 1e-3, PyTorch's own float32 step 2.4e-7; its SGD and
/// momentum steps are within PyTorch's).
const ADAM_ALLOWANCE_OF_LR: f64 = 1e-2;

fn arrays(path: &Path) -> BTreeMap<String, HostTensor> {
    lms_compiler::npz::read(path, 1 << 30, |_, _, _| Ok(())).unwrap_or_else(|e| panic!("{e}")).into_iter().collect()
}

fn values(t: &HostTensor) -> Vec<f64> {
    match t.as_f32("values") {
        Ok(v) => v.iter().map(|&x| f64::from(x)).collect(),
        Err(_) => t.view::<f64>("values").unwrap().to_vec(),
    }
}

/// The largest elementwise distance between `a` and `b`.
fn distance(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// The float initializers of an ONNX file, by name: the parameters' initial values.
fn initializers(path: &Path) -> BTreeMap<String, Vec<f64>> {
    let model = lms_compiler::frontend::read_model(path).unwrap_or_else(|e| panic!("{e}"));
    let graph = model.graph.unwrap_or_else(|| panic!("{}: no graph", path.display()));
    graph
        .initializer
        .iter()
        .filter_map(|t| {
            let data = lms_compiler::frontend::tensor::decode(t, None).ok()?;
            data.ty.dtype.is_float().then(|| (t.name.clone(), data.to_f64()))
        })
        .collect()
}

#[test]
fn one_step_of_sgd_momentum_and_adam_matches_pytorch() {
    let dir = repo_root().join("fixtures/pytorch");
    for (model, batch) in MODELS {
        let reference = arrays(&dir.join(format!("{model}.reference.npz")));
        let data = dir.join(format!("{model}.batch.npz"));
        let onnx = dir.join(format!("{model}.onnx"));
        let exported = initializers(&onnx);
        for (optimizer, flags) in OPTIMIZERS {
            let what = format!("{model} {optimizer}");
            let (graph, state) =
                (scratch_path("pytorch-parity", "step.lms"), scratch_path("pytorch-parity", "state.npz"));
            let compile = [onnx.to_str().unwrap(), "--batch", &batch.to_string(), "-o", graph.to_str().unwrap(), "-q"];
            lms_ok(&[&["compile"][..], &compile, flags].concat());
            let run = ["run", graph.to_str().unwrap(), "--data", data.to_str().unwrap(), "--json"];
            let report: serde_json::Value =
                serde_json::from_str(&lms_ok(&[&run[..], &["--save-state", state.to_str().unwrap()]].concat()))
                    .unwrap();
            let losses = report["losses"].as_array().unwrap_or_else(|| panic!("{what}: {report}"));
            assert_eq!(losses.len(), 1, "{what}: one step on the one batch");
            let loss = losses[0].as_f64().unwrap();
            let torch_loss = values(&reference[&format!("{optimizer}.loss")])[0];
            assert!(((loss - torch_loss) / torch_loss).abs() <= 1e-5, "{what}: loss {loss}, PyTorch's {torch_loss}");

            // Momentum's first step is SGD's; the script then stores it once.
            let stored = if reference.contains_key(&format!("{optimizer}.as_sgd")) { "sgd" } else { optimizer };
            let trained = arrays(&state);
            let prefix = format!("{stored}.torch.");
            let updated: Vec<&str> = reference.keys().filter_map(|k| k.strip_prefix(&prefix)).collect();
            assert!(!updated.is_empty(), "{what}: PyTorch's step updated nothing");
            let allowance = match optimizer {
                "adam" => 0.001 * ADAM_ALLOWANCE_OF_LR,
                _ => 0.0,
            };
            for param in updated {
                let lms = values(trained.get(param).unwrap_or_else(|| panic!("{what}: lms does not train '{param}'")));
                let initial = match reference.get(&format!("initial.{param}")) {
                    Some(t) => values(t),
                    None => {
                        exported.get(param).unwrap_or_else(|| panic!("{what}: no initial value of '{param}'")).clone()
                    }
                };
                let torch = values(&reference[&format!("{stored}.torch.{param}")]);
                let residual = values(&reference[&format!("{stored}.f64_minus_torch.{param}")]);
                let exact: Vec<f64> = torch.iter().zip(&residual).map(|(t, r)| t + r).collect();
                // A step beyond float32 rounding (not a bias before a BatchNorm, whose
                // gradient is zero but for rounding) is taken by lms too.
                let scale = initial.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                if distance(&exact, &initial) > 1e-6 * scale {
                    assert!(distance(&lms, &initial) > 0.0, "{what}: lms left '{param}' as it was");
                }
                // One float32 rounding of the parameter's largest value.
                let rounding = f64::from(f32::EPSILON) * exact.iter().fold(0.0f64, |m, v| m.max(v.abs()));
                let (ours, theirs) = (distance(&lms, &exact), distance(&torch, &exact));
                assert!(
                    ours <= theirs + allowance + rounding,
                    "{what}: '{param}' is {ours:e} from the float64 step, PyTorch's float32 step {theirs:e}"
                );
            }
        }
    }
}

/// The models whose gradients lower to other ops (ConvTranspose's adjoint Conv,
/// InstanceNormalization's recomputed layer normalization, Einsum's MatMuls) take their SGD
/// step on the emulated CUDA device as on the CPU: every parameter within 1e-5 of its
/// largest value (the emulated cuBLAS and cuDNN sum in other orders).
#[test]
fn the_lowered_gradients_step_on_the_emulated_device_like_on_the_cpu() {
    let dir = repo_root().join("fixtures/pytorch");
    for (model, batch) in [("conv_transpose", 4), ("instance_norm_cnn", 4), ("einsum_attention", 2)] {
        let graph = scratch_path("pytorch-parity-emulated", &format!("{model}.lms"));
        let onnx = dir.join(format!("{model}.onnx"));
        let compile = [onnx.to_str().unwrap(), "--batch", &batch.to_string(), "-o", graph.to_str().unwrap(), "-q"];
        lms_ok(&[&["compile"][..], &compile, &["--train", "sgd", "--lr", "0.1"]].concat());
        let data = dir.join(format!("{model}.batch.npz"));
        let state = |device: &str| {
            let path = scratch_path("pytorch-parity-emulated", &format!("{model}.{device}.npz"));
            let out = std::process::Command::new(lms_bin())
                .args(["run", graph.to_str().unwrap(), "--data", data.to_str().unwrap(), "--device", device])
                .args(["--save-state", path.to_str().unwrap()])
                .env(loader::EMULATOR_VAR, "1")
                .output()
                .expect("run lms");
            assert!(out.status.success(), "{model} on {device}: {}", String::from_utf8_lossy(&out.stderr));
            arrays(&path)
        };
        let (cpu, emulated) = (state("cpu"), state("cuda"));
        assert_eq!(cpu.keys().collect::<Vec<_>>(), emulated.keys().collect::<Vec<_>>(), "{model}");
        for (name, c) in &cpu {
            if c.as_f32("state").is_err() {
                assert_eq!(c, &emulated[name], "{model} '{name}'");
                continue;
            }
            let (c, e) = (values(c), values(&emulated[name]));
            let scale = c.iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let d = distance(&c, &e);
            assert!(d <= 1e-5 * scale.max(1e-30), "{model} '{name}': emulated device {d:e} from the CPU");
        }
    }
}
