//! The offset allocator inside the device arena.
//!
//! The CUDA backend takes its whole budget of device memory with one allocation. A
//! program's tensors sit at their statically planned offsets in one region of it
//! (`memory::Device::plan`); this allocator places everything else — the region itself,
//! library workspaces, the ops' scratch memory, buffers of a backend used without a plan.
//! Placement is best fit over a free list (the smallest free block that holds the request;
//! ties: the lowest offset), and a freed block merges with free neighbours at once;
//! [`ArenaStats`] reports how fragmented it is.
//!
//! Blocks are freed while queues may still use them: each free block carries [`Fences`],
//! per queue the latest point after which that queue no longer touches it. Whoever reuses
//! the block makes its own queue wait for the fences of the other queues first.

use crate::memory::format_bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Every block starts at a multiple of this many bytes (cuBLAS and cuDNN like 256).
pub const ALIGNMENT: u64 = 256;

/// How full and how fragmented an arena is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArenaStats {
    /// Bytes of the arena.
    pub capacity: u64,
    /// Bytes in live blocks (sizes rounded up to [`ALIGNMENT`]).
    pub used: u64,
    /// The largest free block.
    pub largest_free: u64,
    /// Number of free blocks.
    pub free_blocks: usize,
}

impl ArenaStats {
    /// Bytes not in live blocks.
    pub fn free(&self) -> u64 {
        self.capacity - self.used
    }

    /// External fragmentation: 1 − largest free block / free bytes (0 when nothing is free
    /// or all free bytes are one block).
    pub fn fragmentation(&self) -> f64 {
        match self.free() {
            0 => 0.0,
            free => 1.0 - self.largest_free as f64 / free as f64,
        }
    }
}

impl fmt::Display for ArenaStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} in use, {} free in {} blocks, the largest {} (fragmentation {:.2})",
            format_bytes(self.used),
            format_bytes(self.capacity),
            format_bytes(self.free()),
            self.free_blocks,
            format_bytes(self.largest_free),
            self.fragmentation()
        )
    }
}

/// Per queue (indexed 0..3), the latest mark after which the queue no longer uses a block,
/// with the mark's sequence number on that queue.
#[derive(Clone, Debug)]
pub struct Fences<M> {
    by_queue: [Option<(u64, M)>; 3],
}

impl<M> Default for Fences<M> {
    fn default() -> Self {
        Fences { by_queue: [None, None, None] }
    }
}

impl<M: Clone> Fences<M> {
    /// Adds `mark`, number `seq` on queue `queue`, keeping the later mark of each queue.
    pub fn add(&mut self, queue: usize, seq: u64, mark: M) {
        let slot = &mut self.by_queue[queue];
        if slot.as_ref().is_none_or(|(s, _)| *s < seq) {
            *slot = Some((seq, mark));
        }
    }

    /// The union of two fence sets: per queue the later mark.
    fn merge(&mut self, other: &Fences<M>) {
        for (queue, entry) in other.by_queue.iter().enumerate() {
            if let Some((seq, mark)) = entry {
                self.add(queue, *seq, mark.clone());
            }
        }
    }

    /// The marks of queues other than `queue`, which work on `queue` must wait for.
    pub fn others(&self, queue: usize) -> impl Iterator<Item = &M> {
        self.by_queue
            .iter()
            .enumerate()
            .filter(move |(q, _)| *q != queue)
            .filter_map(|(_, entry)| entry.as_ref().map(|(_, mark)| mark))
    }
}

/// A free block: its length and when each queue is done with it.
#[derive(Clone, Debug)]
struct FreeBlock<M> {
    len: u64,
    fences: Fences<M>,
}

/// Best-fit placement of blocks in `[0, capacity)`, with fences on free blocks.
#[derive(Clone, Debug)]
pub struct OffsetAllocator<M> {
    capacity: u64,
    /// Free blocks by offset.
    free: BTreeMap<u64, FreeBlock<M>>,
    /// Free blocks by (length, offset), for best fit.
    by_size: BTreeSet<(u64, u64)>,
    /// Live blocks: offset → length.
    live: BTreeMap<u64, u64>,
    used: u64,
}

impl<M: Clone> OffsetAllocator<M> {
    /// An empty allocator over `capacity` bytes (rounded down to [`ALIGNMENT`]).
    pub fn new(capacity: u64) -> OffsetAllocator<M> {
        let capacity = capacity / ALIGNMENT * ALIGNMENT;
        let mut allocator = OffsetAllocator {
            capacity,
            free: BTreeMap::new(),
            by_size: BTreeSet::new(),
            live: BTreeMap::new(),
            used: 0,
        };
        if capacity > 0 {
            allocator.insert_free(0, capacity, Fences::default());
        }
        allocator
    }

    /// The bytes a request of `bytes` occupies: at least one aligned unit.
    pub fn footprint(bytes: u64) -> Option<u64> {
        bytes.max(1).checked_next_multiple_of(ALIGNMENT)
    }

