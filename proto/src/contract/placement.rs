//! Static placement: every tensor of a pool gets a fixed offset inside one arena, chosen
//! ahead of time from the schedule, so a training step never calls an allocator (the
//! static memory plan of Split-CNN §4.4, HMMS).
//!
//! A tensor occupies its block from the step its producer runs (step 0 for resident
//! tensors, which are allocated before the first step) to the step after which the release
//! rule ([`super::release`]) frees it, both included: inputs and outputs of a node are live
//! together. Two tensors whose lifetimes share a step never share a byte.
//!
//! Offsets are chosen greedily by size: the largest block first (ties: the earlier first
//! step, then the earlier last step, then the lower tensor id — blocks tied that far are
//! interchangeable, so the arena's size never depends on how tensors are numbered), each in
//! the smallest gap between the placed blocks that overlap it in time (ties: the lower
//! offset), else on top of them. That compares each block with every block overlapping it,
//! and a training graph's live set at its peak (every forward activation) is a large part
//! of the graph: quadratic. Above [`BY_SIZE_LIMIT`] tensors, blocks are instead placed in
//! the order the runtime meets them — along the schedule, each taking the smallest free
//! block that holds it, freed blocks merging — in O(n log n), for a few percent more
//! fragmentation. Every block starts at a multiple of [`ALIGNMENT`].
//!
//! The compiler (from its graph) and the runtime (from the `.lms`) compute the same
//! placement with this one function; the plan records the arena's size so that the two can
//! be compared.

use super::program::Program;
use super::release::{release_after, tensor_uses, Pool};
use std::collections::{BTreeMap, BTreeSet};

/// Every block starts at a multiple of this many bytes (what cuBLAS and cuDNN expect).
pub const ALIGNMENT: u64 = 256;

/// `bytes` rounded up to [`ALIGNMENT`].
pub fn aligned(bytes: u64) -> u64 {
    bytes.div_ceil(ALIGNMENT) * ALIGNMENT
}

/// Where and when a tensor needs memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lifetime {
    /// Bytes of the tensor (unaligned).
    pub bytes: u64,
    /// First schedule position at which it is live.
    pub first: usize,
    /// Last schedule position at which it is live (included).
    pub last: usize,
}

impl Lifetime {
    /// Whether the two lifetimes share a schedule position.
    pub fn overlaps(&self, other: &Lifetime) -> bool {
        self.first <= other.last && other.first <= self.last
    }
}

/// Offsets of the tensors of one pool inside its arena.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placement {
    /// Offset of each tensor, by tensor id; `None` for tensors not in the pool.
    pub offsets: Vec<Option<u64>>,
    /// Bytes of the arena: the end of the highest block.
    pub arena_bytes: u64,
}

/// The most tensors placed greedily by size; larger pools are placed in schedule order.
pub const BY_SIZE_LIMIT: usize = 20_000;

/// Places the tensors that have a lifetime (`None`: not in this pool), by tensor id.
pub fn place(lifetimes: &[Option<Lifetime>]) -> Placement {
    if lifetimes.iter().flatten().count() <= BY_SIZE_LIMIT {
        place_by_size(lifetimes)
    } else {
        place_in_order(lifetimes)
    }
}

/// A placed block: its lifetime, offset and aligned size.
#[derive(Clone, Copy)]
struct Block {
    life: Lifetime,
    offset: u64,
    size: u64,
}

/// Greedy by size (see the module's documentation).
fn place_by_size(lifetimes: &[Option<Lifetime>]) -> Placement {
    let mut order: Vec<usize> = (0..lifetimes.len()).filter(|&t| lifetimes[t].is_some()).collect();
    let life = |t: usize| lifetimes[t].expect("filtered");
    order.sort_by_key(|&t| (std::cmp::Reverse(aligned(life(t).bytes)), life(t).first, life(t).last, t));
    let mut offsets = vec![None; lifetimes.len()];
    let mut placed: Vec<Block> = Vec::with_capacity(order.len());
    let mut arena_bytes = 0;
    let mut neighbours: Vec<(u64, u64)> = Vec::new();
    for t in order {
        let life = life(t);
        let size = aligned(life.bytes);
        neighbours.clear();
        neighbours.extend(placed.iter().filter(|b| b.life.overlaps(&life)).map(|b| (b.offset, b.offset + b.size)));
        neighbours.sort_unstable();
        let offset = best_gap(&neighbours, size);
        offsets[t] = Some(offset);
        arena_bytes = arena_bytes.max(offset + size);
        if size > 0 {
            placed.push(Block { life, offset, size });
        }
    }
    Placement { offsets, arena_bytes }
}

