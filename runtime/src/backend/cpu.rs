//! The CPU reference backend: a program runs inside two arenas of exactly the sizes its
//! static placement gives, one device buffer and one host buffer allocated once
//! ([`Backend::reserve`]), each tensor's bytes in its [`Block`]. Kernels
//! ([`crate::cpu::kernels::run_op`], by the op the program resolved each node to at load) compute into their own storage from their inputs read out of the
//! arena; one checked writer puts each output into its block, and an output that does not
//! fill its block exactly is an error naming the node and the tensor, so nothing is written
//! past a block. Variables and inputs are written into their blocks, swap-outs and swap-ins
//! copy between the arenas' blocks, an update edge copies the new value into its variable's
//! block. Every block is checked to lie within its arena.
//!
//! With guards ([`CpuBackend::with_guards`], for tests), each piece of work that writes the
//! arenas is checked afterwards to have changed no byte outside the blocks it writes (against
//! a copy of both arenas taken before it): a write past a block is an error naming the node.
//!
//! Each queue runs its work immediately, in issue order, so every event is complete when it
//! is recorded. The backend still keeps the books a GPU would need: every buffer remembers
//! the queue and position of the work that wrote it, every queue a vector clock of the work
//! it has waited for, and work that reads a buffer from another queue without having waited
//! for it fails. A missing wait in the executor is thus an error here, not only on a GPU.
//! Before a kernel runs, the system is asked for the bytes of its own storage
//! ([`check_allocatable`]): memory it refuses is an error naming the node, not an abort.
//! That storage is taken from the process's heap and given back to it, not to the system
//! ([`keep_freed_memory`]), so a step touches fresh pages only once per run, as it does
//! the arenas' pages.

use super::{Backend, Block, KernelContext, Queue};
use crate::attrs::Attrs;
use crate::cpu::kernels;
use crate::error::{KernelError, RuntimeError};
use crate::memory::{check_allocatable, node_and_op, Pool};
use crate::tensor::HostTensor;
use lms_proto::contract::Program;
use lms_proto::escape::Escaped;
use lms_proto::lms::DType;
use std::ops::Range;

/// The work that wrote a buffer: its queue and its position there (0: written by the host).
#[derive(Clone, Copy, Debug)]
struct Stamp {
    queue: Queue,
    seq: u64,
}

/// Where a CPU buffer's elements are.
#[derive(Clone, Debug)]
enum Storage {
    /// A block of an arena, holding elements of `dtype` in `shape`.
    Block { block: Block, dtype: DType, shape: Vec<usize> },
    /// A tensor outside the arenas: a value on its way to the device, or one read back.
    Own(HostTensor),
}

/// A CPU backend buffer (device or host role): where its elements are and the work that
/// wrote them.
#[derive(Clone, Debug)]
pub struct CpuBuffer {
    storage: Storage,
    written: Stamp,
}

/// A CPU backend event: how far each queue's work is complete at that point (a vector clock).
#[derive(Clone, Debug)]
pub struct CpuEvent {
    clock: [u64; 3],
}

/// The device and the host arena.
#[derive(Clone, Debug, Default)]
struct Arenas {
    device: Vec<u8>,
    host: Vec<u8>,
}

impl Arenas {
    fn pool(&self, pool: Pool) -> &[u8] {
        match pool {
            Pool::Device => &self.device,
            Pool::Host => &self.host,
        }
    }

    fn pool_mut(&mut self, pool: Pool) -> &mut [u8] {
        match pool {
            Pool::Device => &mut self.device,
            Pool::Host => &mut self.host,
        }
    }

    /// The byte range of `block`, checked to lie within its arena.
    fn range(&self, block: Block) -> Result<Range<usize>, String> {
        let len = self.pool(block.pool).len();
        let range = usize::try_from(block.offset).ok().zip(usize::try_from(block.end()).ok());
        match range {
            Some((start, end)) if end <= len => Ok(start..end),
            _ => Err(format!("block [{}, {}) lies past the {} B {} arena", block.offset, block.end(), len, block.pool)),
        }
    }

    /// The bytes of `block`.
    fn bytes(&self, block: Block) -> Result<&[u8], String> {
        let range = self.range(block)?;
        Ok(&self.pool(block.pool)[range])
    }

    /// Writes `value` into `block`, which it must fill exactly: the one writer of tensors
    /// into the arenas.
    fn write(&mut self, block: Block, value: &HostTensor) -> Result<(), String> {
        if value.byte_size() as u64 != block.bytes {
            return Err(format!("{} B do not fill its block of {} B", value.byte_size(), block.bytes));
        }
        let range = self.range(block)?;
        value.write_le_bytes(&mut self.pool_mut(block.pool)[range]).map_err(|e| e.to_string())
    }

