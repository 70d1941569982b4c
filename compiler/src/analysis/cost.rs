//! Time of one op on a device: the op family's work (FLOPs, bytes; see
//! `shape::cost`) over a [`DeviceProfile`], by a roofline plus a per-launch
//! latency, or the measured time when the profile has one for the op and
//! its shapes.
//!
//! - Convolutions and matrix products ([`Engine::Matrix`]): the larger of
//!   FLOPs / the matrix peak (the precision the runtime computes them in) and
//!   bytes / memory bandwidth.
//! - Every other kernel ([`Engine::Vector`]): the larger of FLOPs / the FP32
//!   peak and bytes / memory bandwidth (elementwise and normalisation ops are
//!   bound by the bandwidth).
//! - Swap-outs and swap-ins: the tensor's bytes / the host link's bandwidth
//!   in that direction, plus the launch latency (a copy's fixed time) and
//!   nothing else: a swap reads no inputs out of the arena and writes no
//!   outputs into it as a kernel does, so the per-tensor and per-node times
//!   of a measured profile are not charged to it.
//! - Views and parameterized vertices (variables, inputs): no time.
//!
//! A profile measured by `lms profile` replaces the roofline with its
//! measured rates per kernel class and size ([`CostModel::seconds_as`]), a
//! transcendental kernel by the function evaluations it makes per element
//! (`shape::transcendental_evaluations`), costs a view as the copy
//! lms's backends make of it ([`CostModel::backend_work`]), and adds a time
//! per input and output of every kernel and view, and a time per scheduled
//! node that a step pays beyond that (swaps excepted). Where the
//! profile says the backend lowers convolutions to a matrix product per
//! image (`conv_by_image`), convolutions and matrix products are costed by
//! the shapes of their products ([`super::gemm`]).

use super::gemm::{self, Gemms};

use super::profile::{op_key, DeviceProfile};
use crate::ir::{Graph, NodeId};
use crate::shape::cost::{CostNode, Engine, KernelClass, Work};
use crate::shape::{self};

/// Work and predicted time of one op.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpCost {
    pub flops: u64,
    /// Bytes read plus bytes written.
    pub bytes: u64,
    pub seconds: f64,
    pub engine: Engine,
}

impl OpCost {
    /// Nothing to run.
    pub const NONE: OpCost = OpCost { flops: 0, bytes: 0, seconds: 0.0, engine: Engine::View };
}

/// Turns work into time with one device profile.
#[derive(Clone, Copy, Debug)]
pub struct CostModel<'p> {
    profile: &'p DeviceProfile,
}

impl<'p> CostModel<'p> {
    /// A cost model over `profile`.
    pub fn new(profile: &'p DeviceProfile) -> CostModel<'p> {
        CostModel { profile }
    }

    /// The profile the model uses.
    pub fn profile(&self) -> &'p DeviceProfile {
        self.profile
    }

    /// The work of node `id` of `g` and its time on the profile's device.
    pub fn cost(&self, g: &Graph, id: NodeId) -> OpCost {
        let work = self.backend_work(g, id);
        let measured = (!self.profile.op_seconds.is_empty())
            .then(|| self.profile.op_seconds.get(&op_key(g, id)).copied())
            .flatten();
        OpCost {
            flops: work.flops,
            bytes: work.bytes_read + work.bytes_written,
            seconds: measured.unwrap_or_else(|| {
                let node = g.node(id);
                let images = node.inputs.first().copied().flatten().and_then(|t| g.tensor(t).ty.shape.first().copied());
                let tensors = node.inputs.iter().flatten().count() + node.outputs.len();
                let copy = matches!(work.engine, Engine::DeviceToHost | Engine::HostToDevice);
                let per_tensor = if work.engine == Engine::View || copy { 0.0 } else { self.profile.tensor_seconds };
                let lowered = match (work.engine, &self.profile.kernel_rates) {
                    (Engine::Matrix, Some(rates)) if rates.conv_by_image => gemm::of(g, id),
                    _ => None,
                };
                let body = match lowered {
                    Some(gemms) => self.gemm_seconds(&gemms, &work),
                    None => {
                        let class = shape::kernel_class(&node.op, &node.attrs, work.engine);
                        let measured = match (class, &self.profile.kernel_rates) {
                            (KernelClass::Transcendental, Some(_)) => transcendental_work(g, id, &work),
                            _ => work,
                        };
                        self.seconds_as(class, &measured, images.unwrap_or(1) as u64)
                    }
                };
                let per_node = if node.parameterized || copy { 0.0 } else { self.profile.node_seconds };
                body + per_tensor * tensors as f64 + per_node
            }),
            engine: work.engine,
        }
    }