/// The offset of the smallest gap between `taken` ranges (sorted by start) that holds
/// `size` bytes (ties: the lower offset); the end of the highest range when none does.
fn best_gap(taken: &[(u64, u64)], size: u64) -> u64 {
    let mut best: Option<(u64, u64)> = None;
    let mut top = 0;
    for &(start, end) in taken {
        if start >= top && start - top >= size && best.is_none_or(|(gap, _)| start - top < gap) {
            best = Some((start - top, top));
        }
        top = top.max(end);
    }
    best.map_or(top, |(_, offset)| offset)
}

/// Best fit in schedule order (see the module's documentation).
fn place_in_order(lifetimes: &[Option<Lifetime>]) -> Placement {
    let life = |t: usize| lifetimes[t].expect("filtered");
    let mut births: Vec<usize> = (0..lifetimes.len()).filter(|&t| lifetimes[t].is_some()).collect();
    births.sort_by_key(|&t| (life(t).first, std::cmp::Reverse(aligned(life(t).bytes)), life(t).last, t));
    let mut deaths = births.clone();
    deaths.sort_by_key(|&t| (life(t).last, t));
    let mut offsets = vec![None; lifetimes.len()];
    let mut free = FreeList::default();
    let mut next_death = deaths.iter().peekable();
    for &t in &births {
        let life = life(t);
        while let Some(&&d) = next_death.peek() {
            if lifetimes[d].expect("filtered").last >= life.first {
                break;
            }
            free.release(offsets[d].expect("born before it dies"), aligned(lifetimes[d].expect("filtered").bytes));
            next_death.next();
        }
        offsets[t] = Some(free.take(aligned(life.bytes)));
    }
    Placement { offsets, arena_bytes: free.top }
}

/// Free blocks of an arena that grows on demand: best fit, coalescing.
#[derive(Default)]
struct FreeList {
    /// Free blocks: offset -> size.
    by_offset: BTreeMap<u64, u64>,
    /// Free blocks: (size, offset).
    by_size: BTreeSet<(u64, u64)>,
    /// End of the highest block ever taken: the arena's size.
    top: u64,
}

impl FreeList {
    /// The offset of a block of `size` bytes: the smallest free block that holds it
    /// (ties: the lower offset), else the free block ending at the top, grown, else the top.
    fn take(&mut self, size: u64) -> u64 {
        if size == 0 {
            return 0;
        }
        if let Some(&(block, offset)) = self.by_size.range((size, 0)..).next() {
            self.remove(offset, block);
            if block > size {
                self.insert(offset + size, block - size);
            }
            return offset;
        }
        match self.by_offset.last_key_value().map(|(&o, &s)| (o, s)) {
            Some((offset, block)) if offset + block == self.top => {
                self.remove(offset, block);
                self.top = offset + size;
                offset
            }
            _ => {
                self.top += size;
                self.top - size
            }
        }
    }

    /// Frees the block at `offset` of `size` bytes, merging it with free neighbours.
    fn release(&mut self, mut offset: u64, mut size: u64) {
        if size == 0 {
            return;
        }
        if let Some((&before, &len)) = self.by_offset.range(..offset).next_back() {
            if before + len == offset {
                self.remove(before, len);
                (offset, size) = (before, len + size);
            }
        }
        if let Some(&len) = self.by_offset.get(&(offset + size)) {
            self.remove(offset + size, len);
            size += len;
        }
        self.insert(offset, size);
    }

    fn insert(&mut self, offset: u64, size: u64) {
        self.by_offset.insert(offset, size);
        self.by_size.insert((size, offset));
    }

    fn remove(&mut self, offset: u64, size: u64) {
        self.by_offset.remove(&offset);
        self.by_size.remove(&(size, offset));
    }
}

/// The lifetimes of the tensors of `program` that live in `pool`, by tensor id, along its
/// schedule.
pub fn lifetimes(program: &Program, pool: Pool) -> Vec<Option<Lifetime>> {
    let end = program.node_count().saturating_sub(1);
    tensor_uses(program)
        .into_iter()
        .enumerate()
        .map(|(t, usage)| {
            (program.pool(t) == pool).then(|| Lifetime {
                bytes: program.tensor_type(t).bytes,
                first: if usage.resident { 0 } else { usage.produced_at },
                last: release_after(usage).unwrap_or(end),
            })
        })
        .collect()
}

