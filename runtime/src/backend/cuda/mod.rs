//! The CUDA backend: cuBLAS for matrix products, cuDNN for convolutions and NVRTC-compiled
//! kernels (`runtime/kernels/*.cu`) for everything else, through cudarc with dynamic
//! loading, so it builds on machines without CUDA and fails cleanly at
//! [`CudaBackend::new`] where no driver or GPU is present.
//!
//! - Memory: one `cuMemAlloc` of the plan's placed device arena (aligned) plus the fixed
//!   reserve holds every device buffer; an arena over the free memory is refused. Under a plan ([`Backend::reserve`]) one region of it holds every tensor
//!   and every node's scratch parts at their planned offsets; beside it a best-fit offset
//!   allocator ([`arena`]) holds only the backend's fixed buffers (cuBLAS's workspace,
//!   integer `Div`'s error flag) and buffers made without a plan. One page-locked
//!   allocation of the plan's host arena holds every host tensor at its planned offset,
//!   so swaps copy between planned device and host blocks; values on their way to the
//!   device and results read back are pageable memory outside both arenas.
//! - Queues: three CUDA streams (compute, device-to-host, host-to-device); events are CUDA
//!   events. A buffer freed while a queue may still use it is reused only after that
//!   queue's work on it (see [`memory`]).
//! - Numerics: f32 kernels; sums accumulate in double in a fixed order and no kernel uses
//!   floating-point atomics, so a run is deterministic. cuBLAS runs in FP32 and cuDNN is
//!   restricted to deterministic FMA algorithms unless [`CudaOptions::tf32`] is set;
//!   each convolution runs the algorithm the plan records for it, the one its geometry
//!   and direction give (`lms_proto::ops::scratch::planned_conv_algorithm`), with its workspace in the node's
//!   planned scratch block, so a memory rewrite of the graph (swap, recompute) reproduces
//!   the original's results bit for bit.
//! - Small index-like tensors made from constants (shape arithmetic) are computed on the
//!   host by the CPU backend's kernels and uploaded, so Slice starts or Reshape shapes
//!   never need a read back.

pub mod arena;
mod doctor;
mod error;
mod kernels;
mod layout;
mod libs;
pub mod loader;
mod memory;
mod ops;

pub use arena::ArenaStats;
pub use doctor::{doctor, Diagnosis};
pub use error::CudaError;
pub use kernels::SOURCES;
pub use ops::supported_ops;

use crate::attrs::Attrs;
use crate::backend::{Backend, Block, KernelContext, Queue};
use crate::error::{KernelError, RuntimeError};
use crate::tensor::{dtype_name, dtype_size, numel, HostTensor};
use cudarc::driver::{result, CudaContext};
use error::OpError;
use kernels::Kernels;
use libs::{Blas, Dnn};
use lms_proto::contract::Program;
use lms_proto::lms::DType;
use loader::CudaLibrary;
use memory::{Device, DeviceBlock, HostBlock, Mark};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::rc::Rc;
use std::sync::Arc;

/// Device memory left outside the arena for the CUDA context, kernel modules and the
/// libraries' handles.
const RESERVE: u64 = 1 << 30;
/// cuBLAS's workspace, taken from the arena (NVIDIA's recommendation for Hopper).
const CUBLAS_WORKSPACE: u64 = 32 << 20;
/// Integer `Div`'s division-by-zero flag.
const FLAG_BYTES: u64 = 4;

/// The buffers the backend allocates once, beside the plan's device arena, whatever the
/// program: (what, bytes asked for). Each takes a multiple of [`arena::ALIGNMENT`] of
/// the device arena ([`fixed_device_bytes`]).
pub const FIXED_DEVICE_BUFFERS: [(&str, u64); 2] =
    [("cuBLAS workspace", CUBLAS_WORKSPACE), ("integer Div error flag", FLAG_BYTES)];

