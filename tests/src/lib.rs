//! Shared helpers for the workspace integration tests: where the fixtures
//! are, and how to run the `lms` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub mod fuzz;

/// The variable that names the repository root, for test binaries carried to another
/// machine (where the path baked in at build time does not exist).
pub const REPO_ROOT_VAR: &str = "LMS_REPO_ROOT";

/// The repository root: `LMS_REPO_ROOT` when set, else the checkout the tests were built
/// in when it still exists, else the current folder.
pub fn repo_root() -> PathBuf {
    if let Some(root) = std::env::var_os(REPO_ROOT_VAR) {
        return PathBuf::from(root);
    }
    let built = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent");
    if built.join("fixtures").is_dir() {
        built.to_path_buf()
    } else {
        std::env::current_dir().expect("current folder")
    }
}

/// Whether a GPU test runs here (see `lms_runtime::backend::cuda::gpu_test_gate`):
/// false, having said so, when there is no CUDA driver; panics when `LMS_REQUIRE_GPU=1`
/// forbids skipping or the driver's GPU cannot be used.
pub fn gpu_available(test: &str) -> bool {
    lms_runtime::backend::cuda::gpu_test_gate(test).unwrap_or_else(|why| panic!("{why}"))
}

/// A file or folder under `fixtures/`.
pub fn fixture(rel: &str) -> PathBuf {
    repo_root().join("fixtures").join(rel)
}

/// The fetched ONNX test data (`fixtures/fetch-onnx-testdata.sh`). Panics with
/// the command to run when it is missing, so a test never passes vacuously.
pub fn onnx_data(rel: &str) -> PathBuf {
    let path = fixture("data/onnx").join(rel);
    assert!(
        path.exists(),
        "{} is missing: run `bash fixtures/fetch-onnx-testdata.sh` first (the README's test command does)",
        path.display()
    );
    path
}

/// Sorted entries of a folder matching a predicate.
pub fn list(dir: &Path, keep: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| keep(p))
        .collect();
    entries.sort();
    entries
}

/// The `lms` binary built beside this executable (target/<profile>/lms: next to a binary
/// such as `lms-fuzz`, or one folder above a test in target/<profile>/deps/), or the one
/// `LMS_BIN` names (for test binaries carried to another machine).
pub fn lms_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("LMS_BIN") {
        return PathBuf::from(bin);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let name = format!("lms{}", std::env::consts::EXE_SUFFIX);
    let here = exe.parent().expect("the executable's folder");
    let bin = [Some(here), here.parent()]
        .into_iter()
        .flatten()
        .map(|dir| dir.join(&name))
        .find(|bin| bin.is_file())
        .unwrap_or_else(|| here.join(&name));
    assert!(
        bin.exists(),
        "{} is missing: build it first: `cargo build --release --workspace` (the README's test command does)",
        bin.display()
    );
    bin
}

