//! Device and host memory of the CUDA backend, and the queues' event bookkeeping.
//!
//! [`Device`] owns the three streams, the device arena (one `cuMemAlloc` of the budget)
//! and the pinned host pool. Once a program's plan is known ([`Device::plan`]) one region
//! of the arena holds its tensors, each at the offset the static placement gives it
//! ([`Device::planned`]); the rest of the arena is placed by [`OffsetAllocator`] for the
//! ops' scratch memory and for buffers outside a plan. Buffers are freed when dropped,
//! which may be while a queue still uses them: each block remembers the queues that
//! touched it, and on drop it records, per such queue, an event after the work issued so
//! far ([`Fences`]). A new block on queue q makes q wait for the fences of the other
//! queues on its bytes (device memory: planned blocks by byte range, allocated ones by
//! free block), or takes only blocks whose fences have completed (host memory, which the
//! calling thread may write at once).

use super::arena::{ArenaStats, Fences, OffsetAllocator};
use super::error::CudaError;
use crate::backend::Queue;
use cudarc::driver::{result, sys, CudaContext, CudaEvent, CudaStream, PinnedHostSlice};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

/// A recorded event, shared by everything that must wait for it.
pub type Mark = Rc<CudaEvent>;

/// Per queue: how many work items were issued, and the last event recorded with the
/// count it was recorded at (reused while nothing new is issued).
#[derive(Default)]
struct Marks {
    issued: [u64; 3],
    last: [Option<(u64, Mark)>; 3],
}

/// A pinned host allocation waiting in the pool, with the fences of its last users.
struct PooledHost {
    slice: PinnedHostSlice<u8>,
    fences: Fences<Mark>,
}

/// The region of the arena that holds a plan's tensors at their planned offsets.
struct Planned {
    /// Its first byte, as an offset in the arena.
    start: u64,
    /// Its length.
    bytes: u64,
    /// For byte ranges (arena offsets, disjoint: start → end) once used by a planned
    /// block: when each queue was done with them.
    fences: BTreeMap<u64, (u64, Fences<Mark>)>,
}

impl Planned {
    /// Removes what the ranges say of `[start, end)`, keeping their parts outside it.
    fn carve(&mut self, start: u64, end: u64) {
        let overlapping: Vec<u64> =
            self.fences.range(..end).rev().take_while(|(_, (e, _))| *e > start).map(|(&s, _)| s).collect();
        for s in overlapping {
            let Some((e, fences)) = self.fences.remove(&s) else { continue };
            if s < start {
                self.fences.insert(s, (start, fences.clone()));
            }
            if e > end {
                self.fences.insert(end, (e, fences));
            }
        }
    }
}

/// The mutable state behind [`Device`].
struct State {
    arena: OffsetAllocator<Mark>,
    /// The plan's region, once [`Device::plan`] made it.
    planned: Option<Planned>,
    marks: Marks,
    host_free: Vec<PooledHost>,
    /// Pinned blocks whose users could not be fenced: freed only when the device is idle.
    host_retired: Vec<PinnedHostSlice<u8>>,
    /// Pinned bytes allocated so far (in use or pooled).
    host_pinned: u64,
    /// An error met while freeing a buffer, reported by the next backend call.
    deferred: Option<CudaError>,
}

/// The GPU's streams and memory.
pub struct Device {
    ctx: Arc<CudaContext>,
    streams: [Arc<CudaStream>; 3],
    /// Device address of the arena's first byte.
    base: sys::CUdeviceptr,
    state: RefCell<State>,
}

impl Device {
    /// Creates the streams and allocates an arena of `arena_bytes` bytes.
    pub fn new(ctx: Arc<CudaContext>, arena_bytes: u64) -> Result<Rc<Device>, CudaError> {
        let streams = [ctx.new_stream()?, ctx.new_stream()?, ctx.new_stream()?];
        let bytes = usize::try_from(arena_bytes)
            .map_err(|_| CudaError::TooLarge(format!("an arena of {arena_bytes} bytes")))?;
        ctx.bind_to_thread()?;
        // SAFETY: a plain allocation; it is freed in `Drop` after the device is idle.
        let base = unsafe { result::malloc_sync(bytes.max(1)) }?;
        Ok(Rc::new(Device {
            ctx,
            streams,
            base,
            state: RefCell::new(State {
                arena: OffsetAllocator::new(arena_bytes),
                planned: None,
                marks: Marks::default(),
                host_free: Vec::new(),
                host_retired: Vec::new(),
                host_pinned: 0,
                deferred: None,
            }),
        }))
    }