    /// Copies the bytes of block `src` into block `dst`, of the same size.
    fn copy(&mut self, src: Block, dst: Block) -> Result<(), String> {
        if src.bytes != dst.bytes {
            return Err(format!("{} B do not fill its block of {} B", src.bytes, dst.bytes));
        }
        let (from, to) = (self.range(src)?, self.range(dst)?);
        match (src.pool, dst.pool) {
            (Pool::Device, Pool::Host) => self.host[to].copy_from_slice(&self.device[from]),
            (Pool::Host, Pool::Device) => self.device[to].copy_from_slice(&self.host[from]),
            (pool, _) => self.pool_mut(pool).copy_within(from, to.start),
        }
        Ok(())
    }
}

/// The first run of bytes that differ between `before` and `after` outside `kept` (ranges
/// sorted by start): `None` when there is none.
fn changed_outside(before: &[u8], after: &[u8], kept: &[Range<usize>]) -> Option<Range<usize>> {
    let mut start = 0;
    let mut gaps = Vec::with_capacity(kept.len() + 1);
    for range in kept {
        gaps.push(start..range.start.max(start));
        start = start.max(range.end);
    }
    gaps.push(start..before.len().max(after.len()));
    gaps.into_iter().find_map(|gap| {
        let (a, b) = (before.get(gap.clone())?, after.get(gap.clone())?);
        let first = a.iter().zip(b).position(|(x, y)| x != y)?;
        let last = a.iter().zip(b).rposition(|(x, y)| x != y)?;
        Some(gap.start + first..gap.start + last + 1)
    })
}

/// Makes the allocator keep the memory a kernel frees for the next kernel instead of
/// handing it back to the system: blocks up to 32 MiB come from the heap rather than a
/// mapping of their own, and the heap's top is not trimmed. Without this, each large
/// input copy and output of every kernel is a fresh mapping whose pages fault in on
/// first touch, which costs more than the kernel on large tensors. glibc only; elsewhere
/// nothing changes.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_freed_memory() {
    // SAFETY: mallopt only sets the allocator's tuning parameters; both values are in range.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 32 << 20);
        libc::mallopt(libc::M_TRIM_THRESHOLD, libc::c_int::MAX);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_freed_memory() {}

/// The CPU reference backend.
#[derive(Clone, Debug, Default)]
pub struct CpuBackend {
    /// Work items issued on each queue.
    issued: [u64; 3],
    /// Per queue: how far each queue's work is known complete before its next item starts.
    clocks: [[u64; 3]; 3],
    /// How far each queue's work is known complete to the calling thread.
    host_clock: [u64; 3],
    /// The arenas the program runs in (empty until [`Backend::reserve`]).
    arenas: Arenas,
    /// Whether each write into the arenas is checked to stay within its blocks.
    guards: bool,
}

impl CpuBackend {
    /// A backend with no work issued.
    pub fn new() -> CpuBackend {
        CpuBackend::default()
    }

    /// This backend with guards: after each node, copy or write into the arenas, every
    /// byte outside the blocks it writes is compared with a copy taken before it, and a
    /// change is an error naming the node. Each piece of work then costs a copy of both
    /// arenas: a mode for tests.
    pub fn with_guards(self) -> CpuBackend {
        CpuBackend { guards: true, ..self }
    }

    fn error(&self, message: String) -> RuntimeError {
        RuntimeError::Backend { backend: self.name().to_string(), message }
    }

    /// Issues one work item on `queue` that reads buffers written by `reads`.
    fn issue(&mut self, queue: Queue, reads: &[Stamp]) -> Result<Stamp, RuntimeError> {
        let q = queue.index();
        if let Some(s) = reads.iter().find(|s| self.clocks[q][s.queue.index()] < s.seq) {
            return Err(self.error(format!(
                "work on the {queue} queue reads a buffer written on the {} queue without waiting for it",
                s.queue
            )));
        }
        self.issued[q] += 1;
        self.clocks[q][q] = self.issued[q];
        Ok(Stamp { queue, seq: self.issued[q] })
    }

