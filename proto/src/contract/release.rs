//! Memory accounting rules shared by the compiler's simulator and the runtime
//! (`proto/OPS.md`, "Memory accounting"): which pool a tensor lives in, and after which
//! step of the schedule its bytes are released.
//!
//! - Tensors of parameterized vertices (variables, inputs) are resident: never released.
//! - Graph outputs are kept until the step ends.
//! - A tensor carried by an update edge is released right after its producer (it replaces
//!   the variable's storage, whose old bytes go).
//! - Any other tensor is released after its last reader in the schedule, or right after
//!   its producer when nobody reads it.

use super::ops::{LMS_DOMAIN, SWAP_IN_OP, SWAP_OUT_OP};
use super::program::Program;
use std::fmt;

/// The memory a tensor lives in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Pool {
    /// Accelerator memory, the budget the memory passes rewrite for.
    Device,
    /// Pinned host memory, where swapped-out tensors wait.
    Host,
}

impl fmt::Display for Pool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Pool::Device => "device",
            Pool::Host => "host",
        })
    }
}

/// The pool the outputs of a node live in: host memory for `SwapOut`, device memory for
/// `SwapIn`, otherwise the memory of the node's device (`on_cpu`: the CPU device).
pub fn output_pool(domain: &str, op: &str, on_cpu: bool) -> Pool {
    match (domain, op) {
        (LMS_DOMAIN, SWAP_OUT_OP) => Pool::Host,
        (LMS_DOMAIN, SWAP_IN_OP) => Pool::Device,
        _ if on_cpu => Pool::Host,
        _ => Pool::Device,
    }
}

/// How a tensor is used along a schedule: what the release rule looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TensorUse {
    /// Position of its producer in the schedule.
    pub produced_at: usize,
    /// Position of its last reader; `None` when no node reads it.
    pub last_read: Option<usize>,
    /// Made by a parameterized vertex (a variable or an input).
    pub resident: bool,
    /// Carried by an update edge into a variable.
    pub updates_variable: bool,
    /// Listed in `Graph.outputs`.
    pub graph_output: bool,
}

/// The position in the schedule after which a tensor's bytes are released; `None`: kept
/// until the step ends.
pub fn release_after(usage: TensorUse) -> Option<usize> {
    if usage.graph_output {
        None
    } else if usage.updates_variable {
        Some(usage.produced_at)
    } else if usage.resident {
        None
    } else {
        Some(usage.last_read.map_or(usage.produced_at, |r| r.max(usage.produced_at)))
    }
}

/// How each tensor of `program` is used along its schedule, by tensor id.
pub fn tensor_uses(program: &Program) -> Vec<TensorUse> {
    let mut last_read: Vec<Option<usize>> = vec![None; program.tensor_count()];
    for n in 0..program.node_count() {
        for &t in program.node_inputs(n).iter().flatten() {
            let at = program.position(n);
            last_read[t] = Some(last_read[t].map_or(at, |p| p.max(at)));
        }
    }
    let mut updates_variable = vec![false; program.tensor_count()];
    for u in program.updates() {
        updates_variable[u.tensor] = true;
    }
    let mut graph_output = vec![false; program.tensor_count()];
    for &t in program.outputs() {
        graph_output[t] = true;
    }
    (0..program.tensor_count())
        .map(|t| TensorUse {
            produced_at: program.position(program.producer(t)),
            last_read: last_read[t],
            resident: program.is_resident(t),
            updates_variable: updates_variable[t],
            graph_output: graph_output[t],
        })
        .collect()
}

/// The tensors released after each position of a program's schedule.
#[derive(Clone, Debug)]
pub struct Liveness {
    released: Vec<Vec<usize>>,
}

impl Liveness {
    /// Computes the release points of every tensor of `program` along its schedule.
    pub fn new(program: &Program) -> Liveness {
        let mut released = vec![Vec::new(); program.node_count()];
        for (t, usage) in tensor_uses(program).into_iter().enumerate() {
            if let Some(p) = release_after(usage) {
                released[p].push(t);
            }
        }
        Liveness { released }
    }

    /// The tensors released after the node at `position` of the schedule runs, by id.
    pub fn released_after(&self, position: usize) -> &[usize] {
        &self.released[position]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(last_read: Option<usize>) -> TensorUse {
        TensorUse { produced_at: 3, last_read, resident: false, updates_variable: false, graph_output: false }
    }

    #[test]
    fn release_rules() {
        assert_eq!(release_after(usage(Some(7))), Some(7));
        assert_eq!(release_after(usage(None)), Some(3), "unread: right after its producer");
        assert_eq!(release_after(TensorUse { resident: true, ..usage(Some(7)) }), None);
        assert_eq!(release_after(TensorUse { updates_variable: true, ..usage(Some(7)) }), Some(3));
        let output = TensorUse { graph_output: true, updates_variable: true, ..usage(Some(7)) };
        assert_eq!(release_after(output), None, "outputs stay, even when they update a variable");
    }

    #[test]
    fn pools() {
        assert_eq!(output_pool(LMS_DOMAIN, SWAP_OUT_OP, true), Pool::Host);
        assert_eq!(output_pool(LMS_DOMAIN, SWAP_IN_OP, true), Pool::Device);
        assert_eq!(output_pool("", "Relu", false), Pool::Device);
        assert_eq!(output_pool("", SWAP_OUT_OP, true), Pool::Host, "a CPU node outside the lms domain");
    }
}