    /// The work of node `id` as the profile's backend runs it. With measured
    /// kernel rates (a profile of lms's own backends, which write a view's
    /// output as a copy of its input) a view that is not a parameterized
    /// vertex reads its inputs and writes its outputs as an elementwise copy;
    /// else its op's rule ([`work`]).
    pub fn backend_work(&self, g: &Graph, id: NodeId) -> Work {
        let work = work(g, id);
        let node = g.node(id);
        if work.engine != Engine::View || node.parameterized || self.profile.kernel_rates.is_none() {
            return work;
        }
        let bytes = |t: &crate::ir::TensorId| g.tensor(*t).ty.bytes();
        Work {
            flops: 0,
            bytes_read: node.inputs.iter().flatten().map(bytes).sum(),
            bytes_written: node.outputs.iter().map(bytes).sum(),
            engine: Engine::Vector,
        }
    }

    /// The cost of every node of `g`, indexed by `NodeId::index()` (removed
    /// ids get [`OpCost::NONE`]). A planner that changes a few nodes can
    /// recompute only theirs and rerun the timeline on the table.
    pub fn costs(&self, g: &Graph) -> Vec<OpCost> {
        let mut table = vec![OpCost::NONE; g.node_bound()];
        for id in g.node_ids() {
            table[id.index()] = self.cost(g, id);
        }
        table
    }

    /// Time of a matrix op lowered to `gemms` (with measured kernel rates):
    /// the products at the matrix-product rate of their shape class, or
    /// the time streaming the op's bytes from memory adds if that is longer,
    /// plus the lowering's bytes at the elementwise rate of one product's
    /// share (the column buffer is reused, so it stays in cache), plus the
    /// launch latency. Streaming's time is the op's bytes at the elementwise
    /// rate of their size less their time at the best elementwise rate:
    /// the measured elementwise kernels compute on every element, so their
    /// rate where the bytes fit in cache is their arithmetic's, not the
    /// memory's, and only its fall with size is the memory's (the products
    /// of a small model's layers run from cache in less time than those
    /// bytes take an elementwise kernel).
    pub fn gemm_seconds(&self, gemms: &Gemms, work: &Work) -> f64 {
        let p = self.profile;
        let Some(rates) = &p.kernel_rates else { return self.seconds_as(KernelClass::MatMul, work, 1) };
        let elementwise = |bytes: f64| bytes / rates.rate(KernelClass::Elementwise, bytes.max(1.0));
        let products = gemms.flops() / rates.rate(KernelClass::MatMul, gemms.rate_size().max(1.0));
        let bytes = (work.bytes_read + work.bytes_written) as f64;
        let streaming = (elementwise(bytes) - bytes / rates.best(KernelClass::Elementwise)).max(0.0);
        let per_product = gemms.lowering_bytes as f64 / gemms.count.max(1) as f64;
        let lowering = gemms.lowering_bytes as f64 / rates.rate(KernelClass::Elementwise, per_product.max(1.0));
        products.max(streaming) + lowering + p.launch_seconds
    }

    /// Roofline time of `work`, plus the launch latency for anything that
    /// runs a kernel or a copy.
    pub fn seconds(&self, work: &Work) -> f64 {
        self.seconds_as(KernelClass::Elementwise, work, 1)
    }

    /// [`CostModel::seconds`] of a kernel of `class` over `images` images
    /// (the leading dimension of a convolution's input): with measured
    /// kernel rates, a matrix op takes the longer of its FLOPs at the rate
    /// for its size (per image where the profile says convolutions run
    /// image by image) and its bytes at the elementwise rate, any other
    /// kernel its bytes at its class's rate; without, the roofline.
    pub fn seconds_as(&self, class: KernelClass, work: &Work, images: u64) -> f64 {
        let p = self.profile;
        let bytes = (work.bytes_read + work.bytes_written) as f64;
        let flops = work.flops as f64;
        let body = match (work.engine, &p.kernel_rates) {
            (Engine::View, _) => return 0.0,
            (Engine::Matrix, Some(rates)) => {
                let per = if class == KernelClass::Conv && rates.conv_by_image { images.max(1) as f64 } else { 1.0 };
                let streaming = bytes / rates.rate(KernelClass::Elementwise, bytes.max(1.0));
                (flops / rates.rate(class, (flops / per).max(1.0))).max(streaming)
            }
            (Engine::Vector, Some(rates)) => bytes / rates.rate(class, bytes.max(1.0)),
            (Engine::Matrix, None) => (flops / p.matrix_flops()).max(bytes / p.memory_bytes_per_second),
            (Engine::Vector, None) => (flops / p.peak_flops.fp32).max(bytes / p.memory_bytes_per_second),
            (Engine::DeviceToHost, _) => work.bytes_read as f64 / p.device_to_host_bytes_per_second,
            (Engine::HostToDevice, _) => work.bytes_read as f64 / p.host_to_device_bytes_per_second,
        };
        body + p.launch_seconds
    }
}

