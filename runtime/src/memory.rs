//! The two memory pools a program runs in, each one arena laid out by the static
//! placement ([`lms_proto::contract::placement`]): the device arena and the pinned host
//! arena.
//!
//! A run is refused before it starts when an arena exceeds its pool's budget
//! ([`check_budget`]): the error names the node whose output's block crosses the budget. An [`Arena`] accounts for the tensors living
//! in one pool: their bytes, and their blocks, checked on every allocation to overlap no
//! live tensor; there is never a silent fallback to another pool.

use crate::backend::Block;
use crate::error::RuntimeError;
use lms_proto::contract::{NodeKind, Program};
use lms_proto::escape::Escaped;
use lms_proto::lms::Node;
use lms_proto::ops::scratch;
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

/// A pool whose arena does not fit its budget.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutOfMemory {
    /// The pool that is full.
    pub pool: Pool,
    /// The node whose output's block crosses the budget ([`check_budget`]).
    pub node: String,
    /// That node's op type.
    pub op: String,
    /// That output.
    pub tensor: String,
    /// Its bytes.
    pub wanted: u64,
    /// Its offset in the arena.
    pub offset: u64,
    /// The arena's bytes, as the placement lays it out.
    pub arena: u64,
    /// The pool's budget.
    pub budget: u64,
    /// The bytes the backend takes of the budget beside the arena (its fixed device
    /// buffers, [`crate::backend::Backend::fixed_device_bytes`]; 0 for the host pool).
    pub reserve: u64,
}

impl fmt::Display for OutOfMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "out of {} memory at node '{}' ({}): wants {} for tensor '{}' at offset {}, past the {} ({} B) \
             limit",
            self.pool,
            Escaped(&self.node),
            Escaped(&self.op),
            format_bytes(self.wanted),
            Escaped(&self.tensor),
            format_bytes(self.offset),
            format_bytes(self.budget),
            self.budget,
        )?;
        if self.reserve > 0 {
            write!(f, " less the backend's fixed reserve of {} ({} B)", format_bytes(self.reserve), self.reserve)?;
        }
        write!(f, "; the plan's {} arena is {} ({} B)", self.pool, format_bytes(self.arena), self.arena)?;
        if self.reserve > 0 {
            let total = self.arena.saturating_add(self.reserve);
            write!(f, ", {} ({} B) with the reserve", format_bytes(total), total)?;
        }
        Ok(())
    }
}

/// Refuses a run of `program` whose `pool` arena, laid out by `placement`, with `reserve`
/// bytes the backend takes beside it, exceeds `budget` bytes. The error names the node
/// whose output's block crosses the budget less the reserve: of the blocks that end past
/// it, the one that starts lowest (among equals, the first the run allocates: parameters
/// first, then along the schedule); a reserve over the budget by itself is
/// [`RuntimeError::ReserveOverLimit`].
pub fn check_budget(
    program: &Program,
    pool: Pool,
    placement: &Placement,
    reserve: u64,
    budget: u64,
) -> Result<(), RuntimeError> {
    if placement.arena_bytes.saturating_add(reserve) <= budget {
        return Ok(());
    }
    if reserve > budget {
        return Err(RuntimeError::ReserveOverLimit { pool, reserve, budget });
    }
    let limit = budget - reserve;
    let order = program.order();
    let parameters = order.iter().filter(|&&n| program.kind(n) == NodeKind::Parameter);
    let others = order.iter().filter(|&&n| program.kind(n) != NodeKind::Parameter);
    let mut crossing: Option<(usize, usize, u64)> = None;
    for &node in parameters.chain(others) {
        for &t in program.node_outputs(node) {
            let Some(offset) = placement.offsets[t] else { continue };
            let past = offset + aligned(program.tensor_type(t).bytes) > limit;
            if past && crossing.is_none_or(|(_, _, lowest)| offset < lowest) {
                crossing = Some((node, t, offset));
            }
        }
    }
    let (node, tensor, wanted, offset) = match crossing {
        Some((node, t, offset)) => (node, program.tensor_name(t).to_string(), program.tensor_type(t).bytes, offset),
        None => scratch_crossing(program, placement, limit)
            .ok_or_else(|| RuntimeError::Internal(format!("the {pool} arena exceeds its budget, but no block does")))?,
    };
    let n = program.node(node);
    Err(RuntimeError::OutOfMemory(Box::new(OutOfMemory {
        pool,
        node: n.name.clone(),
        op: n.op.clone(),
        tensor,
        wanted,
        offset,
        arena: placement.arena_bytes,
        budget,
        reserve,
    })))
}