    /// Runs `work` on the arenas, which may write only `writes`; with guards, checks
    /// afterwards that it changed no other byte. `what` names the work in errors.
    fn guarded<T>(
        &mut self,
        what: impl Fn() -> String,
        writes: &[Block],
        work: impl FnOnce(&mut Arenas) -> Result<T, String>,
    ) -> Result<T, RuntimeError> {
        let before = self.guards.then(|| self.arenas.clone());
        let value = work(&mut self.arenas).map_err(|e| self.error(format!("{}: {e}", what())))?;
        let Some(before) = before else { return Ok(value) };
        for pool in [Pool::Device, Pool::Host] {
            let mut kept: Vec<Range<usize>> =
                writes.iter().filter(|b| b.pool == pool).filter_map(|&b| self.arenas.range(b).ok()).collect();
            kept.sort_by_key(|r| r.start);
            if let Some(bad) = changed_outside(before.pool(pool), self.arenas.pool(pool), &kept) {
                return Err(self.error(format!(
                    "{} wrote {pool} bytes [{}, {}) outside its blocks",
                    what(),
                    bad.start,
                    bad.end
                )));
            }
        }
        Ok(value)
    }

    /// The elements of `buffer`, read out of its arena.
    fn value(&self, buffer: &CpuBuffer) -> Result<HostTensor, RuntimeError> {
        match &buffer.storage {
            Storage::Own(tensor) => Ok(tensor.clone()),
            Storage::Block { block, dtype, shape } => {
                let bytes = self.arenas.bytes(*block).map_err(|e| self.error(e))?;
                HostTensor::from_le_bytes(*dtype, shape, bytes).map_err(|e| self.error(e.to_string()))
            }
        }
    }

    /// Copies `src` into `block` on work `written`: a buffer of `src`'s type there.
    fn copy_into(&mut self, src: &CpuBuffer, block: Block, written: Stamp) -> Result<CpuBuffer, RuntimeError> {
        let what = || format!("a copy into block [{}, {}) of the {} arena", block.offset, block.end(), block.pool);
        let (dtype, shape) = match &src.storage {
            Storage::Own(tensor) => {
                self.guarded(what, &[block], |arenas| arenas.write(block, tensor))?;
                (tensor.dtype(), tensor.shape.clone())
            }
            Storage::Block { block: from, dtype, shape } => {
                let from = *from;
                self.guarded(what, &[block], |arenas| arenas.copy(from, block))?;
                (*dtype, shape.clone())
            }
        };
        Ok(CpuBuffer { storage: Storage::Block { block, dtype, shape }, written })
    }
}

impl Backend for CpuBackend {
    type DeviceBuffer = CpuBuffer;
    type HostBuffer = CpuBuffer;
    type Event = CpuEvent;
    /// Queues run their work when it is issued, so the clock at issue is the time.
    type Stamp = std::time::Instant;