    /// Places `bytes` at the best-fitting free block; returns the offset and the fences
    /// of the block it came from, or the arena's state when no free block is large enough.
    pub fn alloc(&mut self, bytes: u64) -> Result<(u64, Fences<M>), ArenaStats> {
        let Some(len) = Self::footprint(bytes) else {
            return Err(self.stats());
        };
        let Some(&(block_len, offset)) = self.by_size.range((len, 0)..).next() else {
            return Err(self.stats());
        };
        let block = self.remove_free(offset, block_len);
        if block_len > len {
            self.insert_free(offset + len, block_len - len, block.fences.clone());
        }
        self.live.insert(offset, len);
        self.used += len;
        Ok((offset, block.fences))
    }

    /// Frees the live block at `offset`, which the queues are done with after `fences`,
    /// merging it with free neighbours. Returns its length; `None` when no live block
    /// starts there.
    pub fn free(&mut self, offset: u64, fences: Fences<M>) -> Option<u64> {
        let len = self.live.remove(&offset)?;
        self.used -= len;
        let (mut start, mut end, mut fences) = (offset, offset + len, fences);
        if let Some((&prev, prev_block)) = self.free.range(..offset).next_back() {
            if prev + prev_block.len == offset {
                let prev_len = prev_block.len;
                let block = self.remove_free(prev, prev_len);
                fences.merge(&block.fences);
                start = prev;
            }
        }
        if let Some(next_len) = self.free.get(&end).map(|b| b.len) {
            let block = self.remove_free(end, next_len);
            fences.merge(&block.fences);
            end += next_len;
        }
        self.insert_free(start, end - start, fences);
        Some(len)
    }

    /// The largest request that would succeed now.
    pub fn largest_free(&self) -> u64 {
        self.by_size.last().map_or(0, |&(len, _)| len)
    }

    /// The allocator's state.
    pub fn stats(&self) -> ArenaStats {
        ArenaStats {
            capacity: self.capacity,
            used: self.used,
            largest_free: self.largest_free(),
            free_blocks: self.free.len(),
        }
    }

    fn insert_free(&mut self, offset: u64, len: u64, fences: Fences<M>) {
        self.free.insert(offset, FreeBlock { len, fences });
        self.by_size.insert((len, offset));
    }

    fn remove_free(&mut self, offset: u64, len: u64) -> FreeBlock<M> {
        self.by_size.remove(&(len, offset));
        self.free.remove(&offset).unwrap_or(FreeBlock { len, fences: Fences::default() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arena(capacity: u64) -> OffsetAllocator<&'static str> {
        OffsetAllocator::new(capacity)
    }

    #[test]
    fn best_fit_aligns_and_coalesces() {
        let mut a = arena(4096);
        let (x, _) = a.alloc(100).unwrap();
        let (y, _) = a.alloc(300).unwrap();
        let (z, _) = a.alloc(256).unwrap();
        assert_eq!((x, y, z), (0, 256, 768));
        assert_eq!(a.stats().used, 1024);
        // Freeing the middle block leaves a 512-byte hole; a 200-byte request takes it
        // (best fit) rather than the 3 KiB tail.
        assert_eq!(a.free(y, Fences::default()), Some(512));
        let (w, _) = a.alloc(200).unwrap();
        assert_eq!(w, 256);
        assert_eq!(a.stats().free_blocks, 2);
        // Freeing everything merges back into one block.
        for offset in [x, w, z] {
            a.free(offset, Fences::default()).unwrap();
        }
        let stats = a.stats();
        assert_eq!((stats.used, stats.free_blocks, stats.largest_free), (0, 1, 4096));
        assert_eq!(stats.fragmentation(), 0.0);
        assert_eq!(a.free(12345, Fences::default()), None);
    }

    #[test]
    fn fragmentation_is_reported_when_no_block_fits() {
        let mut a = arena(4 * 256);
        let offsets: Vec<u64> = (0..4).map(|_| a.alloc(256).unwrap().0).collect();
        a.free(offsets[0], Fences::default()).unwrap();
        a.free(offsets[2], Fences::default()).unwrap();
        let err = a.alloc(512).unwrap_err();
        assert_eq!((err.free(), err.largest_free, err.free_blocks), (512, 256, 2));
        assert!((err.fragmentation() - 0.5).abs() < 1e-12);
        assert_eq!(
            err.to_string(),
            "512 B of 1.00 KiB in use, 512 B free in 2 blocks, the largest 256 B \
             (fragmentation 0.50)"
        );
        assert!(a.alloc(u64::MAX).is_err());
    }

    #[test]
    fn fences_travel_with_free_blocks_and_merge_per_queue() {
        let mut a = arena(1024);
        let (x, fresh) = a.alloc(512).unwrap();
        assert_eq!(fresh.others(0).count(), 0);
        let (y, _) = a.alloc(512).unwrap();
        let mut fx = Fences::default();
        fx.add(1, 3, "d2h#3");
        fx.add(0, 7, "compute#7");
        a.free(x, fx);
        let mut fy = Fences::default();
        fy.add(1, 5, "d2h#5");
        fy.add(1, 4, "d2h#4 (older, ignored)");
        a.free(y, fy);
        // The merged block waits for the later d2h mark and the compute mark.
        let (_, fences) = a.alloc(1024).unwrap();
        let for_h2d: Vec<_> = fences.others(2).copied().collect();
        assert_eq!(for_h2d, vec!["compute#7", "d2h#5"]);
        let for_compute: Vec<_> = fences.others(0).copied().collect();
        assert_eq!(for_compute, vec!["d2h#5"]);
    }
}