/// The path `name` in this test process's scratch folder `lms-<suite>-<pid>` of the temp dir
/// (created if needed).
pub fn scratch_path(suite: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lms-{suite}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// The device files a test run must leave alone, with their (major, minor) numbers on
/// Linux: a test that wrote over one (as root, a rename replaces the device) breaks the
/// machine for every later program.
pub const DEVICES: [(&str, (u32, u32)); 4] =
    [("/dev/null", (1, 3)), ("/dev/zero", (1, 5)), ("/dev/full", (1, 7)), ("/dev/urandom", (1, 9))];

/// Asserts that each of [`DEVICES`] is still a character device with its numbers, reading
/// only their metadata (never following a link, never opening them). `when` says which
/// check this is (e.g. "after the CLI fuzz run").
#[cfg(target_os = "linux")]
pub fn assert_devices_intact(when: &str) {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    for (path, numbers) in DEVICES {
        let meta = std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{when}: {path}: {e}"));
        let kind = meta.file_type();
        let found = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
        assert!(
            kind.is_char_device() && found == numbers,
            "{when}: {path} is no longer the character device {numbers:?} ({kind:?}, {found:?}): a test wrote over it"
        );
    }
}

/// Runs `lms` with `args`, asserts that it succeeded, and returns its standard output.
pub fn lms_ok(args: &[&str]) -> String {
    let out = lms(args);
    assert!(out.status.success(), "lms {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// Runs `lms` with arguments from the repository root.
pub fn lms(args: &[&str]) -> Output {
    Command::new(lms_bin()).args(args).current_dir(repo_root()).output().expect("run lms")
}

/// Builds small ONNX models in tests: float initializers with seeded values,
/// data inputs, nodes and outputs.
pub mod onnx_builder {
    use lms_compiler::ir::{DType, TensorType};
    use lms_proto::onnx::{self as onnx, attribute_proto::AttributeType};

    /// An ONNX attribute value for [`ModelBuilder::node`].
    pub enum A {
        I(i64),
        F(f32),
        Is(Vec<i64>),
        S(&'static str),
    }

    /// A model under construction.
    pub struct ModelBuilder {
        graph: onnx::GraphProto,
        opset: i64,
        seed: u64,
    }

    impl ModelBuilder {
        /// An empty model importing `opset` of the default domain.
        pub fn new(name: &str, opset: i64) -> ModelBuilder {
            ModelBuilder { graph: onnx::GraphProto { name: name.into(), ..Default::default() }, opset, seed: 0x5eed }
        }

        fn uniform(&mut self) -> f32 {
            self.seed = self.seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((self.seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        }

        /// A float initializer with values uniform in [lo, hi).
        pub fn weight(&mut self, name: &str, dims: &[i64], lo: f32, hi: f32) -> &mut Self {
            let n: i64 = dims.iter().product();
            let data = (0..n).map(|_| lo + (self.uniform() + 1.0) / 2.0 * (hi - lo)).collect();
            self.graph.initializer.push(onnx::TensorProto {
                name: name.into(),
                dims: dims.to_vec(),
                data_type: 1,
                float_data: data,
                ..Default::default()
            });
            self
        }

        /// A float tensor `name` that training treats as a trained weight even
        /// in a model with no other data input: `name = name.w + d·0` for a
        /// data input `d`, where `name.w` is an initializer with values uniform
        /// in [lo, hi). (Weights count as parameters only when read by an op
        /// that depends on data.)
        pub fn trained(&mut self, name: &str, dims: &[i64], lo: f32, hi: f32) -> &mut Self {
            let (w, d, zero, dz) =
                (format!("{name}.w"), format!("{name}.d"), format!("{name}.zero"), format!("{name}.dz"));
            self.weight(&w, dims, lo, hi).input(&d, 1, dims);
            self.graph.initializer.push(onnx::TensorProto {
                name: zero.clone(),
                dims: vec![],
                data_type: 1,
                float_data: vec![0.0],
                ..Default::default()
            });
            self.node("Mul", &[&d, &zero], &[&dz], vec![]).node("Add", &[&w, &dz], &[name], vec![])
        }

        /// An int64 initializer (shapes, axes, indices).
        pub fn ints(&mut self, name: &str, dims: &[i64], values: &[i64]) -> &mut Self {
            self.graph.initializer.push(onnx::TensorProto {
                name: name.into(),
                dims: dims.to_vec(),
                data_type: 7,
                int64_data: values.to_vec(),
                ..Default::default()
            });
            self
        }

        /// A data input of element type `elem_type` (1 = f32, 7 = i64).
        pub fn input(&mut self, name: &str, elem_type: i32, dims: &[i64]) -> &mut Self {
            self.graph.input.push(value_info(name, elem_type, dims));
            self
        }

        /// A node with one or more outputs.
        pub fn node(&mut self, op: &str, inputs: &[&str], outputs: &[&str], attrs: Vec<(&str, A)>) -> &mut Self {
            let attribute = attrs
                .into_iter()
                .map(|(name, a)| {
                    let mut p = onnx::AttributeProto { name: name.into(), ..Default::default() };
                    match a {
                        A::I(v) => (p.i, p.r#type) = (v, AttributeType::Int as i32),
                        A::F(v) => (p.f, p.r#type) = (v, AttributeType::Float as i32),
                        A::Is(v) => (p.ints, p.r#type) = (v, AttributeType::Ints as i32),
                        A::S(v) => (p.s, p.r#type) = (v.as_bytes().to_vec(), AttributeType::String as i32),
                    }
                    p
                })
                .collect();
            self.graph.node.push(onnx::NodeProto {
                op_type: op.into(),
                name: outputs[0].into(),
                input: inputs.iter().map(|s| s.to_string()).collect(),
                output: outputs.iter().map(|s| s.to_string()).collect(),
                attribute,
                ..Default::default()
            });
            self
        }

        /// Declares a graph output (its type is inferred by lms).
        pub fn output(&mut self, name: &str) -> &mut Self {
            self.graph.output.push(onnx::ValueInfoProto { name: name.into(), ..Default::default() });
            self
        }

        /// The finished model.
        pub fn build(&self) -> onnx::ModelProto {
            onnx::ModelProto {
                ir_version: 8,
                opset_import: vec![onnx::OperatorSetIdProto { domain: String::new(), version: self.opset }],
                graph: Some(self.graph.clone()),
                ..Default::default()
            }
        }
    }

    fn value_info(name: &str, elem_type: i32, dims: &[i64]) -> onnx::ValueInfoProto {
        let dtype = DType::from_code(elem_type).expect("a data type lms knows");
        let shape = dims.iter().map(|&d| d as usize).collect();
        lms_compiler::emit::onnx::value_info(name, &TensorType::new(dtype, shape))
    }
}

/// Compiling models and running them on the CPU runtime in tests.
pub mod training {
    use lms_compiler::emit::serialize;
    use lms_compiler::frontend::{self, FrontendOptions};
    use lms_compiler::ir::Graph;
    use lms_compiler::passes::tflms::{CtrldStrategy, TflmsConfig};
    use lms_compiler::train::{self, Loss, Optimizer, TrainOptions};
    use lms_proto::contract::{placement, Pool};
    use lms_proto::onnx::ModelProto;
    use lms_runtime::{CpuBackend, HostTensor, Program, RunOptions, RuntimeError, Session};
    use std::collections::BTreeMap;
    use std::path::Path;

    /// The training graph of an ONNX model, serialized.
    pub fn compile(model: &ModelProto, batch: Option<usize>, options: &TrainOptions) -> lms_proto::lms::Graph {
        let forward = frontend::import(model, None, &FrontendOptions { batch, ..Default::default() })
            .unwrap_or_else(|e| panic!("{e}"));
        serialized(&train::build(&forward.graph, options).unwrap_or_else(|e| panic!("{e}")))
    }

    /// The training graph of the ONNX model at `path` at batch `batch`: softmax cross-entropy,
    /// SGD at learning rate 0.01, every weight trained.
    pub fn sgd_graph(path: &Path, batch: usize) -> Graph {
        let model = frontend::load(path, &FrontendOptions { batch: Some(batch), ..Default::default() })
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let options = TrainOptions {
            loss: Loss::SoftmaxCrossEntropy,
            optimizer: Optimizer::Sgd { lr: 0.01 },
            trainable: vec![],
            frozen: vec![],
            running_variance: None,
        };
        train::build(&model.graph, &options).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// The TFLMS settings that change the shape of a rewrite, by name: the defaults,
    /// direct-order control ops, fused swap-ins (the default fusing distance, lb = 1, fuses
    /// nothing in the small fixtures) and swapped branches.
    pub fn tflms_knobs() -> Vec<(&'static str, TflmsConfig)> {
        vec![
            ("defaults", TflmsConfig::default()),
            ("direct_order", TflmsConfig { ctrld_strategy: CtrldStrategy::DirectOrder, ..TflmsConfig::default() }),
            ("fuse_swapins", TflmsConfig { fuse_swapins: true, fuse_threshold: Some(30), ..TflmsConfig::default() }),
            ("swap_branches", TflmsConfig { swap_branches: true, branch_threshold: 3, ..TflmsConfig::default() }),
        ]
    }

    /// A graph in its serialized form (default schedule).
    pub fn serialized(g: &Graph) -> lms_proto::lms::Graph {
        serialize::to_proto(g, &[]).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A CPU session on a serialized graph, with some starting values given.
    pub fn session(
        graph: &lms_proto::lms::Graph,
        seed: u64,
        values: &BTreeMap<String, HostTensor>,
    ) -> Session<CpuBackend> {
        let program = Program::new(graph.clone(), "test.lms").unwrap_or_else(|e| panic!("{e}"));
        let options = RunOptions { seed, ..RunOptions::default() };
        Session::with_values(program, CpuBackend::new(), options, values).unwrap_or_else(|e| panic!("{e}"))
    }

    /// A CPU session on graph `g` (serialized) whose device memory holds at most
    /// `device_memory` bytes; the run's seed is 5. A device arena over the limit is
    /// refused ([`RuntimeError::OutOfMemory`]).
    pub fn budgeted_session(g: &Graph, device_memory: u64) -> Result<Session<CpuBackend>, RuntimeError> {
        let program = Program::new(serialized(g), "test.lms").unwrap_or_else(|e| panic!("{e}"));
        Session::new(program, CpuBackend::new(), RunOptions { device_memory, seed: 5, ..RunOptions::default() })
    }

    /// The device and host arenas of `g`'s static placement, in bytes.
    pub fn arenas(g: &Graph) -> (u64, u64) {
        let program = Program::new(serialized(g), "test.lms").unwrap_or_else(|e| panic!("{e}"));
        let arena = |pool| placement::of_program(&program, pool).arena_bytes;
        (arena(Pool::Device), arena(Pool::Host))
    }

    /// Three steps of `g` inside device and host arenas of exactly its placement's sizes:
    /// the losses and final variables as bits, and the device and host peaks the runtime
    /// measured. Every step uses the whole of both arenas.
    pub fn train_bits(g: &Graph) -> (Vec<u32>, BTreeMap<String, Vec<u8>>, u64, u64) {
        let (device_memory, host_memory) = arenas(g);
        let program = Program::new(serialized(g), "test.lms").unwrap_or_else(|e| panic!("{e}"));
        let options = RunOptions { device_memory, host_memory, seed: 5 };
        let mut s = Session::new(program, CpuBackend::new(), options).unwrap_or_else(|e| panic!("{e}"));
        let mut losses = Vec::new();
        let (mut device, mut host) = (0, 0);
        for _ in 0..3 {
            let step = s.step().unwrap_or_else(|e| panic!("{e}"));
            losses.push(step.loss.expect("a training graph has a loss").to_bits());
            device = device.max(step.report.peak_device_bytes);
            host = host.max(step.report.peak_host_bytes);
            let used = (step.report.arena_device_bytes, step.report.arena_host_bytes);
            assert_eq!(used, (device_memory, host_memory), "the arenas a step used vs the placement's");
        }
        let vars =
            s.variables().unwrap_or_else(|e| panic!("{e}")).into_iter().map(|(n, t)| (n, t.to_le_bytes())).collect();
        (losses, vars, device, host)
    }

    /// Names of the variables that optimizer op `op` (e.g. `SgdUpdate`) writes.
    pub fn updated_variables(graph: &lms_proto::lms::Graph, op: &str) -> Vec<String> {
        let mut names: Vec<String> = graph
            .edges
            .iter()
            .filter(|e| e.action == lms_proto::lms::Action::Update as i32 && graph.nodes[e.producer as usize].op == op)
            .map(|e| graph.nodes[e.consumer as usize].name.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    }
}

#[cfg(test)]
mod tests {
    /// The first test binary of this package to run (cargo runs a package's unit tests
    /// before its integration tests): the devices are intact before any of them.
    #[cfg(target_os = "linux")]
    #[test]
    fn devices_are_intact_before_the_integration_tests() {
        super::assert_devices_intact("before the integration tests");
    }
}
