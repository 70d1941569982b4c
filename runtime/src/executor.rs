//! Runs a program's steps on a backend, with the memory accounting of `proto/OPS.md`.
//!
//! The program runs inside two arenas of exactly the sizes its static placement gives,
//! reserved on the backend once ([`Backend::reserve`]); a run whose arena exceeds its pool's
//! budget (the device arena counted with the backend's fixed reserve,
//! [`Backend::fixed_device_bytes`]) is refused before anything is placed ([`check_budget`],
//! naming the node).
//! Per node, in the program's order: its outputs are given their blocks in their pools
//! first (every tensor at its planned offset); the queue that runs it
//! (compute for kernels, device-to-host for `SwapOut`, host-to-device for `SwapIn`) waits
//! for the events of its inputs and of its control predecessors issued on other queues;
//! the node is issued and an event recorded; an update edge then copies the new tensor into
//! the variable's block; and the tensors whose last use this was are released
//! ([`lms_proto::contract::release`]). Graph outputs are read back and released when the step ends.
//! Kernels get a [`KernelContext`]: the run's seed and the number of steps run before.

use crate::backend::{Backend, Block, KernelContext, Queue};
use crate::cpu_time::thread_cpu_seconds;
use crate::error::RuntimeError;
use crate::memory::{check_allocatable, check_budget, node_and_op, Arena, Pool};
use crate::tensor::HostTensor;
use lms_proto::contract::{placement, Liveness};
use lms_proto::contract::{NodeKind, Program};
use lms_proto::ops::scratch;
use lms_proto::trace::{Lane, TraceEvent};
use std::collections::BTreeMap;
use std::time::Instant;

/// Time spent in the nodes of one op type during a step.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OpTime {
    /// Nodes of this op type that ran.
    pub calls: u64,
    /// Seconds spent issuing them (on the CPU backend: running them).
    pub seconds: f64,
}

/// What one training step measured.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StepReport {
    /// Largest number of device bytes live during the step.
    pub peak_device_bytes: u64,
    /// Largest number of host-pool bytes live during the step.
    pub peak_host_bytes: u64,
    /// The end of the highest block the step used in the device arena (blocks are aligned
    /// as the placement counts them): the plan's `arena_device_bytes` when every tensor ran.
    pub arena_device_bytes: u64,
    /// The same in the host arena: the plan's `arena_host_bytes`.
    pub arena_host_bytes: u64,
    /// Bytes copied device → host by `SwapOut` nodes.
    pub bytes_d2h: u64,
    /// Bytes copied host → device by `SwapIn` nodes.
    pub bytes_h2d: u64,
    /// Time per op type.
    pub op_seconds: BTreeMap<String, OpTime>,
    /// Wall-clock seconds of the whole step, reading back the outputs included.
    pub step_seconds: f64,
    /// CPU seconds the calling thread spent on the step ([`crate::cpu_time`]): on the CPU
    /// backend, the step's time less the time the system ran other work; on a GPU, the
    /// host's share.
    pub step_cpu_seconds: f64,
    /// Per node, when and how long it ran on its queue, from the step's start, and the
    /// calling thread's CPU time while it was issued (argument `cpu_us`; empty unless
    /// [`Executor::set_tracing`] is on).
    pub trace: Vec<TraceEvent>,
}

/// The stamps of one traced step: its origin and each node's span.
struct Trace<B: Backend> {
    origin: Option<B::Stamp>,
    spans: Vec<Span<B>>,
}

/// A node's start and end stamps on its queue, and the CPU time of issuing it.
struct Span<B: Backend> {
    node: usize,
    queue: Queue,
    start: B::Stamp,
    end: B::Stamp,
    cpu_seconds: f64,
}

/// A tensor's storage.
enum Stored<B: Backend> {
    Device(B::DeviceBuffer),
    Host(B::HostBuffer),
}

/// A stored tensor and the event after which its storage is written.
struct Held<B: Backend> {
    stored: Stored<B>,
    ready: Ready<B>,
}

/// An event and the queue it was recorded on.
struct Ready<B: Backend> {
    queue: Queue,
    event: B::Event,
}

impl<B: Backend> Clone for Ready<B> {
    fn clone(&self) -> Self {
        Ready { queue: self.queue, event: self.event.clone() }
    }
}

/// A backend error of work done for node `node` (a copy into its block), naming the node.
fn at_node(node: &lms_proto::lms::Node) -> impl Fn(RuntimeError) -> RuntimeError + '_ {
    move |e| match e {
        RuntimeError::Backend { backend, message } => {
            RuntimeError::Backend { backend, message: format!("{}: {message}", node_and_op(node)) }
        }
        other => other,
    }
}