/// The node whose scratch block (in the device placement, after the tensors) starts lowest
/// among those that end past `budget`: (node, "NAME scratch", bytes, offset).
fn scratch_crossing(program: &Program, placement: &Placement, budget: u64) -> Option<(usize, String, u64, u64)> {
    let bytes = scratch::of_program(program);
    program
        .order()
        .iter()
        .enumerate()
        .filter_map(|(position, &node)| {
            let offset = placement.offsets.get(program.tensor_count() + position).copied().flatten()?;
            (bytes[node] > 0 && offset + aligned(bytes[node]) > budget).then_some((node, offset))
        })
        .min_by_key(|&(_, offset)| offset)
        .map(|(node, offset)| (node, format!("{} scratch", program.node(node).name), bytes[node], offset))
}

/// One live tensor of an arena.
#[derive(Clone, Debug)]
struct Allocation {
    name: String,
    bytes: u64,
    offset: u64,
}

/// The tensors living in one pool's arena, at their static offsets; tensors are keyed by id.
#[derive(Clone, Debug)]
pub struct Arena {
    pool: Pool,
    live: u64,
    peak: u64,
    /// The end of the highest block placed since the last [`Arena::reset_peak`].
    high: u64,
    allocations: BTreeMap<usize, Allocation>,
    /// Offset of each tensor of the pool, by id.
    offsets: Vec<Option<u64>>,
    /// Live blocks by offset: (end, tensor).
    blocks: BTreeMap<u64, (u64, usize)>,
}

impl Arena {
    /// An empty arena for `pool` whose tensors sit at their offsets in `placement`.
    pub fn new(pool: Pool, placement: Placement) -> Arena {
        Arena {
            pool,
            live: 0,
            peak: 0,
            high: 0,
            allocations: BTreeMap::new(),
            offsets: placement.offsets,
            blocks: BTreeMap::new(),
        }
    }

    /// Places tensor `tensor` (named `name`, `bytes` long) at its static offset and returns
    /// its block. A block that overlaps a live tensor (the placement does not hold along
    /// the order in which this runtime allocates and frees), a tensor the placement does not
    /// know, or one already live is an internal error.
    pub fn alloc(&mut self, tensor: usize, name: &str, bytes: u64) -> Result<Block, RuntimeError> {
        if self.allocations.contains_key(&tensor) {
            return Err(RuntimeError::Internal(format!("tensor '{name}' allocated twice in {} memory", self.pool)));
        }
        let offset = self.offsets.get(tensor).copied().flatten().ok_or_else(|| {
            RuntimeError::Internal(format!("tensor '{name}' has no offset in the {} placement", self.pool))
        })?;
        let end = offset + aligned(bytes);
        if end > offset {
            if let Some((&start, &(other_end, other))) = self.blocks.range(..end).next_back() {
                if other_end > offset {
                    let other = self.allocations.get(&other).map_or("?", |a| a.name.as_str());
                    return Err(RuntimeError::Internal(format!(
                        "the static {} placement puts tensor '{name}' at [{offset}, {end}) over live tensor '{other}' at [{start}, {other_end})",
                        self.pool
                    )));
                }
            }
            self.blocks.insert(offset, (end, tensor));
        }
        self.allocations.insert(tensor, Allocation { name: name.to_string(), bytes, offset });
        self.live += bytes;
        self.peak = self.peak.max(self.live);
        self.high = self.high.max(end);
        Ok(Block { pool: self.pool, tensor, offset, bytes })
    }

    /// Releases tensor `tensor` and returns its bytes; releasing a tensor that is not
    /// live is an internal error.
    pub fn free(&mut self, tensor: usize) -> Result<u64, RuntimeError> {
        let allocation = self.allocations.remove(&tensor).ok_or_else(|| {
            RuntimeError::Internal(format!("tensor {tensor} freed but not live in {} memory", self.pool))
        })?;
        self.live -= allocation.bytes;
        if self.blocks.get(&allocation.offset).is_some_and(|&(_, t)| t == tensor) {
            self.blocks.remove(&allocation.offset);
        }
        Ok(allocation.bytes)
    }