    /// The CUDA context.
    pub fn context(&self) -> &Arc<CudaContext> {
        &self.ctx
    }

    /// The stream of `queue`.
    pub fn stream(&self, queue: Queue) -> &Arc<CudaStream> {
        &self.streams[queue.index()]
    }

    /// Notes that work was issued on `queue`: the next mark of the queue is a new event.
    pub fn issued(&self, queue: Queue) {
        self.state.borrow_mut().marks.issued[queue.index()] += 1;
    }

    /// An event after the work issued so far on `queue`.
    pub fn mark(&self, queue: Queue) -> Result<Mark, CudaError> {
        let mut state = self.state.borrow_mut();
        self.mark_in(&mut state, queue).map(|(_, mark)| mark)
    }

    fn mark_in(&self, state: &mut State, queue: Queue) -> Result<(u64, Mark), CudaError> {
        let q = queue.index();
        let issued = state.marks.issued[q];
        if let Some((seq, mark)) = &state.marks.last[q] {
            if *seq == issued {
                return Ok((issued, Rc::clone(mark)));
            }
        }
        let event = Rc::new(self.streams[q].record_event(None)?);
        state.marks.last[q] = Some((issued, Rc::clone(&event)));
        Ok((issued, event))
    }

    /// Makes `queue` wait for `mark`.
    pub fn wait(&self, queue: Queue, mark: &CudaEvent) -> Result<(), CudaError> {
        self.streams[queue.index()].wait(mark)?;
        self.issued(queue);
        Ok(())
    }

    /// The fences of a block used by the queues in `used` (a bit per queue index).
    fn fences(&self, state: &mut State, used: u8) -> Result<Fences<Mark>, CudaError> {
        let mut fences = Fences::default();
        for queue in [Queue::Compute, Queue::DeviceToHost, Queue::HostToDevice] {
            if used & (1 << queue.index()) != 0 {
                let (seq, mark) = self.mark_in(state, queue)?;
                fences.add(queue.index(), seq, mark);
            }
        }
        Ok(fences)
    }

    /// The error a drop met, if any, taken.
    pub fn take_deferred(&self) -> Result<(), CudaError> {
        self.state.borrow_mut().deferred.take().map_or(Ok(()), Err)
    }

    /// The arena's state.
    pub fn arena_stats(&self) -> ArenaStats {
        self.state.borrow().arena.stats()
    }

    /// Pinned host bytes allocated so far, in use or pooled.
    pub fn host_pinned(&self) -> u64 {
        self.state.borrow().host_pinned
    }

    /// A device block of `bytes` for work on `queue`; `queue` waits for the other queues'
    /// last uses of the memory.
    pub fn alloc(self: &Rc<Self>, bytes: u64, queue: Queue) -> Result<DeviceBlock, CudaError> {
        let (offset, fences) = self
            .state
            .borrow_mut()
            .arena
            .alloc(bytes)
            .map_err(|stats| CudaError::ArenaFull { wanted: bytes, stats })?;
        let block =
            DeviceBlock { device: Rc::clone(self), offset, bytes, used: Cell::new(1 << queue.index()), planned: false };
        for mark in fences.others(queue.index()) {
            self.wait(queue, mark)?;
        }
        Ok(block)
    }

    /// Sets aside the region of `bytes` that holds a plan's tensors (the static
    /// placement's device arena), once: a second plan must fit the first one's region.
    pub fn plan(&self, bytes: u64) -> Result<(), CudaError> {
        let mut state = self.state.borrow_mut();
        if let Some(planned) = &state.planned {
            return match bytes <= planned.bytes {
                true => Ok(()),
                false => Err(CudaError::ArenaFull { wanted: bytes, stats: state.arena.stats() }),
            };
        }
        // Nothing has run yet but the libraries' set-up, on the compute queue, which the
        // planned blocks' first users wait for through the region's fences.
        let (start, fences) =
            state.arena.alloc(bytes).map_err(|stats| CudaError::ArenaFull { wanted: bytes, stats })?;
        let mut planned = Planned { start, bytes, fences: BTreeMap::new() };
        planned.fences.insert(start, (start + bytes.max(1), fences));
        state.planned = Some(planned);
        Ok(())
    }

