//! Memory pools with a hard budget: the device arena and the pinned host pool.
//!
//! An [`Arena`] accounts for the bytes of the tensors living in one pool. Allocating past
//! the budget is an error naming the node, the bytes wanted, the bytes live and the largest
//! live tensors; there is never a silent fallback to another pool.

use crate::error::RuntimeError;
use lms_proto::escape::Escaped;
use lms_proto::lms::Node;
use std::collections::BTreeMap;
use std::fmt;

pub use lms_proto::units::{default_host_memory, format_bytes, machine_memory, FALLBACK_HOST_MEMORY};

use lms_proto::contract::placement::{aligned, Placement};
pub use lms_proto::contract::Pool;

/// Checks that the system can give `bytes` now, for `what` (a node and its op,
/// or a copy), by reserving them and giving them back (pages never touched
/// cost nothing): a size the system refuses is [`RuntimeError::Allocation`],
/// never an abort. The pools' budgets keep what is live within the machine;
/// this check turns the allocation a budget still allows but the system does
/// not into an error.
pub fn check_allocatable(bytes: u64, what: impl FnOnce() -> String) -> Result<(), RuntimeError> {
    let mut probe: Vec<u8> = Vec::new();
    match usize::try_from(bytes).ok().map(|n| probe.try_reserve_exact(n)) {
        Some(Ok(())) => Ok(()),
        _ => Err(RuntimeError::Allocation { what: what(), bytes }),
    }
}

/// A node and its op, as allocation errors name them: `node 'x' (Relu)`.
pub fn node_and_op(node: &Node) -> String {
    format!("node '{}' ({})", node.name, node.op)
}

/// An allocation that did not fit in its pool's budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfMemory {
    /// The pool that is full.
    pub pool: Pool,
    /// The node whose allocation failed.
    pub node: String,
    /// That node's op type.
    pub op: String,
    /// Bytes the allocation wanted.
    pub wanted: u64,
    /// Bytes live in the pool before the allocation.
    pub live: u64,
    /// The pool's budget.
    pub budget: u64,
    /// The largest live tensors (at most three), largest first: (name, bytes).
    pub largest: Vec<(String, u64)>,
}

impl fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "out of {} memory at node '{}' ({}): wants {}, {} of {} live",
            self.pool,
            Escaped(&self.node),
            Escaped(&self.op),
            format_bytes(self.wanted),
            format_bytes(self.live),
            format_bytes(self.budget)
        )?;
        if !self.largest.is_empty() {
            f.write_str("; largest live: ")?;
            for (i, (name, bytes)) in self.largest.iter().enumerate() {
                let sep = if i == 0 { "" } else { ", " };
                write!(f, "{sep}{} ({})", Escaped(name), format_bytes(*bytes))?;
            }
        }
        Ok(())
    }
}

/// One live tensor of an arena.
#[derive(Clone, Debug)]
struct Allocation {
    name: String,
    bytes: u64,
}

/// The static placement a pool follows, and where its live tensors sit.
#[derive(Clone, Debug)]
struct Placed {
    /// Offset of each tensor of the pool, by id.
    offsets: Vec<Option<u64>>,
    /// Live blocks by offset: (end, tensor).
    live: BTreeMap<u64, (u64, usize)>,
}

/// The bytes live in one memory pool, under a hard budget; tensors are keyed by id.
#[derive(Clone, Debug)]
pub struct Arena {
    pool: Pool,
    budget: u64,
    live: u64,
    peak: u64,
    allocations: BTreeMap<usize, Allocation>,
    placed: Option<Placed>,
}

impl Arena {
    /// An empty arena for `pool` that holds at most `budget` bytes.
    pub fn new(pool: Pool, budget: u64) -> Arena {
        Arena { pool, budget, live: 0, peak: 0, allocations: BTreeMap::new(), placed: None }
    }