/// An input's tensor id and storage.
fn storage<B: Backend>(input: Option<(usize, &Held<B>)>) -> Option<(usize, &Stored<B>)> {
    input.map(|(t, h)| (t, &h.stored))
}

/// The device arena and the host pool.
struct Pools {
    device: Arena,
    host: Arena,
}

impl Pools {
    fn get(&mut self, pool: Pool) -> &mut Arena {
        match pool {
            Pool::Device => &mut self.device,
            Pool::Host => &mut self.host,
        }
    }
}

/// Executes the steps of one program on one backend and holds the tensors between them.
pub struct Executor<B: Backend> {
    program: Program,
    backend: B,
    pools: Pools,
    liveness: Liveness,
    /// Storage per tensor id.
    held: Vec<Option<Held<B>>>,
    /// Per node: the event recorded after it was issued in the current step.
    done: Vec<Option<Ready<B>>>,
    /// Per tensor: the variable tensor whose storage it became through an update edge.
    alias: Vec<Option<usize>>,
    /// The run's seed, passed to kernels.
    run_seed: u64,
    /// Steps started so far.
    steps: u64,
    /// While tracing: the step's origin and the spans of the nodes issued so far.
    trace: Option<Trace<B>>,
    /// Scratch bytes of each node, by node index (`lms_proto::ops::scratch`).
    scratch: Vec<u64>,
    /// Whether a step reads the graph outputs back to the host (else it waits for every
    /// queue and returns none).
    reading_outputs: bool,
}

impl<B: Backend> Executor<B> {
    /// An executor with budgets of `device_memory` and `host_memory` bytes whose kernels
    /// draw randomness from `run_seed`: checks that the program's arenas fit the budgets
    /// (the device arena with `backend`'s fixed reserve) and reserves them on `backend`;
    /// nothing is placed yet.
    pub fn new(
        program: Program,
        mut backend: B,
        device_memory: u64,
        host_memory: u64,
        run_seed: u64,
    ) -> Result<Executor<B>, RuntimeError> {
        let device = placement::of_program(&program, Pool::Device);
        let host = placement::of_program(&program, Pool::Host);
        check_budget(&program, Pool::Device, &device, backend.fixed_device_bytes(), device_memory)?;
        check_budget(&program, Pool::Host, &host, 0, host_memory)?;
        backend.reserve(device.arena_bytes, host.arena_bytes)?;
        let liveness = Liveness::new(&program);
        let (tensors, nodes) = (program.tensor_count(), program.node_count());
        Ok(Executor {
            backend,
            pools: Pools { device: Arena::new(Pool::Device, device), host: Arena::new(Pool::Host, host) },
            liveness,
            held: (0..tensors).map(|_| None).collect(),
            done: (0..nodes).map(|_| None).collect(),
            alias: vec![None; tensors],
            run_seed,
            steps: 0,
            trace: None,
            reading_outputs: true,
            scratch: scratch::of_program(&program),
            program,
        })
    }

    /// Whether the steps record when each node runs on its queue ([`StepReport::trace`]).
    pub fn set_tracing(&mut self, on: bool) {
        self.trace = on.then(|| Trace { origin: None, spans: Vec::new() });
    }

    /// Whether later steps read the graph outputs back to the host (the default) or only
    /// wait for every queue and return no outputs, so that a step's time is its kernels'
    /// and copies' alone: what `lms profile`'s probes measure.
    pub fn set_reading_outputs(&mut self, on: bool) {
        self.reading_outputs = on;
    }

    /// The program being run.
    pub fn program(&self) -> &Program {
        &self.program
    }

    /// Makes the tensor of parameterized node `node` resident: places it in its block,
    /// then fills it with `value()` (uploaded when it lives in device memory).
    pub fn place(
        &mut self,
        node: usize,
        value: impl FnOnce(&Program) -> Result<HostTensor, RuntimeError>,
    ) -> Result<(), RuntimeError> {
        let t = self.parameter_tensor(node)?;
        let program = &self.program;
        let n = program.node(node);
        let bytes = program.tensor_type(t).bytes;
        self.pools.get(program.pool(t)).alloc(t, program.tensor_name(t), bytes)?;
        check_allocatable(bytes, || node_and_op(n))?;
        let value = value(program)?;
        self.store(node, t, value).map_err(at_node(self.program.node(node)))
    }