    fn name(&self) -> &'static str {
        "cpu"
    }

    /// Allocates both arenas zeroed (pages the system gives on first touch).
    fn reserve(&mut self, device_bytes: u64, host_bytes: u64) -> Result<(), RuntimeError> {
        keep_freed_memory();
        let arena = |pool: Pool, bytes: u64| -> Result<Vec<u8>, RuntimeError> {
            let what = || format!("the {pool} arena");
            check_allocatable(bytes, what)?;
            let n = usize::try_from(bytes).map_err(|_| RuntimeError::Allocation { what: what(), bytes })?;
            Ok(vec![0u8; n])
        };
        self.arenas = Arenas { device: arena(Pool::Device, device_bytes)?, host: arena(Pool::Host, host_bytes)? };
        Ok(())
    }

    fn host_buffer(&mut self, tensor: HostTensor, block: Option<Block>) -> Result<CpuBuffer, RuntimeError> {
        let written = Stamp { queue: Queue::Compute, seq: 0 };
        match block {
            Some(block) => self.copy_into(&CpuBuffer { storage: Storage::Own(tensor), written }, block, written),
            None => Ok(CpuBuffer { storage: Storage::Own(tensor), written }),
        }
    }

    fn read_host(&self, buffer: &CpuBuffer) -> Result<HostTensor, RuntimeError> {
        let Stamp { queue, seq } = buffer.written;
        if self.host_clock[queue.index()] < seq {
            return Err(self.error(format!("a host buffer written on the {queue} queue is read before synchronizing")));
        }
        self.value(buffer)
    }

    fn upload(&mut self, src: &CpuBuffer, block: Block) -> Result<CpuBuffer, RuntimeError> {
        let written = self.issue(Queue::HostToDevice, &[src.written])?;
        self.copy_into(src, block, written)
    }

    fn download(&mut self, src: &CpuBuffer, block: Option<Block>) -> Result<CpuBuffer, RuntimeError> {
        let written = self.issue(Queue::DeviceToHost, &[src.written])?;
        match block {
            Some(block) => self.copy_into(src, block, written),
            None => Ok(CpuBuffer { storage: Storage::Own(self.value(src)?), written }),
        }
    }

    fn assign(&mut self, queue: Queue, src: &CpuBuffer, block: Block) -> Result<CpuBuffer, RuntimeError> {
        let written = self.issue(queue, &[src.written])?;
        self.copy_into(src, block, written)
    }

    fn execute(
        &mut self,
        program: &Program,
        node: usize,
        inputs: &[Option<&CpuBuffer>],
        outputs: &[Block],
        _scratch: Option<Block>,
        context: &KernelContext,
    ) -> Result<Vec<CpuBuffer>, RuntimeError> {
        let reads: Vec<Stamp> = inputs.iter().flatten().map(|b| b.written).collect();
        let written = self.issue(Queue::Compute, &reads)?;
        let n = program.node(node);
        let (attrs, types) = (Attrs::new(&n.attributes), program.output_types(node));
        if outputs.len() != types.len() {
            return Err(RuntimeError::Internal(format!(
                "node '{}' is given {} output blocks, the graph declares {} outputs",
                n.name,
                outputs.len(),
                types.len()
            )));
        }
        let input_bytes = inputs.iter().flatten().map(|b| match &b.storage {
            Storage::Block { block, .. } => block.bytes,
            Storage::Own(t) => t.byte_size() as u64,
        });
        let bytes = outputs.iter().map(|b| b.bytes).chain(input_bytes).fold(0u64, u64::saturating_add);
        check_allocatable(bytes, || node_and_op(n))?;
        let values = inputs.iter().map(|b| b.map(|b| self.value(b)).transpose()).collect::<Result<Vec<_>, _>>()?;
        let tensors: Vec<Option<&HostTensor>> = values.iter().map(Option::as_ref).collect();
        let made = match program.op(node) {
            Some(op) => kernels::run_op(op, program.opset(node), &attrs, &tensors, &types, context),
            None => Err(KernelError::UnknownOp(n.op.clone())),
        }
        .map_err(|source| RuntimeError::Kernel { node: n.name.clone(), source })?;
        drop(values);
        if made.len() != outputs.len() {
            return Err(RuntimeError::Internal(format!(
                "node '{}' made {} outputs, the graph declares {}",
                n.name,
                made.len(),
                outputs.len()
            )));
        }
        self.guarded(
            || node_and_op(n),
            outputs,
            |arenas| {
                for ((value, &block), (dtype, _)) in made.iter().zip(outputs).zip(&types) {
                    let name = Escaped(program.tensor_name(block.tensor));
                    if value.dtype() != *dtype {
                        return Err(format!(
                            "output '{name}' is {}, the graph declares {}",
                            crate::tensor::dtype_name(value.dtype()),
                            crate::tensor::dtype_name(*dtype)
                        ));
                    }
                    arenas.write(block, value).map_err(|e| format!("output '{name}': {e}"))?;
                }
                Ok(())
            },
        )?;
        Ok(outputs
            .iter()
            .zip(types)
            .map(|(&block, (dtype, shape))| CpuBuffer { storage: Storage::Block { block, dtype, shape }, written })
            .collect())
    }

    fn record(&mut self, queue: Queue) -> Result<CpuEvent, RuntimeError> {
        Ok(CpuEvent { clock: self.clocks[queue.index()] })
    }

    fn wait(&mut self, queue: Queue, event: &CpuEvent) -> Result<(), RuntimeError> {
        let clock = &mut self.clocks[queue.index()];
        for (mine, theirs) in clock.iter_mut().zip(event.clock) {
            *mine = (*mine).max(theirs);
        }
        Ok(())
    }

    fn synchronize(&mut self) -> Result<(), RuntimeError> {
        self.host_clock = self.issued;
        Ok(())
    }

    fn stamp(&mut self, _queue: Queue) -> Result<std::time::Instant, RuntimeError> {
        Ok(std::time::Instant::now())
    }

    fn micros_between(&self, earlier: &std::time::Instant, later: &std::time::Instant) -> Result<f64, RuntimeError> {
        Ok(later.saturating_duration_since(*earlier).as_secs_f64() * 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A block of `bytes` bytes at `offset` in `pool`.
    fn block(pool: Pool, offset: u64, bytes: u64) -> Block {
        Block { pool, tensor: 0, offset, bytes }
    }

    fn buffer(b: &mut CpuBackend, v: f32) -> CpuBuffer {
        b.host_buffer(HostTensor::scalar(v), None).unwrap()
    }

    #[test]
    fn cross_queue_reads_need_a_wait() {
        let mut b = CpuBackend::new();
        b.reserve(256, 256).unwrap();
        let host = buffer(&mut b, 1.0);
        let dev = b.upload(&host, block(Pool::Device, 0, 4)).unwrap();
        // The copy back reads a buffer the host-to-device queue wrote: no wait, an error.
        let err = b.download(&dev, None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cpu backend: work on the device-to-host queue reads a buffer written on the \
             host-to-device queue without waiting for it"
        );
        let uploaded = b.record(Queue::HostToDevice).unwrap();
        b.wait(Queue::DeviceToHost, &uploaded).unwrap();
        let back = b.download(&dev, None).unwrap();
        assert!(b.read_host(&back).is_err(), "read before synchronize");
        b.synchronize().unwrap();
        assert_eq!(b.read_host(&back).unwrap(), HostTensor::scalar(1.0f32));
    }

    #[test]
    fn waits_are_transitive() {
        let mut b = CpuBackend::new();
        b.reserve(256, 0).unwrap();
        let host = buffer(&mut b, 2.0);
        let dev = b.upload(&host, block(Pool::Device, 0, 4)).unwrap();
        let e = b.record(Queue::HostToDevice).unwrap();
        b.wait(Queue::Compute, &e).unwrap();
        // Compute has seen the upload; an event on compute carries that to device-to-host.
        let c = b.record(Queue::Compute).unwrap();
        b.wait(Queue::DeviceToHost, &c).unwrap();
        assert!(b.download(&dev, None).is_ok());
        // Host-written buffers need no wait anywhere.
        let host = buffer(&mut b, 3.0);
        assert!(b.upload(&host, block(Pool::Device, 0, 4)).is_ok());
    }

    #[test]
    fn tensors_live_in_their_blocks() {
        let mut b = CpuBackend::new();
        b.reserve(512, 256).unwrap();
        let value = HostTensor::from_vec(vec![2], vec![1.5f32, -2.0]).unwrap();
        let staged = b.host_buffer(value.clone(), None).unwrap();
        let dev = b.upload(&staged, block(Pool::Device, 256, 8)).unwrap();
        assert_eq!(&b.arenas.device[256..264], &value.to_le_bytes()[..]);
        let done = b.record(Queue::HostToDevice).unwrap();
        b.wait(Queue::DeviceToHost, &done).unwrap();
        let host = b.download(&dev, Some(block(Pool::Host, 8, 8))).unwrap();
        b.synchronize().unwrap();
        assert_eq!(&b.arenas.host[8..16], &value.to_le_bytes()[..]);
        assert_eq!(b.read_host(&host).unwrap(), value);
        // A block past its arena is refused, and so is a value that does not fill its block.
        let err = b.host_buffer(value.clone(), Some(block(Pool::Host, 252, 8))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cpu backend: a copy into block [252, 260) of the host arena: block [252, 260) lies past the 256 B host arena"
        );
        let err = b.host_buffer(value, Some(block(Pool::Host, 0, 4))).unwrap_err();
        assert!(err.to_string().ends_with("8 B do not fill its block of 4 B"), "{err}");
        // The arenas are allocated fallibly: a size the system refuses is an error.
        let err = b.reserve(u64::MAX, 0).unwrap_err();
        assert!(matches!(err, RuntimeError::Allocation { .. }), "{err}");
    }

    /// A writer that writes one element past its block is caught by the guards, naming
    /// the node; without guards it would go unnoticed.
    #[test]
    fn guards_catch_a_write_past_a_block() {
        let out = block(Pool::Device, 256, 8);
        let past = |arenas: &mut Arenas| {
            let end = out.end() as usize;
            arenas.device[out.offset as usize..end + 4].fill(7);
            Ok(())
        };
        let mut b = CpuBackend::new().with_guards();
        b.reserve(1024, 256).unwrap();
        let node = || "node 'r' (Relu)".to_string();
        assert!(b.guarded(node, &[out], |arenas| arenas.write(out, &HostTensor::scalar(1.0f64))).is_ok());
        let err = b.guarded(node, &[out], past).unwrap_err();
        assert_eq!(err.to_string(), "cpu backend: node 'r' (Relu) wrote device bytes [264, 268) outside its blocks");
        let mut unguarded = CpuBackend::new();
        unguarded.reserve(1024, 256).unwrap();
        assert!(unguarded.guarded(node, &[out], past).is_ok());
        let first = 0..1;
        assert_eq!(changed_outside(&[0, 1, 2, 3], &[9, 1, 2, 9], std::slice::from_ref(&first)), Some(3..4));
        assert_eq!(changed_outside(&[0, 1, 2, 3], &[9, 1, 2, 9], &[0..1, 3..4]), None);
    }
}
