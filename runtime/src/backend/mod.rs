//! The interface between the executor and a device: buffers, three queues and events.
//!
//! A backend owns device buffers (device memory) and host buffers (pinned host memory),
//! and three in-order queues: [`Queue::Compute`] runs kernels, [`Queue::DeviceToHost`]
//! copies device buffers to host buffers, [`Queue::HostToDevice`] copies host buffers to
//! device buffers. Work on different queues may overlap; an [`Backend::record`]ed event
//! marks the work issued so far on a queue, and [`Backend::wait`] makes a queue's later
//! work start only after that event. The executor issues every wait a data or control
//! edge between queues needs, on every backend.
//!
//! Every tensor of a program has a [`Block`] in its pool's arena: the offset the static
//! placement ([`lms_proto::contract::placement`]) gives it. The executor asks the backend
//! once for both arenas ([`Backend::reserve`]) and names the block of every buffer it has
//! the backend make; buffers given no block (values on their way to the device, results
//! read back) live outside the arenas.

pub mod cpu;
pub mod cuda;

use crate::error::RuntimeError;
use crate::tensor::HostTensor;
use lms_proto::contract::{Pool, Program};

/// One of a backend's three in-order queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Queue {
    /// Kernels.
    Compute,
    /// Copies from device to host memory (swap-outs, reading results).
    DeviceToHost,
    /// Copies from host to device memory (swap-ins, initial values).
    HostToDevice,
}

impl Queue {
    /// The queue's index: 0, 1, 2 in declaration order.
    pub fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Queue::Compute => "compute",
            Queue::DeviceToHost => "device-to-host",
            Queue::HostToDevice => "host-to-device",
        })
    }
}

/// Where a tensor's bytes live: its block in its pool's arena, as the static placement
/// puts it. The block holds `bytes` bytes from `offset`; the placement keeps the
/// [`lms_proto::contract::placement::aligned`] size free for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// The arena.
    pub pool: Pool,
    /// The tensor's id in the program.
    pub tensor: usize,
    /// Its offset in the arena, in bytes.
    pub offset: u64,
    /// Its bytes.
    pub bytes: u64,
}

impl Block {
    /// The first byte after the tensor.
    pub fn end(&self) -> u64 {
        self.offset + self.bytes
    }
}

/// What a kernel may know of the run beyond its node: the run's seed and the step being
/// executed. Random kernels (`DropoutTrain`) draw from these, so a node's randomness
/// depends on (run seed, its own `seed` attribute, step) and on nothing else.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelContext {
    /// The run's seed ([`crate::RunOptions::seed`]).
    pub run_seed: u64,
    /// The training step, counted from 0 for the first step of a session.
    pub step: u64,
}

/// A device with buffers, queues and events, as the executor drives it.
pub trait Backend {
    /// A buffer in device memory.
    type DeviceBuffer;
    /// A buffer in (pinned) host memory.
    type HostBuffer;
    /// A point in a queue's work; later work on any queue can be made to wait for it.
    type Event: Clone;
    /// A point in time on a queue, for per-op traces: the CPU's clock on the CPU backend,
    /// a timing event on CUDA.
    type Stamp;

    /// The backend's name, for messages.
    fn name(&self) -> &'static str;

    /// The device bytes the backend allocates beside the plan's device arena whatever the
    /// program (library workspaces, flags): the device limit counts them with the arena.
    fn fixed_device_bytes(&self) -> u64 {
        0
    }

    /// Allocates the two arenas a program runs in, once per session: `device_bytes` of
    /// device memory and `host_bytes` of host memory. Memory the system refuses is
    /// [`RuntimeError::Allocation`].
    fn reserve(&mut self, device_bytes: u64, host_bytes: u64) -> Result<(), RuntimeError>;

    /// A host buffer holding `tensor`, written now by the calling thread: in `block` of the
    /// host arena, or outside the arenas (`None`: a value on its way to the device).
    fn host_buffer(&mut self, tensor: HostTensor, block: Option<Block>) -> Result<Self::HostBuffer, RuntimeError>;

    /// The contents of a host buffer; the work writing it must be complete
    /// ([`Backend::synchronize`]).
    fn read_host(&self, buffer: &Self::HostBuffer) -> Result<HostTensor, RuntimeError>;

    /// Issues a copy of `src` into `block` of the device arena on [`Queue::HostToDevice`].
    fn upload(&mut self, src: &Self::HostBuffer, block: Block) -> Result<Self::DeviceBuffer, RuntimeError>;

    /// Issues a copy of `src` into a host buffer on [`Queue::DeviceToHost`]: `block` of the
    /// host arena, or outside the arenas (`None`: a result read back).
    fn download(&mut self, src: &Self::DeviceBuffer, block: Option<Block>) -> Result<Self::HostBuffer, RuntimeError>;

    /// Issues on `queue` a copy of `src` into `block` of the device arena (an update
    /// edge: the new value into its variable's block).
    fn assign(
        &mut self,
        queue: Queue,
        src: &Self::DeviceBuffer,
        block: Block,
    ) -> Result<Self::DeviceBuffer, RuntimeError>;

    /// Issues node `node` of `program` on [`Queue::Compute`], reading `inputs` (one per
    /// input slot, `None` for an omitted optional input); returns one device buffer per
    /// output, of the types the program declares, in `outputs` (the outputs' blocks, in
    /// order). `scratch` is the node's scratch block in the device arena, when it takes one
    /// ([`lms_proto::ops::scratch`]). `context` is the run's seed and step.
    fn execute(
        &mut self,
        program: &Program,
        node: usize,
        inputs: &[Option<&Self::DeviceBuffer>],
        outputs: &[Block],
        scratch: Option<Block>,
        context: &KernelContext,
    ) -> Result<Vec<Self::DeviceBuffer>, RuntimeError>;

    /// An event marking the work issued so far on `queue`.
    fn record(&mut self, queue: Queue) -> Result<Self::Event, RuntimeError>;

    /// Makes work issued later on `queue` wait until `event` has completed.
    fn wait(&mut self, queue: Queue, event: &Self::Event) -> Result<(), RuntimeError>;

    /// Blocks until the work issued on every queue has completed.
    fn synchronize(&mut self) -> Result<(), RuntimeError>;

    /// A timestamp of when the work issued so far on `queue` completes (traces).
    fn stamp(&mut self, queue: Queue) -> Result<Self::Stamp, RuntimeError>;

    /// Microseconds from `earlier` to `later`, two completed stamps (after
    /// [`Backend::synchronize`]).
    fn micros_between(&self, earlier: &Self::Stamp, later: &Self::Stamp) -> Result<f64, RuntimeError>;
}
