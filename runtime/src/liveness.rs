//! When each tensor's bytes are released during a step: the rules of `proto/OPS.md`,
//! "Memory accounting", which the compiler's memory simulator follows too.
//!
//! - Tensors of parameterized vertices (variables, inputs) are resident: never released.
//! - Graph outputs are kept until the step ends.
//! - A tensor carried by an update edge is released right after its producer (it replaces
//!   the variable's storage, whose old bytes go).
//! - Any other tensor is released after its last reader in the order, or right after its
//!   producer when nobody reads it.

use crate::program::{NodeKind, Program};

/// The tensors released after each position of a program's order.
#[derive(Clone, Debug)]
pub struct Liveness {
    released: Vec<Vec<usize>>,
}

impl Liveness {
    /// Computes the release points of every tensor of `program` along its order.
    pub fn new(program: &Program) -> Liveness {
        let order = program.order();
        let mut position = vec![0usize; program.node_count()];
        for (i, &n) in order.iter().enumerate() {
            position[n] = i;
        }
        // Position after which each tensor is released; `None`: kept through the step.
        let mut last: Vec<Option<usize>> = (0..program.tensor_count())
            .map(|t| {
                let producer = program.producer(t);
                (program.kind(producer) != NodeKind::Parameter).then_some(position[producer])
            })
            .collect();
        for (n, inputs) in (0..program.node_count()).map(|n| (n, program.node_inputs(n))) {
            for &t in inputs.iter().flatten() {
                if let Some(p) = &mut last[t] {
                    *p = (*p).max(position[n]);
                }
            }
        }
        for u in program.updates() {
            last[u.tensor] = Some(position[program.producer(u.tensor)]);
        }
        for &t in program.outputs() {
            last[t] = None;
        }
        let mut released = vec![Vec::new(); order.len()];
        for (t, p) in last.into_iter().enumerate() {
            if let Some(p) = p {
                released[p].push(t);
            }
        }
        Liveness { released }
    }

    /// The tensors released after the node at `position` of the order runs, by id.
    pub fn released_after(&self, position: usize) -> &[usize] {
        &self.released[position]
    }
}