    /// The arena, checking that every tensor it allocates sits at its offset in
    /// `placement` without overlapping a live tensor: the static placement the compiler
    /// planned holds along the order in which this runtime really allocates and frees.
    pub fn with_placement(self, placement: Placement) -> Arena {
        Arena { placed: Some(Placed { offsets: placement.offsets, live: BTreeMap::new() }), ..self }
    }

    /// Records tensor `tensor` at its static offset; an overlap with a live tensor, or a
    /// tensor the placement does not know, is an internal error.
    fn place(&mut self, tensor: usize, name: &str, bytes: u64) -> Result<(), RuntimeError> {
        let Some(placed) = &mut self.placed else { return Ok(()) };
        let offset = placed.offsets.get(tensor).copied().flatten().ok_or_else(|| {
            RuntimeError::Internal(format!("tensor '{name}' has no offset in the {} placement", self.pool))
        })?;
        let end = offset + aligned(bytes);
        if end == offset {
            return Ok(());
        }
        if let Some((&start, &(other_end, other))) = placed.live.range(..end).next_back() {
            if other_end > offset {
                let other = self.allocations.get(&other).map_or("?", |a| a.name.as_str());
                return Err(RuntimeError::Internal(format!(
                    "the static {} placement puts tensor '{name}' at [{offset}, {end}) over live tensor '{other}' at [{start}, {other_end})",
                    self.pool
                )));
            }
        }
        placed.live.insert(offset, (end, tensor));
        Ok(())
    }

    /// Accounts `bytes` for tensor `tensor` (named `name`), allocated for `node`.
    ///
    /// Fails, leaving the arena unchanged, when the budget would be exceeded; the error
    /// names the node and its op, the bytes wanted and live, and the three largest live
    /// tensors. Allocating a tensor that is already live is an internal error.
    pub fn alloc(&mut self, tensor: usize, name: &str, bytes: u64, node: &Node) -> Result<(), RuntimeError> {
        if self.allocations.contains_key(&tensor) {
            return Err(RuntimeError::Internal(format!("tensor '{name}' allocated twice in {} memory", self.pool)));
        }
        let total = self.live.checked_add(bytes).filter(|&total| total <= self.budget);
        let Some(total) = total else {
            return Err(RuntimeError::OutOfMemory(Box::new(OutOfMemory {
                pool: self.pool,
                node: node.name.clone(),
                op: node.op.clone(),
                wanted: bytes,
                live: self.live,
                budget: self.budget,
                largest: self.largest(3),
            })));
        };
        self.place(tensor, name, bytes)?;
        self.allocations.insert(tensor, Allocation { name: name.to_string(), bytes });
        self.live = total;
        self.peak = self.peak.max(total);
        Ok(())
    }

    /// Releases tensor `tensor` and returns its bytes; releasing a tensor that is not
    /// live is an internal error.
    pub fn free(&mut self, tensor: usize) -> Result<u64, RuntimeError> {
        let allocation = self.allocations.remove(&tensor).ok_or_else(|| {
            RuntimeError::Internal(format!("tensor {tensor} freed but not live in {} memory", self.pool))
        })?;
        self.live -= allocation.bytes;
        if let Some(placed) = &mut self.placed {
            if let Some(offset) = placed.offsets[tensor] {
                if placed.live.get(&offset).is_some_and(|&(_, t)| t == tensor) {
                    placed.live.remove(&offset);
                }
            }
        }
        Ok(allocation.bytes)
    }

    /// Whether tensor `tensor` is live.
    pub fn is_live(&self, tensor: usize) -> bool {
        self.allocations.contains_key(&tensor)
    }

    /// Bytes live now.
    pub fn live(&self) -> u64 {
        self.live
    }

    /// The largest number of bytes live since creation or the last [`Arena::reset_peak`].
    pub fn peak(&self) -> u64 {
        self.peak
    }

    /// Starts a new peak measurement from the bytes live now.
    pub fn reset_peak(&mut self) {
        self.peak = self.live;
    }