    /// Gives the placed tensor of parameterized node `node` a new value (a new batch of
    /// an input, from the next step on); its pool accounting is unchanged.
    pub fn replace(&mut self, node: usize, value: HostTensor) -> Result<(), RuntimeError> {
        let t = self.parameter_tensor(node)?;
        if self.held[t].is_none() {
            return Err(RuntimeError::Internal(format!("node '{}' was not placed", self.program.node(node).name)));
        }
        self.store(node, t, value).map_err(at_node(self.program.node(node)))
    }

    /// The steps started so far; kernels draw per-step randomness (dropout masks) from it.
    pub fn steps(&self) -> u64 {
        self.steps
    }

    /// Continues a run as if `steps` steps had already run (resuming a saved run).
    pub fn set_steps(&mut self, steps: u64) {
        self.steps = steps;
    }

    /// The output tensor of parameterized node `node`.
    fn parameter_tensor(&self, node: usize) -> Result<usize, RuntimeError> {
        match (self.program.kind(node), self.program.node_outputs(node)) {
            (NodeKind::Parameter, &[t]) => Ok(t),
            _ => Err(RuntimeError::Internal(format!("node {node} is not a parameterized vertex"))),
        }
    }

    /// Stores `value` in the block of tensor `t` of parameterized node `node`, uploaded
    /// when it lives in device memory.
    fn store(&mut self, node: usize, t: usize, value: HostTensor) -> Result<(), RuntimeError> {
        let pool = self.program.pool(t);
        let block = self.pools.get(pool).block(t).ok_or_else(|| {
            RuntimeError::Internal(format!("tensor '{}' is stored but not placed", self.program.tensor_name(t)))
        })?;
        let stored = match pool {
            Pool::Device => {
                let staged = self.backend.host_buffer(value, None)?;
                Stored::Device(self.backend.upload(&staged, block)?)
            }
            Pool::Host => Stored::Host(self.backend.host_buffer(value, Some(block))?),
        };
        let ready = Ready { queue: Queue::HostToDevice, event: self.backend.record(Queue::HostToDevice)? };
        self.done[node] = Some(ready.clone());
        self.held[t] = Some(Held { stored, ready });
        Ok(())
    }

    /// Runs one step over the program's order; returns the graph outputs' values and
    /// the step's measurements. Every parameterized vertex must have been placed.
    pub fn step(&mut self) -> Result<(Vec<HostTensor>, StepReport), RuntimeError> {
        let start = Instant::now();
        let start_cpu = thread_cpu_seconds();
        self.release_transient()?;
        self.pools.device.reset_peak();
        self.pools.host.reset_peak();
        let mut report = StepReport::default();
        let context = KernelContext { run_seed: self.run_seed, step: self.steps };
        self.steps += 1;
        if let Some(trace) = &mut self.trace {
            trace.origin = Some(self.backend.stamp(Queue::Compute)?);
            trace.spans.clear();
        }
        for position in 0..self.program.order().len() {
            let node = self.program.order()[position];
            if self.program.kind(node) == NodeKind::Parameter {
                continue;
            }
            // The node's scratch block, at its planned offset while it runs.
            let scratch = (self.scratch[node] > 0).then(|| self.program.tensor_count() + position);
            let scratch_block = match scratch {
                Some(block) => {
                    let name = format!("{} scratch", self.program.node(node).name);
                    Some(self.pools.device.alloc(block, &name, self.scratch[node])?)
                }
                None => None,
            };
            self.run(node, scratch_block, &context, &mut report)?;
            if let Some(block) = scratch {
                self.pools.device.free(block)?;
            }
            self.apply_updates(node)?;
            let Executor { program, pools, held, liveness, .. } = self;
            for &t in liveness.released_after(position) {
                pools.get(program.pool(t)).free(t)?;
                held[t] = None;
            }
        }
        let outputs = match self.reading_outputs {
            true => self.program.outputs().to_vec(),
            false => {
                self.backend.synchronize()?;
                Vec::new()
            }
        };
        let outputs = outputs.into_iter().map(|t| self.read(t)).collect::<Result<Vec<_>, _>>()?;
        report.peak_device_bytes = self.pools.device.peak();
        report.peak_host_bytes = self.pools.host.peak();
        report.arena_device_bytes = self.pools.device.high();
        report.arena_host_bytes = self.pools.host.high();
        report.trace = self.take_trace()?;
        self.release_transient()?;
        report.step_seconds = start.elapsed().as_secs_f64();
        report.step_cpu_seconds = thread_cpu_seconds() - start_cpu;
        Ok((outputs, report))
    }