/// The fixed device reserve: the bytes [`FIXED_DEVICE_BUFFERS`] take of the device arena.
/// A run on the CUDA backend takes the plan's device arena plus this; `lms run --device
/// cuda` and `lms doctor` report it.
pub const fn fixed_device_bytes() -> u64 {
    let mut total = 0;
    let mut i = 0;
    while i < FIXED_DEVICE_BUFFERS.len() {
        total += FIXED_DEVICE_BUFFERS[i].1.div_ceil(arena::ALIGNMENT) * arena::ALIGNMENT;
        i += 1;
    }
    total
}

/// Choices of the CUDA backend.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CudaOptions {
    /// Let cuBLAS and cuDNN use TF32 tensor cores for f32 data (faster, about 10 bits of
    /// mantissa in products). Off by default: results then match the CPU backend to f32
    /// rounding.
    pub tf32: bool,
}

/// A buffer in device memory: a block of the arena (shared by views such as Reshape),
/// its element type and shape, and its value on the host when it was computed there.
#[derive(Clone, Debug)]
pub struct CudaBuffer {
    block: Rc<DeviceBlock>,
    dtype: DType,
    shape: Vec<usize>,
    host: Option<Rc<HostTensor>>,
}

impl CudaBuffer {
    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn ptr(&self) -> u64 {
        self.block.ptr()
    }

    fn numel(&self) -> usize {
        numel(&self.shape)
    }

    fn bytes(&self) -> u64 {
        self.block.bytes()
    }

    /// The same memory seen with another shape (Reshape and friends).
    fn view(&self, shape: &[usize]) -> CudaBuffer {
        CudaBuffer {
            block: Rc::clone(&self.block),
            dtype: self.dtype,
            shape: shape.to_vec(),
            host: self.host.as_ref().and_then(|h| HostTensor::new(shape.to_vec(), h.data.clone()).ok().map(Rc::new)),
        }
    }
}

/// A buffer in host memory: a planned block of the pinned host arena, or pageable memory
/// outside the plan.
#[derive(Debug)]
pub struct CudaHostBuffer {
    block: HostBlock,
    dtype: DType,
    shape: Vec<usize>,
}

/// The device and what the ops use of it.
pub(crate) struct Gpu {
    device: Rc<Device>,
    kernels: Kernels,
    blas: Blas,
    /// cuDNN, or why it cannot be used.
    dnn: Result<Dnn, String>,
    options: CudaOptions,
    /// The 4-byte flag an integer `Div` raises on a division by zero (read back before the
    /// next node runs, so one serves every node).
    flag: Rc<DeviceBlock>,
    /// Wait for every node's work before issuing the next (`LMS_CUDA_SYNC=1`), so an
    /// asynchronous fault is blamed on the node that caused it.
    synchronous: bool,
}

/// The variable that turns on the synchronous debug mode.
pub const SYNC_VAR: &str = "LMS_CUDA_SYNC";

impl Gpu {
    /// The memory of a tensor of `bytes` for work on `queue`: its planned block when the
    /// arena holds a plan and the tensor has one, else an allocation.
    fn block(&self, planned: Option<&Block>, bytes: u64, queue: Queue) -> Result<DeviceBlock, CudaError> {
        match planned {
            Some(block) if self.device.has_plan() => self.device.planned(block.offset, bytes, queue),
            _ => self.device.alloc(bytes, queue),
        }
    }

    /// `buffer` at its planned `block`: itself when it is there (or there is no plan),
    /// else a copy into the block issued on `queue`.
    fn at_block(&self, buffer: &CudaBuffer, block: &Block, queue: Queue) -> Result<CudaBuffer, CudaError> {
        match self.device.planned_ptr(block.offset) {
            Some(ptr) if ptr != buffer.ptr() => {
                let target = self.device.planned(block.offset, buffer.bytes(), queue)?;
                if buffer.bytes() > 0 {
                    // SAFETY: both blocks are live device memory of `bytes()` bytes; the
                    // source is kept alive (fenced on `queue`) until the copy is done.
                    unsafe {
                        result::memcpy_dtod_async(
                            target.ptr(),
                            buffer.ptr(),
                            buffer.bytes() as usize,
                            self.device.stream(queue).cu_stream(),
                        )
                    }?;
                    self.device.issued(queue);
                }
                buffer.block.touch(queue);
                Ok(CudaBuffer {
                    block: Rc::new(target),
                    dtype: buffer.dtype,
                    shape: buffer.shape.clone(),
                    host: buffer.host.clone(),
                })
            }
            _ => Ok(buffer.clone()),
        }
    }
}

