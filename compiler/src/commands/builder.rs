//! [`Compile`]: `lms compile` as a builder, for build scripts and programs.
//! It has every option of the command, by the same rules: a budget needs a
//! strategy ([`Compile::tflms`] or [`Compile::auto`]; `auto` needs a budget),
//! and a host budget or `force` needs a budget. Each group of options has an
//! example: shapes ([`Compile::batch`]), training ([`Compile::optimizer`]),
//! memory strategy ([`Compile::auto`], [`Compile::tflms`]), outputs
//! ([`Compile::html`]) and the pipeline ([`Compile::stop_after`]).
//!
//! ```no_run
//! // build.rs
//! use lms_compiler::passes::tflms::TflmsConfig;
//! fn main() -> Result<(), lms_compiler::Error> {
//!     let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("model.lms");
//!     lms_compiler::Compile::new("model.onnx")
//!         .batch(32)
//!         .tflms(TflmsConfig::default())
//!         .budget("16GiB")
//!         .cargo_rerun_if_changed()
//!         .write(out)?;
//!     Ok(())
//! }
//! ```

use crate::budget::Budget;
use crate::commands::compile::{self, CompileOptions, CompileReport, Strategy};
use crate::error::{Error, Result};
use crate::flags;
use crate::frontend;
use crate::passes::split::SplitRequest;
use crate::passes::tflms::{FreeKnobs, TflmsConfig};
use crate::train::{Loss, Optimizer, RunningVariance};
use crate::units::parse_bytes;
use std::path::{Path, PathBuf};