    /// The step's spans as trace events, once every queue's work has completed.
    fn take_trace(&mut self) -> Result<Vec<TraceEvent>, RuntimeError> {
        let Some(Trace { origin: Some(origin), spans }) = &mut self.trace else { return Ok(Vec::new()) };
        self.backend.synchronize()?;
        let mut events = Vec::with_capacity(spans.len());
        for span in spans.drain(..) {
            let n = self.program.node(span.node);
            let lane = match span.queue {
                Queue::Compute => Lane::Compute,
                Queue::DeviceToHost => Lane::DeviceToHost,
                Queue::HostToDevice => Lane::HostToDevice,
            };
            events.push(TraceEvent {
                name: n.name.clone(),
                op: n.op.clone(),
                lane,
                start_us: self.backend.micros_between(origin, &span.start)?,
                dur_us: self.backend.micros_between(&span.start, &span.end)?,
                args: vec![("cpu_us".into(), format!("{:.3}", span.cpu_seconds * 1e6))],
            });
        }
        Ok(events)
    }

    /// The current value of tensor `tensor` (a resident tensor, or one still held in the
    /// step), copied back to the host.
    pub fn read(&mut self, tensor: usize) -> Result<HostTensor, RuntimeError> {
        let Held { stored, ready } = Self::held(&self.program, &self.held, &self.alias, tensor)?;
        let copy;
        let host = match stored {
            Stored::Host(h) => h,
            Stored::Device(d) => {
                if ready.queue != Queue::DeviceToHost {
                    self.backend.wait(Queue::DeviceToHost, &ready.event)?;
                }
                copy = self.backend.download(d, None)?;
                &copy
            }
        };
        self.backend.synchronize()?;
        self.backend.read_host(host)
    }

