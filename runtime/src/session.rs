//! A training run: a program placed on a backend with its variables initialised and a
//! synthetic batch (or batches of given data, [`Session::feed`]), stepped one training
//! step at a time.

use crate::backend::Backend;
use crate::error::RuntimeError;
use crate::executor::{Executor, StepReport};
use crate::init::initial_value;
use crate::memory::{default_host_memory, machine_memory};
use crate::tensor::HostTensor;
use lms_proto::contract::{NodeKind, Program, INPUT_OP, VARIABLE_OP};
use std::collections::BTreeMap;

/// The budgets and seed of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunOptions {
    /// Device memory budget in bytes.
    pub device_memory: u64,
    /// Host (pinned) pool budget in bytes.
    pub host_memory: u64,
    /// Seed of variable initialisation, synthetic inputs and random kernels (dropout masks).
    pub seed: u64,
}

impl Default for RunOptions {
    /// The machine's memory as the device limit, half of it for the host pool, seed 0.
    fn default() -> Self {
        RunOptions { device_memory: machine_memory(), host_memory: default_host_memory(), seed: 0 }
    }
}

/// The result of one training step.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The loss: graph output 0 when it is an f32 scalar (a training graph),
    /// `None` for a graph without one (an inference graph).
    pub loss: Option<f32>,
    /// Every graph output, in declaration order (output 0 is the loss).
    pub outputs: Vec<HostTensor>,
    /// What the step measured.
    pub report: StepReport,
}

/// A program ready to train on a backend.
pub struct Session<B: Backend> {
    executor: Executor<B>,
}

impl<B: Backend> Session<B> {
    /// Places `program` on `backend`: refuses it when an arena of its static placement
    /// exceeds its budget ([`RuntimeError::OutOfMemory`], naming the node), reserves the
    /// two arenas, and makes every variable and input resident in its block (in the
    /// program's order) with its initial value drawn from `options.seed`. The inputs are
    /// drawn once: every step trains on the same synthetic batch.
    pub fn new(program: Program, backend: B, options: RunOptions) -> Result<Session<B>, RuntimeError> {
        Session::with_values(program, backend, options, &BTreeMap::new())
    }

    /// [`Session::new`], but the variables and inputs named in `values` start with those
    /// values (type-checked) instead of drawn ones: given data, or perturbed weights for a
    /// gradient check.
    pub fn with_values(
        program: Program,
        backend: B,
        options: RunOptions,
        values: &BTreeMap<String, HostTensor>,
    ) -> Result<Session<B>, RuntimeError> {
        let parameters: Vec<usize> =
            program.order().iter().copied().filter(|&n| program.kind(n) == NodeKind::Parameter).collect();
        let mut executor = Executor::new(program, backend, options.device_memory, options.host_memory, options.seed)?;
        for node in parameters {
            executor.place(node, |program| match values.get(&program.node(node).name) {
                Some(value) => given_value(program, node, value),
                None => initial_value(program, node, options.seed),
            })?;
        }
        Ok(Session { executor })
    }

    /// The program being trained.
    pub fn program(&self) -> &Program {
        self.executor.program()
    }

    /// Whether later steps record when each node runs on its queue (in
    /// [`StepReport::trace`]: wall-clock on the CPU backend, CUDA events on the GPU).
    pub fn set_tracing(&mut self, on: bool) {
        self.executor.set_tracing(on);
    }

    /// Whether later steps read the graph outputs back (the default); without, a step
    /// waits for its work, returns no outputs and no loss, and its time is the kernels'
    /// and copies' alone.
    pub fn set_reading_outputs(&mut self, on: bool) {
        self.executor.set_reading_outputs(on);
    }

    /// Runs one training step; returns the loss, the outputs and the step's report.
    pub fn step(&mut self) -> Result<Step, RuntimeError> {
        let (outputs, report) = self.executor.step()?;
        let loss = outputs
            .first()
            .filter(|t| t.shape.iter().product::<usize>() == 1)
            .and_then(|t| t.as_f32("loss").ok()?.first().copied());
        Ok(Step { loss, outputs, report })
    }

    /// Gives the inputs named in `values` these values (type-checked) from the next step
    /// on: a new batch of data.
    pub fn feed(&mut self, values: &BTreeMap<String, HostTensor>) -> Result<(), RuntimeError> {
        for (name, value) in values {
            let program = self.executor.program();
            let node = (0..program.node_count())
                .find(|&n| {
                    program.kind(n) == NodeKind::Parameter
                        && program.node(n).op == INPUT_OP
                        && &program.node(n).name == name
                })
                .ok_or_else(|| RuntimeError::Init {
                    node: name.clone(),
                    message: "the graph has no such input".into(),
                })?;
            let value = given_value(program, node, value)?;
            self.executor.replace(node, value)?;
        }
        Ok(())
    }

    /// The number of steps run so far (counting those of a resumed run).
    pub fn steps(&self) -> u64 {
        self.executor.steps()
    }

    /// Continues a saved run that had run `steps` steps, so that per-step randomness
    /// (dropout masks) goes on where it stopped.
    pub fn resume_at(&mut self, steps: u64) {
        self.executor.set_steps(steps);
    }

    /// The current value of every `Variable`, in node order, named by its node.
    pub fn variables(&mut self) -> Result<Vec<(String, HostTensor)>, RuntimeError> {
        let program = self.executor.program();
        let nodes: Vec<usize> = (0..program.node_count())
            .filter(|&n| program.kind(n) == NodeKind::Parameter && program.node(n).op == VARIABLE_OP)
            .collect();
        nodes
            .into_iter()
            .map(|n| {
                let name = self.executor.program().node(n).name.clone();
                let tensor = self.executor.program().node_outputs(n)[0];
                Ok((name, self.executor.read(tensor)?))
            })
            .collect()
    }
}

/// A given starting value for parameterized node `node`, checked against its type.
fn given_value(program: &Program, node: usize, value: &HostTensor) -> Result<HostTensor, RuntimeError> {
    let t = program.node_outputs(node)[0];
    let ty = program.tensor_type(t);
    if value.dtype() != ty.dtype || value.shape != ty.shape {
        return Err(RuntimeError::Init {
            node: program.node(node).name.clone(),
            message: format!(
                "given value is {} {:?}, the graph wants {} {:?}",
                crate::tensor::dtype_name(value.dtype()),
                value.shape,
                crate::tensor::dtype_name(ty.dtype),
                ty.shape
            ),
        });
    }
    Ok(value.clone())
}