/// The CUDA backend.
///
/// ```no_run
/// use lms_runtime::{CudaBackend, Program, RunOptions, Session};
/// # fn main() -> Result<(), lms_runtime::RuntimeError> {
/// let program = Program::load(std::path::Path::new("model.lms"))?;
/// let options = RunOptions::default();
/// // Fails with "cuda backend: no CUDA driver found (...); use --device cpu" without a GPU.
/// let backend = CudaBackend::new(0, options.device_memory)?;
/// let mut session = Session::new(program, backend, options)?;
/// let step = session.step()?;
/// println!("loss {:?} in {:.3} s", step.loss, step.report.step_seconds);
/// # Ok(())
/// # }
/// ```
pub struct CudaBackend {
    gpu: Gpu,
    name: String,
}

/// Why there is no CUDA driver on this machine (libcuda cannot be loaded from any place
/// searched), or `None` when there is one. Tests of the GPU skip only for this reason.
pub fn driver_missing() -> Option<String> {
    loader::load(CudaLibrary::Driver)
        .err()
        .map(|missing| format!("no CUDA driver found: {}", loader::missing_line(&[Err(missing)])))
}

/// The variable that makes every skipped GPU test fail instead (set it where a GPU must be).
pub const REQUIRE_GPU_VAR: &str = "LMS_REQUIRE_GPU";

/// Whether a GPU test runs here: `Ok(true)` to run, `Ok(false)` to skip (no CUDA driver,
/// said on stdout), `Err` when the test must fail instead: no driver while
/// `LMS_REQUIRE_GPU=1`, or a driver whose GPU cannot be used.
pub fn gpu_test_gate(test: &str) -> Result<bool, String> {
    if let Some(reason) = driver_missing() {
        if std::env::var(REQUIRE_GPU_VAR).is_ok_and(|v| v == "1") {
            return Err(format!("{test}: {REQUIRE_GPU_VAR}=1 but {reason}"));
        }
        println!("skipped {test}: {}", reason.lines().next().unwrap_or_default());
        return Ok(false);
    }
    match unavailable() {
        Some(reason) => Err(format!("{test}: a CUDA driver is present but the GPU cannot be used: {reason}")),
        None => Ok(true),
    }
}

/// Why the CUDA backend cannot be created on this machine, without creating anything:
/// `None` when a driver with at least one device is present.
pub fn unavailable() -> Option<String> {
    if let Some(reason) = driver_missing() {
        return Some(reason);
    }
    match catch_unwind(CudaContext::device_count) {
        Ok(Ok(n)) if n > 0 => None,
        Ok(Ok(_)) => Some("no CUDA device found; use --device cpu".to_string()),
        Ok(Err(e)) => Some(format!("the CUDA driver failed to start: {e}; use --device cpu")),
        Err(_) => Some("the CUDA driver library is unusable (a symbol is missing); use --device cpu".to_string()),
    }
}

/// An error of the CUDA backend.
fn backend_error(message: impl Into<String>) -> RuntimeError {
    RuntimeError::Backend { backend: "cuda".to_string(), message: message.into() }
}

impl CudaBackend {
    /// The backend on GPU `ordinal` whose one device allocation holds a plan's device arena
    /// of `device_memory` bytes (aligned) plus the fixed reserve (`u64::MAX`: all the free
    /// memory but a reserve), f32 arithmetic throughout. An arena over the free memory is
    /// refused ([`RuntimeError::Allocation`]).
    ///
    /// Fails with a clear message, never a panic, where there is no driver, no such GPU,
    /// or no NVRTC or cuBLAS library; a missing cuDNN only makes convolutions fail.
    pub fn new(ordinal: usize, device_memory: u64) -> Result<CudaBackend, RuntimeError> {
        CudaBackend::with_options(ordinal, device_memory, CudaOptions::default())
    }