    /// Whether a plan's region exists ([`Device::plan`]).
    pub fn has_plan(&self) -> bool {
        self.state.borrow().planned.is_some()
    }

    /// The device address of the planned block at `offset` of the plan's region.
    pub fn planned_ptr(&self, offset: u64) -> Option<sys::CUdeviceptr> {
        self.state.borrow().planned.as_ref().map(|p| self.base + p.start + offset)
    }

    /// The planned block of `bytes` at `offset` of the plan's region, for work on `queue`;
    /// `queue` waits for the other queues' last uses of those bytes.
    pub fn planned(self: &Rc<Self>, offset: u64, bytes: u64, queue: Queue) -> Result<DeviceBlock, CudaError> {
        let marks: Vec<Mark> = {
            let state = self.state.borrow();
            let planned =
                state.planned.as_ref().ok_or(CudaError::ArenaFull { wanted: bytes, stats: state.arena.stats() })?;
            if offset.checked_add(bytes).is_none_or(|end| end > planned.bytes) {
                return Err(CudaError::ArenaFull { wanted: bytes, stats: state.arena.stats() });
            }
            let (start, end) = (planned.start + offset, planned.start + offset + bytes.max(1));
            planned
                .fences
                .range(..end)
                .rev()
                .take_while(|(_, (e, _))| *e > start)
                .flat_map(|(_, (_, fences))| fences.others(queue.index()).cloned())
                .collect()
        };
        for mark in &marks {
            self.wait(queue, mark)?;
        }
        let start = self.state.borrow().planned.as_ref().map_or(0, |p| p.start);
        Ok(DeviceBlock {
            device: Rc::clone(self),
            offset: start + offset,
            bytes,
            used: Cell::new(1 << queue.index()),
            planned: true,
        })
    }

    /// A pinned host block of at least `bytes`: a pooled one whose last uses have
    /// completed (the smallest that fits, at most twice the size), else a new one.
    pub fn alloc_host(self: &Rc<Self>, bytes: u64) -> Result<HostBlock, CudaError> {
        let len = usize::try_from(bytes).map_err(|_| CudaError::TooLarge(format!("a host buffer of {bytes} bytes")))?;
        let reuse = {
            let state = self.state.borrow();
            let mut best: Option<(usize, usize)> = None;
            for (i, pooled) in state.host_free.iter().enumerate() {
                let size = pooled.slice.len();
                let fits = size >= len && size / 2 <= len;
                if fits && best.is_none_or(|(_, s)| size < s) && complete(&pooled.fences)? {
                    best = Some((i, size));
                }
            }
            best.map(|(i, _)| i)
        };
        let slice = match reuse {
            Some(i) => self.state.borrow_mut().host_free.swap_remove(i).slice,
            None => {
                // SAFETY: page-locked memory, written before it is read.
                let slice = unsafe { self.ctx.alloc_pinned_with_flags::<u8>(len.max(1), 0) }
                    .map_err(|_| CudaError::HostMemory(bytes))?;
                self.state.borrow_mut().host_pinned += slice.len() as u64;
                slice
            }
        };
        Ok(HostBlock { device: Rc::clone(self), slice: Some(slice), len, used: Cell::new(0) })
    }

    /// The fences of a device block being released by the queues in `used`; an error
    /// recording them is deferred to the next backend call (no fences: the caller's drop
    /// cannot fail).
    fn release_fences(&self, state: &mut State, used: u8) -> Fences<Mark> {
        self.fences(state, used).unwrap_or_else(|error| {
            state.deferred.get_or_insert(error);
            Fences::default()
        })
    }

    fn release_device(&self, offset: u64, used: u8) {
        let mut state = self.state.borrow_mut();
        let fences = self.release_fences(&mut state, used);
        state.arena.free(offset, fences);
    }

    /// Records when the queues in `used` are done with the planned bytes
    /// `[offset, offset + bytes)` (arena offsets).
    fn release_planned(&self, offset: u64, bytes: u64, used: u8) {
        let mut state = self.state.borrow_mut();
        let fences = self.release_fences(&mut state, used);
        if let Some(planned) = state.planned.as_mut() {
            let end = offset + bytes.max(1);
            planned.carve(offset, end);
            planned.fences.insert(offset, (end, fences));
        }
    }