    /// The storage of `tensor`, following an update edge to its variable.
    fn held<'a>(
        program: &Program,
        held: &'a [Option<Held<B>>],
        alias: &[Option<usize>],
        tensor: usize,
    ) -> Result<&'a Held<B>, RuntimeError> {
        let t = alias[tensor].unwrap_or(tensor);
        held[t].as_ref().ok_or_else(|| {
            RuntimeError::Internal(format!("tensor '{}' is read but holds no value", program.tensor_name(tensor)))
        })
    }

    /// Allocates the outputs of `node`, makes its queue wait for what it depends on,
    /// issues it and records its event.
    fn run(
        &mut self,
        node: usize,
        scratch: Option<Block>,
        context: &KernelContext,
        report: &mut StepReport,
    ) -> Result<(), RuntimeError> {
        let Executor { program, backend, pools, held, done, alias, trace, .. } = self;
        let n = program.node(node);
        let blocks = program
            .node_outputs(node)
            .iter()
            .map(|&t| pools.get(program.pool(t)).alloc(t, program.tensor_name(t), program.tensor_type(t).bytes))
            .collect::<Result<Vec<_>, _>>()?;
        let kind = program.kind(node);
        let queue = match kind {
            NodeKind::SwapOut => Queue::DeviceToHost,
            NodeKind::SwapIn => Queue::HostToDevice,
            NodeKind::Kernel | NodeKind::Parameter => Queue::Compute,
        };
        let mut inputs: Vec<Option<(usize, &Held<B>)>> = Vec::with_capacity(program.node_inputs(node).len());
        for &slot in program.node_inputs(node) {
            inputs.push(slot.map(|t| Self::held(program, held, alias, t).map(|h| (t, h))).transpose()?);
        }
        let mut waits: Vec<&Ready<B>> = inputs.iter().flatten().map(|(_, h)| &h.ready).collect();
        for &p in program.control_predecessors(node) {
            let ready = done[p].as_ref().ok_or_else(|| {
                RuntimeError::Internal(format!("node '{}' runs before its control predecessor", n.name))
            })?;
            waits.push(ready);
        }
        for ready in waits.into_iter().filter(|r| r.queue != queue) {
            backend.wait(queue, &ready.event)?;
        }
        let misplaced =
            |t: usize| RuntimeError::Internal(format!("tensor '{}' is in the wrong pool", program.tensor_name(t)));
        let started = Instant::now();
        let span_start = trace.as_ref().map(|_| backend.stamp(queue)).transpose()?;
        let cpu_start = trace.as_ref().map(|_| thread_cpu_seconds());
        let only = |blocks: &[crate::backend::Block]| match blocks {
            &[block] => Ok(block),
            _ => Err(RuntimeError::Internal(format!("node '{}' has {} outputs, not one", n.name, blocks.len()))),
        };
        let outputs: Vec<Stored<B>> = match (kind, storage(inputs.first().copied().flatten())) {
            (NodeKind::SwapOut, Some((t, Stored::Device(x)))) => {
                report.bytes_d2h += program.tensor_type(t).bytes;
                vec![Stored::Host(backend.download(x, Some(only(&blocks)?)).map_err(at_node(n))?)]
            }
            (NodeKind::SwapIn, Some((t, Stored::Host(x)))) => {
                report.bytes_h2d += program.tensor_type(t).bytes;
                vec![Stored::Device(backend.upload(x, only(&blocks)?).map_err(at_node(n))?)]
            }
            (NodeKind::SwapOut | NodeKind::SwapIn, Some((t, _))) => return Err(misplaced(t)),
            (NodeKind::SwapOut | NodeKind::SwapIn, None) => {
                return Err(RuntimeError::Internal(format!("node '{}' has no input", n.name)));
            }
            (NodeKind::Kernel | NodeKind::Parameter, _) => {
                let buffers = inputs
                    .iter()
                    .map(|&input| match storage(input) {
                        None => Ok(None),
                        Some((_, Stored::Device(b))) => Ok(Some(b)),
                        Some((t, Stored::Host(_))) => Err(misplaced(t)),
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                backend
                    .execute(program, node, &buffers, &blocks, scratch, context)?
                    .into_iter()
                    .map(Stored::Device)
                    .collect()
            }
        };
        if let (Some(start), Some(cpu_start), Some(trace)) = (span_start, cpu_start, trace.as_mut()) {
            let cpu_seconds = thread_cpu_seconds() - cpu_start;
            trace.spans.push(Span { node, queue, start, end: backend.stamp(queue)?, cpu_seconds });
        }
        let ready = Ready { queue, event: backend.record(queue)? };
        let time = report.op_seconds.entry(n.op.clone()).or_default();
        time.calls += 1;
        time.seconds += started.elapsed().as_secs_f64();
        if outputs.len() != program.node_outputs(node).len() {
            return Err(RuntimeError::Internal(format!(
                "node '{}' made {} outputs, the graph declares {}",
                n.name,
                outputs.len(),
                program.node_outputs(node).len()
            )));
        }
        for (&t, stored) in program.node_outputs(node).iter().zip(outputs) {
            held[t] = Some(Held { stored, ready: ready.clone() });
        }
        done[node] = Some(ready);
        Ok(())
    }

    /// Copies each tensor that `node` writes through an update edge into its variable's
    /// block, on the queue that made it; the variable's old value is overwritten.
    fn apply_updates(&mut self, node: usize) -> Result<(), RuntimeError> {
        let Executor { program, backend, pools, held, alias, .. } = self;
        for u in program.updates().iter().filter(|u| program.producer(u.tensor) == node) {
            let variable = program.node_outputs(u.variable)[0];
            let name = program.tensor_name(u.tensor);
            let new = held[u.tensor]
                .take()
                .ok_or_else(|| RuntimeError::Internal(format!("update '{name}' holds no value")))?;
            let (Stored::Device(value), Pool::Device, Some(block)) =
                (&new.stored, program.pool(variable), pools.get(Pool::Device).block(variable))
            else {
                return Err(RuntimeError::Internal(format!(
                    "update '{name}' does not copy a device tensor into a live device variable"
                )));
            };
            let queue = new.ready.queue;
            let stored = Stored::Device(backend.assign(queue, value, block).map_err(at_node(program.node(node)))?);
            held[variable] = Some(Held { stored, ready: Ready { queue, event: backend.record(queue)? } });
            alias[u.tensor] = Some(variable);
        }
        Ok(())
    }

    /// Releases every tensor that is not resident, and forgets the step's events and
    /// update aliases.
    fn release_transient(&mut self) -> Result<(), RuntimeError> {
        for t in 0..self.program.tensor_count() {
            if !self.program.is_resident(t) {
                let arena = self.pools.get(self.program.pool(t));
                if arena.is_live(t) {
                    arena.free(t)?;
                }
                self.held[t] = None;
            }
            self.alias[t] = None;
        }
        for n in 0..self.program.node_count() {
            if self.program.kind(n) != NodeKind::Parameter {
                self.done[n] = None;
            }
        }
        Ok(())
    }
}