    /// [`CudaBackend::new`] with explicit options.
    pub fn with_options(ordinal: usize, device_memory: u64, options: CudaOptions) -> Result<CudaBackend, RuntimeError> {
        if let Some(reason) = unavailable() {
            return Err(backend_error(reason));
        }
        loader::require(&[CudaLibrary::Driver, CudaLibrary::Nvrtc, CudaLibrary::Cublas]).map_err(backend_error)?;
        // Dynamic loading panics on a library without an expected symbol; that is an
        // error here, not a crash.
        catch_unwind(AssertUnwindSafe(|| CudaBackend::create(ordinal, device_memory, options))).unwrap_or_else(|_| {
            Err(backend_error(
                "a CUDA library lacks a function this build expects (CUDA 13 and cuDNN 9 are); use --device cpu",
            ))
        })
    }

    fn create(ordinal: usize, device_memory: u64, options: CudaOptions) -> Result<CudaBackend, RuntimeError> {
        let ctx =
            CudaContext::new(ordinal).map_err(|e| backend_error(format!("cannot open CUDA device {ordinal}: {e}")))?;
        // SAFETY: the backend orders all work with its own events; cudarc's automatic
        // per-buffer events would only add synchronization.
        unsafe { ctx.disable_event_tracking() };
        let name = ctx.name().map_err(CudaError::from)?;
        let (major, minor) = ctx.compute_capability().map_err(CudaError::from)?;
        kernels::check_toolchain(major, minor, driver_version()?)?;
        let (free, _) = ctx.mem_get_info().map_err(CudaError::from)?;
        let arena = arena_bytes(device_memory, free as u64)?;
        let device = Device::new(Arc::clone(&ctx), arena)?;
        let kernels = Kernels::load(&ctx)?;
        // The fixed buffers, in FIXED_DEVICE_BUFFERS's order.
        let workspace = device.alloc(CUBLAS_WORKSPACE, Queue::Compute)?;
        let flag = Rc::new(device.alloc(FLAG_BYTES, Queue::Compute)?);
        let blas = Blas::new(device.stream(Queue::Compute), workspace, options.tf32)?;
        let dnn = Dnn::new(device.stream(Queue::Compute));
        let synchronous = std::env::var(SYNC_VAR).is_ok_and(|v| v == "1");
        Ok(CudaBackend { gpu: Gpu { device, kernels, blas, dnn, options, flag, synchronous }, name })
    }

    /// The GPU's name, e.g. `NVIDIA H100 80GB HBM3`.
    pub fn device_name(&self) -> &str {
        &self.name
    }

    /// How full and fragmented the device arena is now.
    pub fn arena_stats(&self) -> ArenaStats {
        self.gpu.device.arena_stats()
    }

    /// The pinned host memory allocated: the plan's host arena ([`Backend::reserve`]).
    pub fn pinned_host_bytes(&self) -> u64 {
        self.gpu.device.host_pinned()
    }

    /// Why cuDNN cannot be used, when it cannot (convolutions then fail).
    pub fn cudnn_unavailable(&self) -> Option<&str> {
        self.gpu.dnn.as_ref().err().map(String::as_str)
    }
}

/// The CUDA version of the driver, e.g. 13000 for 13.0.
pub fn driver_version() -> Result<i32, CudaError> {
    let mut version = 0;
    // SAFETY: a plain out-parameter; the driver library is loaded.
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut version) }.result()?;
    Ok(version)
}