    fn release_host(&self, slice: PinnedHostSlice<u8>, used: u8) {
        let mut state = self.state.borrow_mut();
        match self.fences(&mut state, used) {
            Ok(fences) => state.host_free.push(PooledHost { slice, fences }),
            Err(error) => {
                state.deferred.get_or_insert(error);
                state.host_retired.push(slice);
            }
        }
    }
}

/// Whether every mark of `fences` has completed.
fn complete(fences: &Fences<Mark>) -> Result<bool, CudaError> {
    for mark in fences.others(usize::MAX) {
        if !mark.try_is_complete()? {
            return Ok(false);
        }
    }
    Ok(true)
}

impl Drop for Device {
    fn drop(&mut self) {
        // Pinned and device memory is freed only once no queue can still use it.
        let idle = self.ctx.synchronize().is_ok();
        let state = self.state.get_mut();
        state.marks = Marks::default();
        if !idle {
            // A failed context: freeing memory a queue may still use is worse than leaking.
            std::mem::forget(std::mem::take(&mut state.host_free));
            std::mem::forget(std::mem::take(&mut state.host_retired));
            return;
        }
        state.host_free.clear();
        state.host_retired.clear();
        // SAFETY: the arena was allocated by `Device::new` and nothing uses it any more
        // (blocks hold the device alive, so none is left).
        let _ = unsafe { result::free_sync(self.base) };
    }
}

/// A block of device memory in the arena: allocated, or a planned tensor's block in the
/// plan's region; freed or released (with fences) when dropped.
pub struct DeviceBlock {
    device: Rc<Device>,
    /// Its offset in the arena.
    offset: u64,
    bytes: u64,
    /// Queues that touched the block, a bit per queue index.
    used: Cell<u8>,
    /// In the plan's region ([`Device::planned`]) rather than from the allocator.
    planned: bool,
}

impl DeviceBlock {
    /// The device address.
    pub fn ptr(&self) -> sys::CUdeviceptr {
        self.device.base + self.offset
    }

    /// The bytes asked for.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Notes that work on `queue` reads or writes the block.
    pub fn touch(&self, queue: Queue) {
        self.used.set(self.used.get() | 1 << queue.index());
    }
}

impl Drop for DeviceBlock {
    fn drop(&mut self) {
        match self.planned {
            true => self.device.release_planned(self.offset, self.bytes, self.used.get()),
            false => self.device.release_device(self.offset, self.used.get()),
        }
    }
}

impl std::fmt::Debug for DeviceBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBlock({} bytes at +{})", self.bytes, self.offset)
    }
}

/// A block of pinned host memory from the pool; returned to it when dropped.
pub struct HostBlock {
    device: Rc<Device>,
    /// Always present until drop.
    slice: Option<PinnedHostSlice<u8>>,
    len: usize,
    used: Cell<u8>,
}

impl HostBlock {
    /// The block's bytes, to write from or read into the calling thread; no queue may use
    /// the block meanwhile.
    pub fn bytes_mut(&mut self) -> Result<&mut [u8], CudaError> {
        let len = self.len;
        let slice = self.slice.as_mut().ok_or(CudaError::HostMemory(len as u64))?;
        Ok(&mut slice.as_mut_slice()?[..len])
    }

    /// The block's bytes.
    pub fn bytes(&self) -> Result<&[u8], CudaError> {
        let slice = self.slice.as_ref().ok_or(CudaError::HostMemory(self.len as u64))?;
        Ok(&slice.as_slice()?[..self.len])
    }

    /// The bytes asked for.
    pub fn size(&self) -> usize {
        self.len
    }

    /// Notes that work on `queue` reads or writes the block.
    pub fn touch(&self, queue: Queue) {
        self.used.set(self.used.get() | 1 << queue.index());
    }
}

impl Drop for HostBlock {
    fn drop(&mut self) {
        if let Some(slice) = self.slice.take() {
            self.device.release_host(slice, self.used.get());
        }
    }
}

impl std::fmt::Debug for HostBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostBlock({} bytes)", self.len)
    }
}