    /// The block of live tensor `tensor`.
    pub fn block(&self, tensor: usize) -> Option<Block> {
        let a = self.allocations.get(&tensor)?;
        Some(Block { pool: self.pool, tensor, offset: a.offset, bytes: a.bytes })
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

    /// The end of the highest block placed since creation or the last
    /// [`Arena::reset_peak`]: the part of the arena used.
    pub fn high(&self) -> u64 {
        self.high
    }

    /// Starts new peak measurements from the tensors live now.
    pub fn reset_peak(&mut self) {
        self.peak = self.live;
        self.high = self.blocks.values().map(|&(end, _)| end).max().unwrap_or(0);
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

    fn placement(offsets: &[u64]) -> Placement {
        Placement { offsets: offsets.iter().map(|&o| Some(o)).collect(), arena_bytes: 1024 }
    }

    #[test]
    fn tracks_live_peak_and_the_highest_block() {
        let mut a = Arena::new(Pool::Device, placement(&[0, 256, 0, 512]));
        let b = a.alloc(0, "a", 40).unwrap();
        assert_eq!(b, Block { pool: Pool::Device, tensor: 0, offset: 0, bytes: 40 });
        a.alloc(1, "b", 60).unwrap();
        assert_eq!((a.live(), a.peak(), a.high()), (100, 100, 512));
        assert_eq!(a.free(0).unwrap(), 40);
        assert!(!a.is_live(0) && a.is_live(1));
        assert_eq!(a.block(1).map(|b| b.offset), Some(256));
        a.alloc(2, "c", 10).unwrap();
        assert_eq!((a.live(), a.peak()), (70, 100));
        a.alloc(3, "d", 300).unwrap();
        assert_eq!(a.high(), 1024);
        a.free(3).unwrap();
        a.reset_peak();
        assert_eq!((a.peak(), a.high()), (70, 512));
        assert!(matches!(a.free(0), Err(RuntimeError::Internal(_))));
        assert!(matches!(a.alloc(2, "c", 1), Err(RuntimeError::Internal(_))));
    }

    #[test]
    fn a_placement_that_overlaps_live_tensors_is_refused() {
        let placement = Placement { offsets: vec![Some(0), Some(256), Some(0), None], arena_bytes: 512 };
        let mut a = Arena::new(Pool::Device, placement);
        a.alloc(0, "a", 200).unwrap();
        a.alloc(1, "b", 256).unwrap();
        let err = a.alloc(2, "c", 10).unwrap_err();
        assert_eq!(
            err.to_string(),
            "internal error: the static device placement puts tensor 'c' at [0, 256) over live tensor 'a' at [0, 256)"
        );
        a.free(0).unwrap();
        a.alloc(2, "c", 10).unwrap();
        assert!(a.alloc(3, "d", 1).unwrap_err().to_string().contains("'d' has no offset"));
    }

    #[test]
    fn out_of_memory_names_the_node_its_block_and_the_arena() {
        let oom = OutOfMemory {
            pool: Pool::Device,
            node: "conv2".into(),
            op: "Conv".into(),
            tensor: "y".into(),
            wanted: 3_208_642,
            offset: 15 << 30,
            arena: 17 << 30,
            budget: 16 << 30,
            reserve: 0,
        };
        assert_eq!(
            oom.to_string(),
            "out of device memory at node 'conv2' (Conv): wants 3.06 MiB for tensor 'y' at offset 15.00 GiB, \
             past the 16.00 GiB (17179869184 B) limit; the plan's device arena is 17.00 GiB (18253611008 B)"
        );
        let within_the_reserve = OutOfMemory { offset: 16 << 30, arena: 16 << 30, reserve: 1 << 20, ..oom };
        assert_eq!(
            within_the_reserve.to_string(),
            "out of device memory at node 'conv2' (Conv): wants 3.06 MiB for tensor 'y' at offset 16.00 GiB, \
             past the 16.00 GiB (17179869184 B) limit less the backend's fixed reserve of 1.00 MiB (1048576 B); \
             the plan's device arena is 16.00 GiB (17179869184 B), 16.00 GiB (17180917760 B) with the reserve"
        );
        let reserve = RuntimeError::ReserveOverLimit { pool: Pool::Device, reserve: 1 << 20, budget: 4096 };
        assert_eq!(
            reserve.to_string(),
            "the device limit of 4.00 KiB (4096 B) is below the backend's fixed reserve of 1.00 MiB (1048576 B)"
        );
    }
}
