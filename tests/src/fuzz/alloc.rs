//! A counting global allocator for fuzz binaries: it tracks the bytes live, flags any
//! execution that holds more than [`LIMIT`] bytes at once, and refuses to go past
//! [`HARD_LIMIT`] (the process then aborts, after the input is written out by
//! [`super::runner`]'s crash hook).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// Live bytes above which an execution is reported: 1 GiB.
pub const LIMIT: usize = 1 << 30;
/// Live bytes the allocator never grants: 2 GiB.
pub const HARD_LIMIT: usize = 2 << 30;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);
static REFUSED: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting. Install with
/// `#[global_allocator] static A: CountingAlloc = CountingAlloc;`.
pub struct CountingAlloc;

/// Largest number of bytes live since the last [`reset_peak`].
pub fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

/// Starts a new peak measurement at the bytes live now.
pub fn reset_peak() {
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// The largest resident set of any child process this process has waited for, in bytes
/// (`getrusage(RUSAGE_CHILDREN)`): what the command-line target's `lms` runs held.
pub fn children_peak() -> usize {
    // SAFETY: getrusage only fills the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid pointer to a rusage struct.
    let _ = unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) };
    usize::try_from(usage.ru_maxrss).unwrap_or(0) << 10
}

/// Runs `f` and returns its result with the most bytes it held at once beyond those live
/// when it started (what `f` returns included); the peak since the last [`reset_peak`]
/// still counts what `f` held.
pub fn held<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let outer = PEAK.load(Ordering::Relaxed);
    let start = LIVE.load(Ordering::Relaxed);
    PEAK.store(start, Ordering::Relaxed);
    let result = f();
    let held = PEAK.load(Ordering::Relaxed).saturating_sub(start);
    PEAK.fetch_max(outer, Ordering::Relaxed);
    (result, held)
}

/// Whether an allocation was refused for going past [`HARD_LIMIT`].
pub fn refused() -> bool {
    REFUSED.load(Ordering::Relaxed)
}

impl CountingAlloc {
    fn grant(&self, size: usize) -> bool {
        let live = LIVE.fetch_add(size, Ordering::Relaxed) + size;
        if live > HARD_LIMIT {
            LIVE.fetch_sub(size, Ordering::Relaxed);
            REFUSED.store(true, Ordering::Relaxed);
            super::runner::save_current_input();
            return false;
        }
        PEAK.fetch_max(live, Ordering::Relaxed);
        true
    }
}

// SAFETY: every method forwards to the system allocator with the same layout; the counters
// are only bookkeeping, and a refused allocation returns null, which callers handle.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !self.grant(layout.size()) {
            return std::ptr::null_mut();
        }
        let p = System.alloc(layout);
        if p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !self.grant(layout.size()) {
            return std::ptr::null_mut();
        }
        let p = System.alloc_zeroed(layout);
        if p.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size > layout.size() && !self.grant(new_size - layout.size()) {
            return std::ptr::null_mut();
        }
        let p = System.realloc(ptr, layout, new_size);
        match (p.is_null(), new_size > layout.size()) {
            (true, true) => {
                LIVE.fetch_sub(new_size - layout.size(), Ordering::Relaxed);
            }
            (false, false) => {
                LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
            _ => {}
        }
        p
    }
}