/// The placement of `program`'s tensors in `pool`.
pub fn of_program(program: &Program, pool: Pool) -> Placement {
    place(&lifetimes(program, pool))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn life(bytes: u64, first: usize, last: usize) -> Option<Lifetime> {
        Some(Lifetime { bytes, first, last })
    }

    /// No two blocks that are live at the same step share a byte.
    fn assert_disjoint(lifetimes: &[Option<Lifetime>], p: &Placement) {
        for (a, la) in lifetimes.iter().enumerate() {
            for (b, lb) in lifetimes.iter().enumerate().skip(a + 1) {
                let (Some(la), Some(lb)) = (la, lb) else { continue };
                let (oa, ob) = (p.offsets[a].unwrap(), p.offsets[b].unwrap());
                let apart = oa + aligned(la.bytes) <= ob || ob + aligned(lb.bytes) <= oa;
                assert!(!la.overlaps(lb) || apart, "tensors {a} and {b} overlap: {p:?}");
            }
        }
    }

    #[test]
    fn blocks_that_never_meet_share_memory() {
        // 0 and 1 are live at once; 2 comes after both and reuses the larger block.
        let lifetimes = [life(1000, 0, 1), life(300, 1, 2), life(1000, 3, 4), None];
        let p = place(&lifetimes);
        assert_eq!(p.offsets, [Some(0), Some(1024), Some(0), None]);
        assert_eq!(p.arena_bytes, 1024 + 512);
        assert_disjoint(&lifetimes, &p);
    }

    #[test]
    fn freed_blocks_are_reused_before_the_arena_grows() {
        // 2 stays live throughout; 0 and 1 end before 3 and 4 start, which reuse their
        // blocks (above 2) rather than growing the arena.
        let lifetimes = [life(1024, 0, 1), life(256, 0, 1), life(2048, 0, 5), life(1000, 2, 5), life(200, 2, 5)];
        let p = place(&lifetimes);
        assert_eq!(p.offsets[2], Some(0), "largest first, at the bottom");
        assert_eq!(p.offsets[3], Some(2048));
        assert_eq!(p.offsets[4], Some(3072));
        assert_eq!(p.arena_bytes, 3328);
        assert_disjoint(&lifetimes, &p);
    }

    #[test]
    fn the_free_list_takes_the_tightest_block_and_coalesces() {
        let mut f = FreeList::default();
        let [a, b, c, d] = [1024, 256, 512, 256].map(|size| f.take(size));
        assert_eq!([a, b, c, d, f.top], [0, 1024, 1280, 1792, 2048]);
        f.release(a, 1024);
        f.release(c, 512);
        assert_eq!(f.take(256), 1280, "the 512-byte block is tighter than the 1 KiB one");
        f.release(1280, 256);
        f.release(b, 256);
        assert_eq!(f.by_offset.iter().collect::<Vec<_>>(), [(&0, &1792)], "neighbours merge");
        f.release(d, 256);
        assert_eq!(f.take(4096), 0, "the free block at the top grows the arena");
        assert_eq!(f.top, 4096);
    }

    #[test]
    fn best_gap_prefers_the_tightest_hole() {
        assert_eq!(best_gap(&[], 256), 0);
        assert_eq!(best_gap(&[(0, 256), (1280, 1536), (2048, 2304)], 512), 1536, "512-byte hole over 1 KiB");
        assert_eq!(best_gap(&[(0, 256), (512, 768)], 512), 768, "no hole holds it: on top");
        assert_eq!(best_gap(&[(0, 1024), (256, 512)], 256), 1024, "a hole inside a larger block is no hole");
    }

    #[test]
    fn random_lifetimes_never_overlap() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = |m: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % m
        };
        for _ in 0..50 {
            let lifetimes: Vec<_> = (0..60)
                .map(|_| {
                    let first = next(40) as usize;
                    (next(8) != 0).then(|| Lifetime { bytes: next(5000), first, last: first + next(10) as usize })
                })
                .collect();
            let (p, q) = (place_by_size(&lifetimes), place_in_order(&lifetimes));
            assert_disjoint(&lifetimes, &p);
            assert_disjoint(&lifetimes, &q);
            let peak = (0..50)
                .map(|s| {
                    lifetimes.iter().flatten().filter(|l| l.first <= s && s <= l.last).map(|l| aligned(l.bytes)).sum()
                })
                .max()
                .unwrap_or(0);
            assert!(p.arena_bytes >= peak && q.arena_bytes >= peak, "an arena is at least the aligned peak");
        }
    }
}
