//! [`Compile`]: `lms compile` as a builder, for build scripts and programs.
//!
//! ```no_run
//! // build.rs
//! fn main() -> Result<(), lms_compiler::Error> {
//!     let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("model.lms");
//!     lms_compiler::Compile::new("model.onnx").batch(32).budget("16GiB").cargo_rerun_if_changed().write(out)?;
//!     Ok(())
//! }
//! ```

use crate::compile::{self, Budget, CompileOptions, CompileReport, Strategy};
use crate::error::{Error, Result};
use crate::frontend;
use crate::passes::tflms::TflmsConfig;
use crate::train::{Loss, Optimizer};
use crate::units::parse_bytes;
use std::path::{Path, PathBuf};

/// Options of one compile, set one by one; [`Compile::write`] runs it.
#[derive(Clone, Debug)]
pub struct Compile {
    options: CompileOptions,
    device_budget: Option<String>,
    host_budget: Option<String>,
    force: bool,
    cargo: bool,
}

impl Compile {
    /// A compile of the ONNX model at `model` with the defaults of
    /// [`CompileOptions`].
    pub fn new(model: impl Into<PathBuf>) -> Compile {
        Compile {
            options: CompileOptions { model: model.into(), ..CompileOptions::default() },
            device_budget: None,
            host_budget: None,
            force: false,
            cargo: false,
        }
    }

    /// The leading dimension of every data input.
    pub fn batch(mut self, batch: usize) -> Compile {
        self.options.frontend.batch = Some(batch);
        self
    }

    /// The value of a named symbolic dimension.
    pub fn dim(mut self, name: &str, value: usize) -> Compile {
        self.options.frontend.dims.insert(name.to_string(), value);
        self
    }

    /// The optimizer of the training graph (default SGD, learning rate 0.01).
    pub fn optimizer(mut self, optimizer: Optimizer) -> Compile {
        self.options.train.optimizer = optimizer;
        self
    }

    /// The loss on the model's first output (default softmax cross-entropy).
    pub fn loss(mut self, loss: Loss) -> Compile {
        self.options.train.loss = loss;
        self
    }

    /// Trains only parameters whose names match `glob` (may be repeated).
    pub fn trainable(mut self, glob: &str) -> Compile {
        self.options.train.trainable.push(glob.to_string());
        self
    }

    /// Rewrites the training graph by TFLMS with these knobs.
    pub fn tflms(mut self, config: TflmsConfig) -> Compile {
        self.options.strategy = Strategy::Tflms(config);
        self
    }

    /// The device profile the plan is made for (a shipped name or a profile
    /// file; default `h100-sxm`): recorded in the plan, and the timeline
    /// that places swap-ins with the time trigger.
    pub fn device_profile(mut self, name_or_file: &str) -> Compile {
        self.options.device_profile = name_or_file.to_string();
        self
    }

    /// The device memory to fit, as `16GiB`, `2200KiB`, or bytes; without a
    /// strategy this selects TFLMS with its default knobs.
    pub fn budget(mut self, size: &str) -> Compile {
        self.device_budget = Some(size.to_string());
        self
    }

    /// The host memory swapped tensors may use with a budget (default
    /// [`compile::DEFAULT_HOST_BUDGET_BYTES`]).
    pub fn host_budget(mut self, size: &str) -> Compile {
        self.host_budget = Some(size.to_string());
        self
    }

    /// With a budget: rewrite even when the training graph already fits, and
    /// write a plan whose arenas are over the budgets (the report's
    /// `written_over_budget` says why) instead of failing.
    pub fn force(mut self) -> Compile {
        self.force = true;
        self
    }

    /// Whether to prove a rewrite equivalent before writing it (default on).
    pub fn verify(mut self, verify: bool) -> Compile {
        self.options.verify = verify;
        self
    }

    /// Also writes the stable text form of the graph to `path`.
    pub fn text(mut self, path: impl Into<PathBuf>) -> Compile {
        self.options.text = Some(path.into());
        self
    }

    /// Also writes an ONNX export of the graph to `path`.
    pub fn onnx(mut self, path: impl Into<PathBuf>) -> Compile {
        self.options.onnx = Some(path.into());
        self
    }

    /// Also writes the report as JSON to `path`.
    pub fn report(mut self, path: impl Into<PathBuf>) -> Compile {
        self.options.report = Some(path.into());
        self
    }

    /// Also writes the HTML report (memory before and after, streams,
    /// decisions) to `path`.
    pub fn html(mut self, path: impl Into<PathBuf>) -> Compile {
        self.options.html = Some(path.into());
        self
    }

    /// For a `build.rs`: prints `cargo:rerun-if-changed=` for the model and
    /// each of its external data files, so Cargo reruns the script when one
    /// changes.
    pub fn cargo_rerun_if_changed(mut self) -> Compile {
        self.cargo = true;
        self
    }

    /// The options [`Compile::write`] compiles with, writing `output`.
    pub fn options(&self, output: impl Into<PathBuf>) -> Result<CompileOptions> {
        let size = |what: &str, text: &str| parse_bytes(text).map_err(|e| Error::Usage(format!("{what}: {e}")));
        let mut options = CompileOptions { output: output.into(), ..self.options.clone() };
        if let Some(device) = &self.device_budget {
            options.budget = Some(Budget {
                device_bytes: size("budget", device)?,
                host_bytes: match &self.host_budget {
                    Some(host) => size("host budget", host)?,
                    None => compile::DEFAULT_HOST_BUDGET_BYTES,
                },
                force: self.force,
            });
            if options.strategy == Strategy::None {
                options.strategy = Strategy::Tflms(TflmsConfig::default());
            }
        }
        Ok(options)
    }

    /// Compiles and writes the `.lms` file to `output` (and every other
    /// output asked for).
    pub fn write(self, output: impl Into<PathBuf>) -> Result<CompileReport> {
        let options = self.options(output)?;
        if self.cargo {
            for line in rerun_if_changed(&options.model) {
                println!("{line}");
            }
        }
        compile::compile(&options)
    }
}

/// The `cargo:rerun-if-changed=` lines of a compile of `model`: the model
/// and its external data files. A model that cannot be read is named alone,
/// so Cargo still reruns once it appears or changes.
pub fn rerun_if_changed(model: &Path) -> Vec<String> {
    let mut files = vec![model.to_path_buf()];
    if let Ok(proto) = frontend::read_model(model) {
        files.extend(frontend::external_files(&proto, model.parent().unwrap_or(Path::new("."))));
    }
    files.iter().map(|f| format!("cargo:rerun-if-changed={}", f.display())).collect()
}