/// The device arena for a plan's device arena of `plan` bytes with `free` bytes free on the
/// device: `plan` rounded up to the allocator's alignment plus the fixed reserve
/// (`u64::MAX`: all the free memory less [`RESERVE`]). An arena over the free memory less
/// [`RESERVE`] is refused, naming both figures.
fn arena_bytes(plan: u64, free: u64) -> Result<u64, RuntimeError> {
    let available = free.saturating_sub(RESERVE);
    if plan == u64::MAX {
        return Ok(available);
    }
    let arena =
        plan.checked_next_multiple_of(arena::ALIGNMENT).unwrap_or(u64::MAX).saturating_add(fixed_device_bytes());
    match arena <= available {
        true => Ok(arena),
        false => Err(RuntimeError::Allocation {
            what: format!(
                "the device arena (the plan's {plan} B with the fixed reserve: {arena} B; the device has {available} B free beside its reserve)"
            ),
            bytes: arena,
        }),
    }
}

impl Backend for CudaBackend {
    type DeviceBuffer = CudaBuffer;
    type HostBuffer = CudaHostBuffer;
    type Event = Mark;
    type Stamp = cudarc::driver::CudaEvent;

    fn name(&self) -> &'static str {
        "cuda"
    }

    /// The fixed device reserve ([`fixed_device_bytes`]).
    fn fixed_device_bytes(&self) -> u64 {
        fixed_device_bytes()
    }

    /// Sets aside the plan's device arena inside the arena made for the budget
    /// ([`CudaBackend::new`]), where every tensor and node scratch block is then made at its
    /// planned offset, and allocates the pinned host arena of `host_bytes`, where every
    /// host tensor is.
    fn reserve(&mut self, device_bytes: u64, host_bytes: u64) -> Result<(), RuntimeError> {
        self.gpu.device.plan(device_bytes)?;
        Ok(self.gpu.device.plan_host(host_bytes)?)
    }

    fn host_buffer(&mut self, tensor: HostTensor, block: Option<Block>) -> Result<CudaHostBuffer, RuntimeError> {
        self.gpu.device.take_deferred()?;
        let bytes = tensor.to_le_bytes();
        if dtype_size(tensor.dtype()).is_none() {
            return Err(backend_error(format!("dtype {} has no host buffer", dtype_name(tensor.dtype()))));
        }
        let mut block = match block {
            Some(block) => self.gpu.device.host_planned(block.offset, bytes.len() as u64, None)?,
            None => self.gpu.device.host_pageable(bytes.len() as u64)?,
        };
        block.bytes_mut()?.copy_from_slice(&bytes);
        Ok(CudaHostBuffer { block, dtype: tensor.dtype(), shape: tensor.shape })
    }

    fn read_host(&self, buffer: &CudaHostBuffer) -> Result<HostTensor, RuntimeError> {
        HostTensor::from_le_bytes(buffer.dtype, &buffer.shape, buffer.block.bytes()?)
            .map_err(|e| backend_error(format!("reading a host buffer: {e}")))
    }

    fn upload(&mut self, src: &CudaHostBuffer, block: Block) -> Result<CudaBuffer, RuntimeError> {
        let device = &self.gpu.device;
        device.take_deferred()?;
        let block = self.gpu.block(Some(&block), src.block.size() as u64, Queue::HostToDevice)?;
        if src.block.size() > 0 {
            let stream = device.stream(Queue::HostToDevice);
            // SAFETY: the destination block holds the source's bytes; a planned source's
            // bytes are fenced when it is dropped, a pageable one is staged by the call.
            unsafe { result::memcpy_htod_async(block.ptr(), src.block.bytes()?, stream.cu_stream()) }
                .map_err(CudaError::from)?;
            device.issued(Queue::HostToDevice);
        }
        src.block.touch(Queue::HostToDevice);
        Ok(CudaBuffer { block: Rc::new(block), dtype: src.dtype, shape: src.shape.clone(), host: None })
    }

    fn download(&mut self, src: &CudaBuffer, block: Option<Block>) -> Result<CudaHostBuffer, RuntimeError> {
        let device = &self.gpu.device;
        device.take_deferred()?;
        let mut block = match block {
            Some(block) => device.host_planned(block.offset, src.bytes(), Some(Queue::DeviceToHost))?,
            None => device.host_pageable(src.bytes())?,
        };
        if src.bytes() > 0 {
            let stream = device.stream(Queue::DeviceToHost);
            // SAFETY: the destination holds the source's bytes: a planned one's bytes are
            // fenced when it is dropped, a pageable one is complete when the call returns.
            unsafe { result::memcpy_dtoh_async(block.bytes_mut()?, src.ptr(), stream.cu_stream()) }
                .map_err(CudaError::from)?;
            device.issued(Queue::DeviceToHost);
        }
        block.touch(Queue::DeviceToHost);
        src.block.touch(Queue::DeviceToHost);
        Ok(CudaHostBuffer { block, dtype: src.dtype, shape: src.shape.clone() })
    }

    /// Copies the new value into the variable's planned block on `queue` (without a plan,
    /// the variable takes the new value's buffer).
    fn assign(&mut self, queue: Queue, src: &CudaBuffer, block: Block) -> Result<CudaBuffer, RuntimeError> {
        self.gpu.device.take_deferred()?;
        Ok(self.gpu.at_block(src, &block, queue)?)
    }

    fn execute(
        &mut self,
        program: &Program,
        node: usize,
        inputs: &[Option<&CudaBuffer>],
        blocks: &[Block],
        scratch: Option<Block>,
        context: &KernelContext,
    ) -> Result<Vec<CudaBuffer>, RuntimeError> {
        self.gpu.device.take_deferred()?;
        let n = program.node(node);
        let outputs = program.output_types(node);
        let exec = ops::Exec {
            gpu: &self.gpu,
            op: &n.op,
            opset: program.opset(node),
            attrs: Attrs::new(&n.attributes),
            inputs,
            outputs: &outputs,
            blocks,
            scratch,
            layout: lms_proto::ops::scratch::of_node(program, node),
            conv_algorithm: lms_proto::ops::scratch::planned_conv_algorithm(program, node),
            context,
        };
        let result = if ops::host_evaluable(&exec) {
            ops::evaluate_on_host(&exec, &n.domain)
        } else {
            ops::find(program.op(node), &n.op).and_then(|kernel| kernel(&exec))
        };
        let made = result.map_err(|error| match error {
            OpError::Kernel(source) => RuntimeError::Kernel {
                node: n.name.clone(),
                source: KernelError::Op { op: n.op.clone(), error: Box::new(source) },
            },
            OpError::Cuda(e) => backend_error(format!("node '{}' ({}): {e}", n.name, n.op)),
            OpError::ScratchTooSmall { what, needed, planned } => {
                RuntimeError::ScratchTooSmall { node: n.name.clone(), op: n.op.clone(), what, needed, planned }
            }
        })?;
        for input in inputs.iter().flatten() {
            input.block.touch(Queue::Compute);
        }
        if self.gpu.synchronous {
            self.gpu.device.stream(Queue::Compute).synchronize().map_err(|e| {
                backend_error(format!("node '{}' ({}): {e} (found by {SYNC_VAR}=1 right after it)", n.name, n.op))
            })?;
        }
        let declared = made.len() == outputs.len()
            && made.iter().zip(&outputs).all(|(b, (dtype, shape))| b.dtype == *dtype && b.shape == *shape);
        if !declared {
            return Err(RuntimeError::Internal(format!(
                "node '{}' ({}): the CUDA kernel made outputs other than the declared ones",
                n.name, n.op
            )));
        }
        // An output made elsewhere (a view of an input, a value computed on the host) is
        // copied into its planned block.
        made.iter()
            .zip(blocks)
            .map(|(buffer, block)| self.gpu.at_block(buffer, block, Queue::Compute))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| backend_error(format!("node '{}' ({}): {e}", n.name, n.op)))
    }

    fn record(&mut self, queue: Queue) -> Result<Mark, RuntimeError> {
        Ok(self.gpu.device.mark(queue)?)
    }

    fn wait(&mut self, queue: Queue, event: &Mark) -> Result<(), RuntimeError> {
        if queue == Queue::DeviceToHost && loader::skip_swap_out_waits() {
            return Ok(());
        }
        Ok(self.gpu.device.wait(queue, event)?)
    }

    fn synchronize(&mut self) -> Result<(), RuntimeError> {
        self.gpu.device.context().synchronize().map_err(CudaError::from)?;
        Ok(self.gpu.device.take_deferred()?)
    }

    fn stamp(&mut self, queue: Queue) -> Result<cudarc::driver::CudaEvent, RuntimeError> {
        let timed = Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT);
        Ok(self.gpu.device.stream(queue).record_event(timed).map_err(CudaError::from)?)
    }

    fn micros_between(
        &self,
        earlier: &cudarc::driver::CudaEvent,
        later: &cudarc::driver::CudaEvent,
    ) -> Result<f64, RuntimeError> {
        Ok(f64::from(earlier.elapsed_ms(later).map_err(CudaError::from)?) * 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_is_the_plans_arena_plus_the_reserve_within_free_memory() {
        let gib = 1u64 << 30;
        assert_eq!(fixed_device_bytes(), CUBLAS_WORKSPACE + 256);
        assert_eq!(arena_bytes(16 * gib, 80 * gib).unwrap(), 16 * gib + CUBLAS_WORKSPACE + 256);
        assert_eq!(arena_bytes(1000, 80 * gib).unwrap(), 1024 + CUBLAS_WORKSPACE + 256, "the plan's bytes aligned");
        assert_eq!(arena_bytes(0, 80 * gib).unwrap(), fixed_device_bytes());
        assert_eq!(arena_bytes(u64::MAX, 80 * gib).unwrap(), 79 * gib, "all the free memory less the reserve");
        let err = arena_bytes(100 * gib, 80 * gib).unwrap_err();
        assert!(matches!(err, RuntimeError::Allocation { .. }), "{err}");
        assert!(err.to_string().contains(&format!("{} B free", 79 * gib)), "{err}");
        assert!(arena_bytes(79 * gib - fixed_device_bytes() + 1, 80 * gib).is_err(), "the reserve counts");
        assert!(arena_bytes(gib, 0).is_err());
    }

    /// Uploaded and assigned tensors land at their planned blocks of the plan's region, a
    /// block past the region is refused, and nothing but the region and the library
    /// workspace stays allocated in the arena.
    #[test]
    fn tensors_live_at_their_planned_blocks_and_nothing_else_stays_allocated() {
        if std::env::var(REQUIRE_GPU_VAR).is_ok_and(|v| v == "1") {
            loader::emulated();
        } else {
            loader::emulate_where_no_driver();
        }
        if !gpu_test_gate("planned blocks").unwrap_or_else(|why| panic!("{why}")) {
            return;
        }
        let mut backend = CudaBackend::new(0, 1 << 24).unwrap_or_else(|e| panic!("{e}"));
        let before = backend.arena_stats().used;
        let region = 1 << 20;
        backend.reserve(region, 0).unwrap();
        assert_eq!(backend.arena_stats().used, before + region);
        let value = HostTensor::from_vec(vec![4], vec![1.0f32, -2.0, 3.5, 4.25]).unwrap();
        let host = backend.host_buffer(value.clone(), None).unwrap();
        let at = |offset| Block { pool: lms_proto::contract::Pool::Device, tensor: 0, offset, bytes: 16 };
        // Each queue waits for the one before, as the executor's edges make it.
        let after = |backend: &mut CudaBackend, from: Queue, to: Queue| {
            let event = backend.record(from).unwrap();
            backend.wait(to, &event).unwrap();
        };
        let uploaded = backend.upload(&host, at(512)).unwrap();
        assert_eq!(Some(uploaded.ptr()), backend.gpu.device.planned_ptr(512));
        after(&mut backend, Queue::HostToDevice, Queue::Compute);
        let assigned = backend.assign(Queue::Compute, &uploaded, at(4096)).unwrap();
        assert_eq!(Some(assigned.ptr()), backend.gpu.device.planned_ptr(4096));
        after(&mut backend, Queue::Compute, Queue::DeviceToHost);
        let back = backend.download(&assigned, None).unwrap();
        backend.synchronize().unwrap();
        assert_eq!(backend.read_host(&back).unwrap(), value);
        assert_eq!(backend.arena_stats().used, before + region);
        assert!(backend.upload(&host, at(region - 8)).is_err(), "a block past the plan's region");
    }

    /// Host tensors live at their planned blocks of the one pinned host arena: a swap out
    /// and back in goes through it, the calling thread writing a block waits for the
    /// queues' copies of its bytes, and a block past the arena is refused.
    #[test]
    fn host_tensors_live_in_one_pinned_host_arena() {
        if std::env::var(REQUIRE_GPU_VAR).is_ok_and(|v| v == "1") {
            loader::emulated();
        } else {
            loader::emulate_where_no_driver();
        }
        if !gpu_test_gate("pinned host arena").unwrap_or_else(|why| panic!("{why}")) {
            return;
        }
        let mut backend = CudaBackend::new(0, 1 << 24).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(backend.pinned_host_bytes(), 0);
        let host_arena = 8192;
        backend.reserve(1 << 20, host_arena).unwrap();
        assert_eq!(backend.pinned_host_bytes(), host_arena);
        let device = |offset| Block { pool: lms_proto::contract::Pool::Device, tensor: 0, offset, bytes: 16 };
        let host = |offset| Block { pool: lms_proto::contract::Pool::Host, tensor: 0, offset, bytes: 16 };
        let after = |backend: &mut CudaBackend, from: Queue, to: Queue| {
            let event = backend.record(from).unwrap();
            backend.wait(to, &event).unwrap();
        };
        let value = HostTensor::from_vec(vec![4], vec![0.5f32, -1.0, 2.0, 8.0]).unwrap();
        let resident = backend.host_buffer(value.clone(), Some(host(256))).unwrap();
        assert_eq!(backend.read_host(&resident).unwrap(), value, "written in the arena");
        let uploaded = backend.upload(&resident, device(0)).unwrap();
        after(&mut backend, Queue::HostToDevice, Queue::DeviceToHost);
        let swapped = backend.download(&uploaded, Some(host(4096))).unwrap();
        drop(resident);
        // The calling thread overwrites the first block once the upload has read it, and
        // the swapped-out copy is intact.
        let other = HostTensor::from_vec(vec![4], vec![7.0f32; 4]).unwrap();
        let rewritten = backend.host_buffer(other.clone(), Some(host(256))).unwrap();
        after(&mut backend, Queue::DeviceToHost, Queue::HostToDevice);
        let back = backend.upload(&swapped, device(512)).unwrap();
        after(&mut backend, Queue::HostToDevice, Queue::DeviceToHost);
        let read = backend.download(&back, None).unwrap();
        backend.synchronize().unwrap();
        assert_eq!(backend.read_host(&read).unwrap(), value);
        assert_eq!(backend.read_host(&rewritten).unwrap(), other);
        assert_eq!(backend.pinned_host_bytes(), host_arena, "nothing pinned beside the arena");
        let past = backend.host_buffer(value.clone(), Some(host(host_arena - 8)));
        assert!(past.is_err_and(|e| e.to_string().contains("pinned host arena of 8192 bytes")), "past the arena");
        assert!(backend.reserve(1 << 20, 2 * host_arena).is_err(), "a second plan must fit the first arena");
    }

    #[test]
    fn the_backend_starts_on_a_gpu_and_fails_cleanly_without_a_driver() {
        let runs = gpu_test_gate("the CUDA backend").unwrap_or_else(|why| panic!("{why}"));
        if runs {
            let backend = CudaBackend::new(0, 1 << 28).unwrap_or_else(|e| panic!("{e}"));
            assert!(!backend.device_name().is_empty());
            assert!(backend.arena_stats().capacity >= 1 << 28);
        } else {
            let reason = unavailable().expect("no driver");
            let err = CudaBackend::new(0, 1 << 30).err().map(|e| e.to_string());
            assert_eq!(err, Some(format!("cuda backend: {reason}")));
        }
    }
}
