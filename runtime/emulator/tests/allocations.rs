//! The emulated driver counts every allocating entry point the backend can reach, device
//! and pinned host memory alike (one process per test binary: this is its only test, so
//! no other test allocates between the counts).

use lms_cuda_emulator::driver_allocations;
use std::ffi::{c_int, c_uint, c_void};

extern "C" {
    fn cuMemAlloc_v2(ptr: *mut u64, bytes: usize) -> c_int;
    fn cuMemAllocAsync(ptr: *mut u64, bytes: usize, stream: *mut c_void) -> c_int;
    fn cuMemFree_v2(ptr: u64) -> c_int;
    fn cuMemHostAlloc(ptr: *mut *mut c_void, bytes: usize, flags: c_uint) -> c_int;
    fn cuMemAllocHost_v2(ptr: *mut *mut c_void, bytes: usize) -> c_int;
    fn cuMemFreeHost(ptr: *mut c_void) -> c_int;
}

#[test]
fn every_allocating_entry_point_is_counted_with_its_bytes() {
    let before = driver_allocations();
    let (mut a, mut b) = (0u64, 0u64);
    let (mut h, mut p) = (std::ptr::null_mut(), std::ptr::null_mut());
    // SAFETY: valid out-parameters; each allocation is freed once below.
    unsafe {
        assert_eq!(cuMemAlloc_v2(&mut a, 1000), 0);
        assert_eq!(cuMemAllocAsync(&mut b, 24, std::ptr::null_mut()), 0);
        assert_eq!(cuMemHostAlloc(&mut h, 300, 0), 0);
        assert_eq!(cuMemAllocHost_v2(&mut p, 5), 0);
    }
    let after = driver_allocations();
    assert_eq!((after.0 - before.0, after.1 - before.1), (4, 1329));
    // SAFETY: the allocations above, freed once.
    unsafe {
        assert_eq!(cuMemFree_v2(a), 0);
        assert_eq!(cuMemFree_v2(b), 0);
        assert_eq!(cuMemFreeHost(h), 0);
        assert_eq!(cuMemFreeHost(p), 0);
    }
    // Freeing allocates nothing; a refused allocation is still a call the backend made.
    assert_eq!(driver_allocations(), after);
    let mut huge = 0u64;
    // SAFETY: a valid out-parameter; the allocation is refused (over the capacity).
    assert_ne!(unsafe { cuMemAlloc_v2(&mut huge, usize::MAX / 2) }, 0);
    assert_eq!(driver_allocations().0, after.0 + 1);
}
