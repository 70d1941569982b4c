//! A training run: a program placed on a backend with its variables initialised and a
//! fixed synthetic batch, stepped one training step at a time.

use crate::backend::Backend;
use crate::error::RuntimeError;
use crate::executor::{Executor, StepReport};
use crate::init::initial_value;
use crate::memory::default_host_memory;
use crate::program::{NodeKind, Program, VARIABLE_OP};
use crate::tensor::HostTensor;
use lms_proto::lms::DType;

/// The budgets and seed of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunOptions {
    /// Device memory budget in bytes.
    pub device_memory: u64,
    /// Host (pinned) pool budget in bytes.
    pub host_memory: u64,
    /// Seed of variable initialisation and synthetic inputs.
    pub seed: u64,
}

impl Default for RunOptions {
    /// No device limit, half of physical memory for the host pool, seed 0.
    fn default() -> Self {
        RunOptions { device_memory: u64::MAX, host_memory: default_host_memory(), seed: 0 }
    }
}

/// The result of one training step.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The loss: graph output 0.
    pub loss: f32,
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
    /// Places `program` on `backend`: checks that output 0 is an f32 scalar loss, then
    /// makes every variable and input resident (in the program's order; this allocation can
    /// exceed a budget) with its initial value drawn from `options.seed`. The inputs are
    /// drawn once: every step trains on the same synthetic batch.
    pub fn new(program: Program, backend: B, options: RunOptions) -> Result<Session<B>, RuntimeError> {
        check_loss(&program)?;
        let parameters: Vec<usize> =
            program.order().iter().copied().filter(|&n| program.kind(n) == NodeKind::Parameter).collect();
        let mut executor = Executor::new(program, backend, options.device_memory, options.host_memory);
        for node in parameters {
            executor.place(node, |program| initial_value(program, node, options.seed))?;
        }
        Ok(Session { executor })
    }

    /// The program being trained.
    pub fn program(&self) -> &Program {
        self.executor.program()
    }

    /// Runs one training step; returns the loss, the outputs and the step's report.
    pub fn step(&mut self) -> Result<Step, RuntimeError> {
        let (outputs, report) = self.executor.step()?;
        let loss = outputs
            .first()
            .and_then(|t| t.as_f32("loss").ok()?.first().copied())
            .ok_or_else(|| RuntimeError::Internal("the loss was not read back".into()))?;
        Ok(Step { loss, outputs, report })
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

/// Checks that graph output 0 exists and is an f32 tensor of one element.
fn check_loss(program: &Program) -> Result<(), RuntimeError> {
    let invalid = |message: String| RuntimeError::Invalid { file: program.source().to_string(), message };
    let &loss = program
        .outputs()
        .first()
        .ok_or_else(|| invalid("the graph has no output; output 0 must be the loss".into()))?;
    let ty = program.tensor_type(loss);
    if ty.dtype != DType::DtypeF32 || ty.shape.iter().product::<usize>() != 1 {
        return Err(invalid(format!(
            "output 0 ('{}') must be the f32 scalar loss, found {} {:?}",
            program.tensor_name(loss),
            crate::tensor::dtype_name(ty.dtype),
            ty.shape
        )));
    }
    Ok(())
}