    /// The budget in bytes.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// The `n` largest live tensors, largest first (ties: lowest id first).
    fn largest(&self, n: usize) -> Vec<(String, u64)> {
        let mut all: Vec<(&usize, &Allocation)> = self.allocations.iter().collect();
        all.sort_by_key(|(id, a)| (std::cmp::Reverse(a.bytes), **id));
        all.into_iter().take(n).map(|(_, a)| (a.name.clone(), a.bytes)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, op: &str) -> Node {
        Node { name: name.into(), op: op.into(), ..Node::default() }
    }

    #[test]
    fn memory_the_system_refuses_is_an_error_naming_what_it_was_for() {
        assert!(check_allocatable(1 << 20, || unreachable!()).is_ok());
        let err = check_allocatable(u64::MAX, || node_and_op(&node("x", "Input"))).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot allocate 16384.00 PiB for node 'x' (Input): the system refused that much memory"
        );
    }

    #[test]
    fn tracks_live_and_peak() {
        let mut a = Arena::new(Pool::Device, 100);
        let n = node("n", "Relu");
        a.alloc(0, "a", 40, &n).unwrap();
        a.alloc(1, "b", 60, &n).unwrap();
        assert_eq!((a.live(), a.peak()), (100, 100));
        assert_eq!(a.free(0).unwrap(), 40);
        assert!(!a.is_live(0) && a.is_live(1));
        a.alloc(2, "c", 10, &n).unwrap();
        assert_eq!((a.live(), a.peak()), (70, 100));
        a.reset_peak();
        assert_eq!(a.peak(), 70);
        assert!(matches!(a.free(0), Err(RuntimeError::Internal(_))));
        assert!(matches!(a.alloc(2, "c", 1, &n), Err(RuntimeError::Internal(_))));
    }

    #[test]
    fn a_placement_that_overlaps_live_tensors_is_refused() {
        let placement = Placement { offsets: vec![Some(0), Some(256), Some(0), None], arena_bytes: 512 };
        let mut a = Arena::new(Pool::Device, 1 << 20).with_placement(placement);
        let n = node("n", "Relu");
        a.alloc(0, "a", 200, &n).unwrap();
        a.alloc(1, "b", 256, &n).unwrap();
        let err = a.alloc(2, "c", 10, &n).unwrap_err();
        assert_eq!(
            err.to_string(),
            "internal error: the static device placement puts tensor 'c' at [0, 256) over live tensor 'a' at [0, 256)"
        );
        a.free(0).unwrap();
        a.alloc(2, "c", 10, &n).unwrap();
        assert!(a.alloc(3, "d", 1, &n).unwrap_err().to_string().contains("'d' has no offset"));
    }

    #[test]
    fn over_budget_names_node_bytes_and_largest() {
        let mut a = Arena::new(Pool::Device, 16 << 30);
        let n = node("conv1", "Conv");
        a.alloc(0, "a", 3 << 29, &n).unwrap();
        a.alloc(1, "b", 5 << 30, &n).unwrap();
        a.alloc(2, "c", 1 << 30, &n).unwrap();
        a.alloc(3, "d", (17 << 29) - 1, &n).unwrap();
        let before = a.live();
        let err = a.alloc(4, "e", 3_208_642, &node("conv2", "Conv")).unwrap_err();
        assert_eq!(
            err.to_string(),
            "out of device memory at node 'conv2' (Conv): wants 3.06 MiB, 16.00 GiB of 16.00 GiB \
             live; largest live: d (8.50 GiB), b (5.00 GiB), a (1.50 GiB)"
        );
        assert_eq!(a.live(), before);
        let mut h = Arena::new(Pool::Host, 10);
        let err = h.alloc(0, "x", 11, &node("s", "SwapOut")).unwrap_err();
        assert_eq!(err.to_string(), "out of host memory at node 's' (SwapOut): wants 11 B, 0 B of 10 B live");
    }
}
