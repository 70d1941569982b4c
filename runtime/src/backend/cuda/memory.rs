//! Device and host memory of the CUDA backend, and the queues' event bookkeeping.
//!
//! [`Device`] owns the three streams, the device arena (one `cuMemAlloc` of the budget)
//! and the pinned host arena (one `cuMemHostAlloc` of the plan's host arena). Once a
//! program's plan is known ([`Device::plan`], [`Device::plan_host`]) one region of the
//! device arena holds its tensors, each at the offset the static placement gives it
//! ([`Device::planned`]), and the host arena holds its host tensors likewise
//! ([`Device::host_planned`]); the rest of the device arena is placed by
//! [`OffsetAllocator`] for the backend's fixed buffers and buffers outside a plan. Host
//! buffers outside the plan (values on their way to the device, results read back) are
//! ordinary pageable memory, which CUDA copies through its own staging. Buffers are
//! released when dropped, which may be while a queue still uses them: each block
//! remembers the queues that touched it, and on drop it records, per such queue, an event
//! after the work issued so far ([`Fences`]). A new block on queue q makes q wait for the
//! fences of the other queues on its bytes (planned blocks by byte range, allocated ones
//! by free block); a host block the calling thread writes waits for all of them.

use super::arena::{ArenaStats, Fences, OffsetAllocator};
use super::error::CudaError;
use crate::backend::Queue;
use cudarc::driver::{result, sys, CudaContext, CudaEvent, CudaStream};
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

/// A region that holds a plan's tensors at their planned offsets: in the device arena,
/// or the whole pinned host arena.
struct Planned {
    /// Its first byte, as an offset in its arena.
    start: u64,
    /// Its length.
    bytes: u64,
    /// For byte ranges (arena offsets, disjoint: start → end) once used by a planned
    /// block: when each queue was done with them.
    fences: BTreeMap<u64, (u64, Fences<Mark>)>,
}

impl Planned {
    /// The marks on the region's bytes `[offset, offset + bytes)` that work on queue index
    /// `queue` must wait for (`usize::MAX`: the calling thread, which waits for all);
    /// `None` when the bytes leave the region.
    fn marks(&self, offset: u64, bytes: u64, queue: usize) -> Option<Vec<Mark>> {
        if offset.checked_add(bytes).is_none_or(|end| end > self.bytes) {
            return None;
        }
        let (start, end) = (self.start + offset, self.start + offset + bytes.max(1));
        Some(
            self.fences
                .range(..end)
                .rev()
                .take_while(|(_, (e, _))| *e > start)
                .flat_map(|(_, (_, fences))| fences.others(queue).cloned())
                .collect(),
        )
    }

    /// Records `fences` for the arena bytes `[start, end)`.
    fn release(&mut self, start: u64, end: u64, fences: Fences<Mark>) {
        self.carve(start, end);
        self.fences.insert(start, (end, fences));
    }

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

/// The pinned host arena: one page-locked allocation holding the plan's host tensors.
struct HostArena {
    /// Its first byte.
    base: *mut u8,
    /// Its bytes and their fences (the region starts at 0).
    planned: Planned,
}

/// The mutable state behind [`Device`].
struct State {
    arena: OffsetAllocator<Mark>,
    /// The plan's region, once [`Device::plan`] made it.
    planned: Option<Planned>,
    /// The pinned host arena, once [`Device::plan_host`] made it.
    host: Option<HostArena>,
    marks: Marks,
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
                host: None,
                marks: Marks::default(),
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