/// A transcendental kernel's work in the unit its measured rate is in: the
/// bytes of an f32 read and an f32 written per function evaluation
/// (`shape::transcendental_evaluations` per element of the larger of its
/// first input and first output), so that a softmax, which evaluates the
/// exponential twice per element, takes twice an `Erf`'s time, and a loss,
/// whose output is one number, is costed by its logits.
fn transcendental_work(g: &Graph, id: NodeId, work: &Work) -> Work {
    let node = g.node(id);
    let numel = |t: Option<crate::ir::TensorId>| t.map_or(0, |t| g.tensor(t).ty.numel() as u64);
    let elements = numel(node.inputs.first().copied().flatten()).max(numel(node.outputs.first().copied()));
    let bytes = 4 * elements * shape::transcendental_evaluations(&node.op, &node.attrs);
    Work { bytes_read: bytes, bytes_written: bytes, ..*work }
}

/// The work of node `id`: its op family's rule over its tensors' types.
/// Parameterized vertices run nothing; an op without a rule is costed as a
/// copy of its inputs into its outputs.
pub fn work(g: &Graph, id: NodeId) -> Work {
    let node = g.node(id);
    if node.parameterized {
        return Work { flops: 0, bytes_read: 0, bytes_written: 0, engine: Engine::View };
    }
    let inputs: Vec<Option<&crate::ir::TensorType>> = node.inputs.iter().map(|t| t.map(|t| &g.tensor(t).ty)).collect();
    let outputs: Vec<&crate::ir::TensorType> = node.outputs.iter().map(|&t| &g.tensor(t).ty).collect();
    let cost_node = CostNode { op: &node.op, attrs: &node.attrs, inputs: &inputs, outputs: &outputs };
    shape::work(&cost_node).unwrap_or_else(|| cost_node.streaming(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::profile::{KernelRates, DEFAULT_PROFILE};

    #[test]
    fn roofline_picks_the_bound_and_adds_the_launch() {
        let p = DeviceProfile::load(DEFAULT_PROFILE).unwrap();
        let m = CostModel::new(&p);
        let launch = p.launch_seconds;
        // 67 GFLOP on the FP32 peak of 67 TFLOP/s: 1 ms; its 1 MB is negligible.
        let gemm = Work { flops: 67_000_000_000, bytes_read: 1_000_000, bytes_written: 0, engine: Engine::Matrix };
        assert!((m.seconds(&gemm) - (1e-3 + launch)).abs() < 1e-12);
        // 3.35 GB at 3.35 TB/s: 1 ms, whatever the FLOPs.
        let relu = Work { flops: 1, bytes_read: 1_675_000_000, bytes_written: 1_675_000_000, engine: Engine::Vector };
        assert!((m.seconds(&relu) - (1e-3 + launch)).abs() < 1e-12);
        // A swap-in of 52 MB at 52 GB/s: 1 ms (only the bytes read cross the link).
        let swap = Work { flops: 0, bytes_read: 52_000_000, bytes_written: 52_000_000, engine: Engine::HostToDevice };
        assert!((m.seconds(&swap) - (1e-3 + launch)).abs() < 1e-12);
        let view = Work { flops: 0, bytes_read: 0, bytes_written: 0, engine: Engine::View };
        assert_eq!(m.seconds(&view), 0.0);
    }

    #[test]
    fn lowered_products_stream_only_what_memory_adds() {
        let mut p = DeviceProfile::load("cpu").unwrap();
        p.kernel_rates = Some(KernelRates {
            matmul: vec![[1e3, 1e10]],
            conv: vec![[1e3, 1e10]],
            conv_by_image: true,
            elementwise: vec![[1e4, 8e9], [1e6, 8e9], [1e8, 2e9]],
            reduction: vec![[1e3, 1e9]],
            transcendental: vec![],
        });
        let m = CostModel::new(&p);
        let launch = p.launch_seconds;
        // 8×64×128 products: 131,072 FLOPs at 10 GFLOP/s, 13.1 µs; their 40 KB fit in cache.
        let gemms = Gemms { count: 1, m: 8, k: 64, n: 128, lowering_bytes: 0 };
        let small = Work { flops: 131_072, bytes_read: 36_864, bytes_written: 4_096, engine: Engine::Matrix };
        assert!((m.gemm_seconds(&gemms, &small) - (13.1072e-6 + launch)).abs() < 1e-12);
        // The same products over 1e8 bytes: 50 ms at 2 GB/s, of which 12.5 ms at the best
        // rate is the elementwise kernels' arithmetic: 37.5 ms.
        let large = Work { bytes_read: 99_000_000, bytes_written: 1_000_000, ..small };
        assert!((m.gemm_seconds(&gemms, &large) - (37.5e-3 + launch)).abs() < 1e-9);
    }

    #[test]
    fn measured_kernel_rates_replace_the_roofline_by_class() {
        let mut p = DeviceProfile::load("cpu").unwrap();
        p.format_version = 2;
        p.kernel_rates = Some(KernelRates {
            matmul: vec![[1e6, 1e10]],
            conv: vec![[1e5, 1e8], [1e6, 1e9]],
            conv_by_image: true,
            elementwise: vec![[1e3, 1e9]],
            reduction: vec![[1e3, 1e8]],
            transcendental: vec![],
        });
        let m = CostModel::new(&p);
        let launch = p.launch_seconds;
        let matrix = Work { flops: 1_000_000, bytes_read: 8, bytes_written: 8, engine: Engine::Matrix };
        assert!((m.seconds_as(KernelClass::MatMul, &matrix, 1) - (1e-4 + launch)).abs() < 1e-12);
        assert!((m.seconds_as(KernelClass::Conv, &matrix, 1) - (1e-3 + launch)).abs() < 1e-12);
        // Ten images of 1e5 FLOPs each run at the rate of 1e5 FLOPs.
        assert!((m.seconds_as(KernelClass::Conv, &matrix, 10) - (1e-2 + launch)).abs() < 1e-12);
        // A product that streams 1e8 bytes takes their time at the elementwise rate.
        let skinny = Work { bytes_read: 100_000_000, ..matrix };
        assert!((m.seconds_as(KernelClass::MatMul, &skinny, 1) - (0.1 + launch)).abs() < 1e-7);
        let vector = Work { flops: 1_000_000, bytes_read: 500, bytes_written: 500, engine: Engine::Vector };
        assert!((m.seconds_as(KernelClass::Elementwise, &vector, 1) - (1e-6 + launch)).abs() < 1e-12);
        assert!((m.seconds_as(KernelClass::Reduction, &vector, 1) - (1e-5 + launch)).abs() < 1e-12);
        let (class, none) = (shape::kernel_class, crate::ir::Attrs::new());
        let derivative = |f: &str| crate::ir::Attrs::new().with("op", crate::ir::Attr::String(f.into()));
        assert_eq!(
            (
                class("UnaryGrad", &derivative("Relu"), Engine::Vector),
                class("UnaryGrad", &derivative("Erf"), Engine::Vector)
            ),
            (KernelClass::Elementwise, KernelClass::Transcendental)
        );
        assert_eq!(class("SoftmaxGrad", &none, Engine::Vector), KernelClass::Reduction);
        assert_eq!(
            (shape::transcendental_evaluations("Softmax", &none), shape::transcendental_evaluations("Erf", &none)),
            (2, 1)
        );
        assert_eq!(
            (class("Softmax", &none, Engine::Vector), class("Add", &none, Engine::Vector)),
            (KernelClass::Transcendental, KernelClass::Elementwise)
        );
        assert_eq!(
            (class("Erf", &none, Engine::Vector), class("LayerNormalization", &none, Engine::Vector)),
            (KernelClass::Transcendental, KernelClass::Reduction)
        );
        assert_eq!(
            (class("ConvGradData", &none, Engine::Matrix), class("Gemm", &none, Engine::Matrix)),
            (KernelClass::Conv, KernelClass::MatMul)
        );
    }
}