/// Options of one compile, set one by one; [`Compile::write`] runs it.
#[derive(Clone, Debug)]
pub struct Compile {
    options: CompileOptions,
    device_budget: Option<String>,
    host_budget: Option<String>,
    force: bool,
    splits: Vec<String>,
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
            splits: Vec::new(),
            cargo: false,
        }
    }

    /// The leading dimension of every data input (`--batch`; required when
    /// the model's is symbolic).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/models/tiny_gpt.onnx");
    /// let report = lms_compiler::Compile::new(model).batch(8).dim("batch", 8).write(dir.path().join("m.lms"))?;
    /// assert_eq!(report.batch, Some(8));
    /// let unset = lms_compiler::Compile::new(model).write(dir.path().join("none.lms")).unwrap_err();
    /// assert!(unset.to_string().ends_with("is symbolic; set the batch with --batch N"));
    /// # Ok::<(), lms_compiler::Error>(())
    /// ```
    pub fn batch(mut self, batch: usize) -> Compile {
        self.options.frontend.batch = Some(batch);
        self
    }

    /// The value of a named symbolic dimension (`--dim NAME=N`).
    pub fn dim(mut self, name: &str, value: usize) -> Compile {
        self.options.frontend.dims.insert(name.to_string(), value);
        self
    }

    /// The optimizer of the training graph and its hyper-parameters
    /// (`--train`, `--lr`, `--momentum`; default SGD, learning rate 0.01).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/models/tiny_gpt.onnx");
    /// use lms_compiler::train::{Loss, Optimizer};
    /// let report = lms_compiler::Compile::new(model)
    ///     .batch(2)
    ///     .optimizer(Optimizer::Momentum { lr: 0.05, momentum: 0.9 })
    ///     .loss(Loss::SoftmaxCrossEntropy)
    ///     .frozen("w?e")
    ///     .write(dir.path().join("m.lms"))?;
    /// assert_eq!(report.optimizer.as_deref(), Some("momentum (lr 0.05, momentum 0.9)"));
    /// assert_eq!(report.training.frozen, ["wte", "wpe"]);
    /// # Ok::<(), lms_compiler::Error>(())
    /// ```
    pub fn optimizer(mut self, optimizer: Optimizer) -> Compile {
        self.options.train.optimizer = optimizer;
        self
    }

    /// The loss on the model's first output (`--loss`; default softmax
    /// cross-entropy).
    pub fn loss(mut self, loss: Loss) -> Compile {
        self.options.train.loss = loss;
        self
    }

    /// Trains exactly the weights whose names match `glob` (`--trainable`;
    /// may be repeated).
    pub fn trainable(mut self, glob: &str) -> Compile {
        self.options.train.trainable.push(glob.to_string());
        self
    }

    /// Leaves the weights whose names match `glob` untrained (`--frozen`;
    /// may be repeated).
    pub fn frozen(mut self, glob: &str) -> Compile {
        self.options.train.frozen.push(glob.to_string());
        self
    }

    /// Updates BatchNorm's running variance with the biased (ONNX) or
    /// unbiased (PyTorch) batch variance (`--running-variance`; default:
    /// unbiased when the model's producer is pytorch, else biased).
    pub fn running_variance(mut self, convention: RunningVariance) -> Compile {
        self.options.train.running_variance = Some(convention);
        self
    }

    /// Rewrites the training graph by TFLMS with these knobs (`--strategy
    /// tflms` and its knobs); with a budget, the search chooses the knobs
    /// [`Compile::free_knobs`] leaves free.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/models/tiny_gpt.onnx");
    /// use lms_compiler::passes::tflms::{FreeKnobs, TflmsConfig};
    /// let config = TflmsConfig { lb: 2, ..TflmsConfig::default() };
    /// let report = lms_compiler::Compile::new(model)
    ///     .batch(32)
    ///     .tflms(config)
    ///     .free_knobs(FreeKnobs { n_tensors: true, lb: false })
    ///     .budget("2200KiB")
    ///     .write(dir.path().join("m.lms"))?;
    /// assert_eq!((report.lb, report.chosen_knobs.as_slice()), (Some(2), &["n_tensors".to_string()][..]));
    /// # Ok::<(), lms_compiler::Error>(())
    /// ```
    pub fn tflms(mut self, config: TflmsConfig) -> Compile {
        self.options.strategy = Strategy::Tflms(config);
        self
    }

    /// With a budget and TFLMS: the knobs the search may choose (default
    /// both); the others are used as the config gives them, as the command
    /// keeps `--n-tensors` and `--lb` when given.
    pub fn free_knobs(mut self, free: FreeKnobs) -> Compile {
        self.options.free_knobs = free;
        self
    }

    /// Rewrites the training graph by the budget planner (`--strategy
    /// auto`; needs a budget): per tensor a swap or a recompute, and the
    /// batch run in parts when no such plan fits.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/models/tiny_gpt.onnx");
    /// let report = lms_compiler::Compile::new(model)
    ///     .batch(32)
    ///     .auto()
    ///     .budget("2200KiB")
    ///     .host_budget("0")
    ///     .write(dir.path().join("m.lms"))?;
    /// assert_eq!((report.strategy.as_str(), report.fits, report.swapped_tensors), ("auto", Some(true), 0));
    /// // A budget without a strategy is refused, as by the command.
    /// let err = lms_compiler::Compile::new(model).batch(32).budget("2200KiB").write(dir.path().join("x.lms"));
    /// assert!(err.unwrap_err().to_string().contains("needs a memory strategy"));
    /// # Ok::<(), lms_compiler::Error>(())
    /// ```
    pub fn auto(mut self) -> Compile {
        self.options.strategy = Strategy::Auto;
        self
    }

    /// Runs op `op=NAME,dim=...,parts=P[,depth=K]` in parts (`--split`, the
    /// flag's syntax; may be repeated).
    pub fn split(mut self, request: &str) -> Compile {
        self.splits.push(request.to_string());
        self
    }

    /// The device profile the plan is made for (a shipped name or a profile
    /// file; default `h100-sxm`): recorded in the plan, and the timeline
    /// that places swap-ins with the time trigger.
    pub fn device_profile(mut self, name_or_file: &str) -> Compile {
        self.options.device_profile = name_or_file.to_string();
        self
    }

    /// The device memory to fit (`--budget`), as `16GiB`, `2200KiB`, or
    /// bytes; needs a strategy ([`Compile::tflms`] or [`Compile::auto`]).
    pub fn budget(mut self, size: &str) -> Compile {
        self.device_budget = Some(size.to_string());
        self
    }

    /// The host memory swapped tensors may use with a budget
    /// (`--host-budget`; default [`DEFAULT_HOST_BUDGET_BYTES`](crate::budget::DEFAULT_HOST_BUDGET_BYTES); `0`:
    /// the planner only recomputes).
    pub fn host_budget(mut self, size: &str) -> Compile {
        self.host_budget = Some(size.to_string());
        self
    }

    /// With a budget (`--force`): rewrite even when the training graph already fits, and
    /// write a plan whose arenas are over the budgets (the report's
    /// `written_over_budget` says why) instead of failing.
    pub fn force(mut self) -> Compile {
        self.force = true;
        self
    }

    /// Whether to prove a rewrite equivalent before writing it (default on;
    /// `--no-verify` turns it off).
    pub fn verify(mut self, verify: bool) -> Compile {
        self.options.verify = verify;
        self
    }

    /// Ends the pipeline after the pass named `pass` (`--stop-after`); the
    /// `.lms` file holds the graph at that point.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/models/tiny_gpt.onnx");
    /// let dump = dir.path().join("autodiff.txt");
    /// let report = lms_compiler::Compile::new(model)
    ///     .batch(2)
    ///     .dump_after("autodiff", &dump)
    ///     .stop_after("optimizer")
    ///     .write(dir.path().join("m.lms"))?;
    /// assert_eq!(report.passes, ["import", "autodiff", "optimizer"]);
    /// assert!(std::fs::read_to_string(&dump)?.contains("/grad/"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stop_after(mut self, pass: &str) -> Compile {
        self.options.passes.stop_after = Some(pass.to_string());
        self
    }

    /// Writes the graph's text form after the pass named `pass` to `path`
    /// (`--dump-after`).
    pub fn dump_after(mut self, pass: &str, path: impl Into<PathBuf>) -> Compile {
        self.options.passes.dump_after = Some((pass.to_string(), path.into()));
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
    /// decisions) to `path` (`--html`).
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let model = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/models/tiny_gpt.onnx");
    /// let out = |name: &str| dir.path().join(name);
    /// lms_compiler::Compile::new(model)
    ///     .batch(2)
    ///     .text(out("m.txt"))
    ///     .onnx(out("m.onnx"))
    ///     .report(out("m.json"))
    ///     .html(out("m.html"))
    ///     .depfile(out("m.d"))
    ///     .write(out("m.lms"))?;
    /// for name in ["m.lms", "m.txt", "m.onnx", "m.json", "m.html", "m.d"] {
    ///     assert!(out(name).is_file(), "{name}");
    /// }
    /// # Ok::<(), lms_compiler::Error>(())
    /// ```
    pub fn html(mut self, path: impl Into<PathBuf>) -> Compile {
        self.options.html = Some(path.into());
        self
    }

    /// Also writes a Makefile rule to `path`: the `.lms` file depends on the
    /// model and its external data files (`--depfile`).
    pub fn depfile(mut self, path: impl Into<PathBuf>) -> Compile {
        self.options.depfile = Some(path.into());
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
        let device = self.device_budget.as_deref().map(|text| size("budget", text)).transpose()?;
        let host = self.host_budget.as_deref().map(|text| size("host budget", text)).transpose()?;
        options.budget = Budget::from_sizes(device, host, ["a budget", "host budget"])?;
        flags::needs(self.force, "force", device.is_some(), "a budget")?;
        options.force = self.force;
        for request in &self.splits {
            options.split.push(SplitRequest::parse(request).map_err(Error::Usage)?);
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