    /// The pinned host arena's bytes (0 before [`Device::plan_host`]).
    pub fn host_pinned(&self) -> u64 {
        self.state.borrow().host.as_ref().map_or(0, |h| h.planned.bytes)
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
        let marks = {
            let state = self.state.borrow();
            state
                .planned
                .as_ref()
                .and_then(|p| p.marks(offset, bytes, queue.index()))
                .ok_or(CudaError::ArenaFull { wanted: bytes, stats: state.arena.stats() })?
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

    /// Allocates the pinned host arena of `bytes` that holds a plan's host tensors, once:
    /// a second plan must fit the first one's arena. A plan without host tensors (0 bytes)
    /// allocates nothing.
    pub fn plan_host(&self, bytes: u64) -> Result<(), CudaError> {
        let mut state = self.state.borrow_mut();
        if let Some(host) = &state.host {
            return match bytes <= host.planned.bytes {
                true => Ok(()),
                false => Err(CudaError::HostArenaFull { offset: 0, wanted: bytes, arena: host.planned.bytes }),
            };
        }
        if bytes == 0 {
            return Ok(());
        }
        let len = usize::try_from(bytes).map_err(|_| CudaError::TooLarge(format!("a host arena of {bytes} bytes")))?;
        self.ctx.bind_to_thread()?;
        // SAFETY: page-locked memory, written before it is read; freed in `Drop` after
        // the device is idle.
        let base = unsafe { result::malloc_host(len, 0) }.map_err(|_| CudaError::HostMemory(bytes))?;
        state.host =
            Some(HostArena { base: base.cast(), planned: Planned { start: 0, bytes, fences: BTreeMap::new() } });
        Ok(())
    }

    /// The planned block of `bytes` at `offset` of the pinned host arena, for a copy on
    /// `queue` (which waits for the other queues' last uses of those bytes), or for the
    /// calling thread to write (`None`: waits until every queue is done with them).
    pub fn host_planned(
        self: &Rc<Self>,
        offset: u64,
        bytes: u64,
        queue: Option<Queue>,
    ) -> Result<HostBlock, CudaError> {
        let len = usize::try_from(bytes).map_err(|_| CudaError::TooLarge(format!("a host buffer of {bytes} bytes")))?;
        let marks = {
            let state = self.state.borrow();
            let arena = state.host.as_ref().map_or(0, |h| h.planned.bytes);
            state
                .host
                .as_ref()
                .and_then(|h| h.planned.marks(offset, bytes, queue.map_or(usize::MAX, Queue::index)))
                .ok_or(CudaError::HostArenaFull { offset, wanted: bytes, arena })?
        };
        for mark in &marks {
            match queue {
                Some(queue) => self.wait(queue, mark)?,
                None => mark.synchronize()?,
            }
        }
        let used = queue.map_or(0, |q| 1 << q.index());
        Ok(HostBlock { device: Rc::clone(self), memory: HostMemory::Planned(offset), len, used: Cell::new(used) })
    }

    /// A pageable host block of `bytes`, outside the plan (a value on its way to the
    /// device, a result read back): CUDA stages a copy from it before the call returns,
    /// and completes a copy into it before the call returns.
    pub fn host_pageable(self: &Rc<Self>, bytes: u64) -> Result<HostBlock, CudaError> {
        let len = usize::try_from(bytes).map_err(|_| CudaError::TooLarge(format!("a host buffer of {bytes} bytes")))?;
        Ok(HostBlock { device: Rc::clone(self), memory: HostMemory::Pageable(vec![0; len]), len, used: Cell::new(0) })
    }

    /// The first byte of the pinned host arena.
    fn host_base(&self) -> Option<*mut u8> {
        self.state.borrow().host.as_ref().map(|h| h.base)
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
            planned.release(offset, offset + bytes.max(1), fences);
        }
    }

    /// Records when the queues in `used` are done with the host arena's bytes
    /// `[offset, offset + bytes)`.
    fn release_host(&self, offset: u64, bytes: u64, used: u8) {
        let mut state = self.state.borrow_mut();
        let fences = self.release_fences(&mut state, used);
        if let Some(host) = state.host.as_mut() {
            host.planned.release(offset, offset + bytes.max(1), fences);
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // Pinned and device memory is freed only once no queue can still use it.
        let idle = self.ctx.synchronize().is_ok();
        let state = self.state.get_mut();
        state.marks = Marks::default();
        if !idle {
            // A failed context: freeing memory a queue may still use is worse than leaking.
            return;
        }
        // SAFETY: both arenas were allocated here and nothing uses them any more (blocks
        // hold the device alive, so none is left).
        if let Some(host) = state.host.take() {
            let _ = unsafe { result::free_host(host.base.cast()) };
        }
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

/// Where a host block's bytes are.
enum HostMemory {
    /// At this offset of the pinned host arena.
    Planned(u64),
    /// In pageable memory of its own.
    Pageable(Vec<u8>),
}

/// A block of host memory: a planned block of the pinned host arena (its fences recorded
/// when dropped), or pageable memory outside the plan.
pub struct HostBlock {
    device: Rc<Device>,
    memory: HostMemory,
    len: usize,
    used: Cell<u8>,
}

impl HostBlock {
    /// The block's bytes, to write from or read into the calling thread; no queue may use
    /// the block meanwhile.
    pub fn bytes_mut(&mut self) -> Result<&mut [u8], CudaError> {
        match &mut self.memory {
            HostMemory::Pageable(bytes) => Ok(bytes),
            HostMemory::Planned(offset) => {
                let base = self.device.host_base().ok_or(CudaError::HostMemory(self.len as u64))?;
                // SAFETY: `host_planned` checked that the block lies in the arena, which
                // lives as long as the device this block holds; the executor keeps one
                // live tensor per planned byte, and the borrow of `self` keeps this the
                // only slice of the block.
                Ok(unsafe { std::slice::from_raw_parts_mut(base.add(*offset as usize), self.len) })
            }
        }
    }

    /// The block's bytes.
    pub fn bytes(&self) -> Result<&[u8], CudaError> {
        match &self.memory {
            HostMemory::Pageable(bytes) => Ok(bytes),
            HostMemory::Planned(offset) => {
                let base = self.device.host_base().ok_or(CudaError::HostMemory(self.len as u64))?;
                // SAFETY: as in `bytes_mut`.
                Ok(unsafe { std::slice::from_raw_parts(base.add(*offset as usize), self.len) })
            }
        }
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
        if let HostMemory::Planned(offset) = self.memory {
            self.device.release_host(offset, self.len as u64, self.used.get());
        }
    }
}

impl std::fmt::Debug for HostBlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.memory {
            HostMemory::Planned(offset) => write!(f, "HostBlock({} bytes at +{offset})", self.len),
            HostMemory::Pageable(_) => write!(f, "HostBlock({} pageable bytes)", self.len),
        }
    }
}
