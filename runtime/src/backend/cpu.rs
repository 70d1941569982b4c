//! The CPU reference backend: buffers are host tensors and kernels are
//! [`crate::cpu::kernels::forward`] (ONNX ops) and [`crate::cpu::kernels::lms`] (the ops
//! of the `lms` domain).
//!
//! Each queue runs its work immediately, in issue order, so every event is complete when it
//! is recorded. The backend still keeps the books a GPU would need: every buffer remembers
//! the queue and position of the work that wrote it, every queue a vector clock of the work
//! it has waited for, and work that reads a buffer from another queue without having waited
//! for it fails. A missing wait in the executor is thus an error here, not only on a GPU.
//! Before a kernel runs or a buffer is copied, the system is asked for the bytes
//! ([`check_allocatable`]): memory it refuses is an error naming the node, not an abort.

use super::{Backend, KernelContext, Queue};
use crate::attrs::Attrs;
use crate::cpu::kernels;
use crate::error::RuntimeError;
use crate::memory::{check_allocatable, node_and_op};
use crate::tensor::HostTensor;
use lms_proto::contract::{Program, LMS_DOMAIN};

/// The work that wrote a buffer: its queue and its position there (0: written by the host).
#[derive(Clone, Copy, Debug)]
struct Stamp {
    queue: Queue,
    seq: u64,
}

/// A CPU backend buffer (device or host role): a host tensor and the work that wrote it.
#[derive(Clone, Debug)]
pub struct CpuBuffer {
    tensor: HostTensor,
    written: Stamp,
}

/// A CPU backend event: how far each queue's work is complete at that point (a vector clock).
#[derive(Clone, Debug)]
pub struct CpuEvent {
    clock: [u64; 3],
}

/// The CPU reference backend.
#[derive(Clone, Debug, Default)]
pub struct CpuBackend {
    /// Work items issued on each queue.
    issued: [u64; 3],
    /// Per queue: how far each queue's work is known complete before its next item starts.
    clocks: [[u64; 3]; 3],
    /// How far each queue's work is known complete to the calling thread.
    host_clock: [u64; 3],
}

impl CpuBackend {
    /// A backend with no work issued.
    pub fn new() -> CpuBackend {
        CpuBackend::default()
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

    fn host_buffer(&mut self, tensor: HostTensor) -> Result<CpuBuffer, RuntimeError> {
        Ok(CpuBuffer { tensor, written: Stamp { queue: Queue::Compute, seq: 0 } })
    }

    fn read_host(&self, buffer: &CpuBuffer) -> Result<HostTensor, RuntimeError> {
        let Stamp { queue, seq } = buffer.written;
        if self.host_clock[queue.index()] < seq {
            return Err(self.error(format!("a host buffer written on the {queue} queue is read before synchronizing")));
        }
        Ok(buffer.tensor.clone())
    }

    fn upload(&mut self, src: &CpuBuffer) -> Result<CpuBuffer, RuntimeError> {
        check_allocatable(src.tensor.byte_size() as u64, || "a host-to-device copy".into())?;
        let written = self.issue(Queue::HostToDevice, &[src.written])?;
        Ok(CpuBuffer { tensor: src.tensor.clone(), written })
    }

    fn download(&mut self, src: &CpuBuffer) -> Result<CpuBuffer, RuntimeError> {
        check_allocatable(src.tensor.byte_size() as u64, || "a device-to-host copy".into())?;
        let written = self.issue(Queue::DeviceToHost, &[src.written])?;
        Ok(CpuBuffer { tensor: src.tensor.clone(), written })
    }

    fn execute(
        &mut self,
        program: &Program,
        node: usize,
        inputs: &[Option<&CpuBuffer>],
        context: &KernelContext,
    ) -> Result<Vec<CpuBuffer>, RuntimeError> {
        let reads: Vec<Stamp> = inputs.iter().flatten().map(|b| b.written).collect();
        let written = self.issue(Queue::Compute, &reads)?;
        let n = program.node(node);
        let tensors: Vec<Option<&HostTensor>> = inputs.iter().map(|b| b.map(|b| &b.tensor)).collect();
        let (attrs, types) = (Attrs::new(&n.attributes), program.output_types(node));
        let bytes =
            program.node_outputs(node).iter().fold(0u64, |sum, &t| sum.saturating_add(program.tensor_type(t).bytes));
        check_allocatable(bytes, || node_and_op(n))?;
        let outputs = match n.domain.as_str() {
            LMS_DOMAIN => kernels::lms(&n.op, &attrs, &tensors, &types, context),
            _ => kernels::forward(&n.op, program.opset(node), &attrs, &tensors, &types),
        }
        .map_err(|source| RuntimeError::Kernel { node: n.name.clone(), source })?;
        Ok(outputs.into_iter().map(|tensor| CpuBuffer { tensor, written }).collect())
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

    fn buffer(b: &mut CpuBackend, v: f32) -> CpuBuffer {
        b.host_buffer(HostTensor::scalar(v)).unwrap()
    }

    #[test]
    fn cross_queue_reads_need_a_wait() {
        let mut b = CpuBackend::new();
        let host = buffer(&mut b, 1.0);
        let dev = b.upload(&host).unwrap();
        // The copy back reads a buffer the host-to-device queue wrote: no wait, an error.
        let err = b.download(&dev).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cpu backend: work on the device-to-host queue reads a buffer written on the \
             host-to-device queue without waiting for it"
        );
        let uploaded = b.record(Queue::HostToDevice).unwrap();
        b.wait(Queue::DeviceToHost, &uploaded).unwrap();
        let back = b.download(&dev).unwrap();
        assert!(b.read_host(&back).is_err(), "read before synchronize");
        b.synchronize().unwrap();
        assert_eq!(b.read_host(&back).unwrap(), HostTensor::scalar(1.0f32));
    }

    #[test]
    fn waits_are_transitive() {
        let mut b = CpuBackend::new();
        let host = buffer(&mut b, 2.0);
        let dev = b.upload(&host).unwrap();
        let e = b.record(Queue::HostToDevice).unwrap();
        b.wait(Queue::Compute, &e).unwrap();
        // Compute has seen the upload; an event on compute carries that to device-to-host.
        let c = b.record(Queue::Compute).unwrap();
        b.wait(Queue::DeviceToHost, &c).unwrap();
        assert!(b.download(&dev).is_ok());
        // Host-written buffers need no wait anywhere.
        assert!(b.upload(&buffer(&mut b.clone(), 3.0)).is_ok());
    }
}
