//! The emulated driver's streams, called directly: work on different streams runs in
//! seeded random interleavings that keep each stream's order and every event wait, and a
//! copy reading what another stream's copy writes, with no event wait between them, fails
//! the device with a hazard naming both. (A file of its own: the failure is the process's.)

use lms_cuda_emulator as _;
use std::ffi::{c_int, c_void, CStr};
use std::sync::Mutex;

extern "C" {
    fn cuStreamCreate(stream: *mut *mut c_void, flags: u32) -> c_int;
    fn cuEventCreate(event: *mut *mut c_void, flags: u32) -> c_int;
    fn cuEventRecord(event: *mut c_void, stream: *mut c_void) -> c_int;
    fn cuEventQuery(event: *mut c_void) -> c_int;
    fn cuStreamWaitEvent(stream: *mut c_void, event: *mut c_void, flags: u32) -> c_int;
    fn cuLaunchHostFunc(stream: *mut c_void, f: extern "C" fn(*mut c_void), data: *mut c_void) -> c_int;
    fn cuCtxSynchronize() -> c_int;
    fn cuMemAlloc_v2(ptr: *mut u64, bytes: usize) -> c_int;
    fn cuMemHostAlloc(ptr: *mut *mut c_void, bytes: usize, flags: u32) -> c_int;
    fn cuMemcpyHtoDAsync_v2(dst: u64, src: *const c_void, bytes: usize, stream: *mut c_void) -> c_int;
    fn cuMemcpyDtoHAsync_v2(dst: *mut c_void, src: u64, bytes: usize, stream: *mut c_void) -> c_int;
    fn cuGetErrorString(error: c_int, text: *mut *const std::ffi::c_char) -> c_int;
}

/// The order the host functions ran in.
static RAN: Mutex<Vec<usize>> = Mutex::new(Vec::new());

extern "C" fn note(data: *mut c_void) {
    RAN.lock().unwrap().push(data as usize);
}

fn stream() -> *mut c_void {
    let mut s = std::ptr::null_mut();
    // SAFETY: a plain out-parameter.
    assert_eq!(unsafe { cuStreamCreate(&mut s, 1) }, 0);
    s
}

fn event() -> *mut c_void {
    let mut e = std::ptr::null_mut();
    // SAFETY: a plain out-parameter.
    assert_eq!(unsafe { cuEventCreate(&mut e, 0) }, 0);
    e
}

/// Queues host functions 1, 2, 3 on `a` and 4, 5, 6 on `b` (`b` first waiting for an
/// event recorded after 2 when `wait`), runs them, and returns their order.
fn interleaving(a: *mut c_void, b: *mut c_void, wait: bool) -> Vec<usize> {
    RAN.lock().unwrap().clear();
    let after_two = event();
    // SAFETY: the functions take their tag as the pointer and touch nothing else.
    unsafe {
        for tag in [1usize, 2] {
            assert_eq!(cuLaunchHostFunc(a, note, tag as *mut c_void), 0);
        }
        assert_eq!(cuEventRecord(after_two, a), 0);
        assert_eq!(cuLaunchHostFunc(a, note, 3 as *mut c_void), 0);
        if wait {
            assert_eq!(cuStreamWaitEvent(b, after_two, 0), 0);
        }
        for tag in [4usize, 5, 6] {
            assert_eq!(cuLaunchHostFunc(b, note, tag as *mut c_void), 0);
        }
        assert_eq!(cuEventQuery(after_two), 600, "queued work waits for the host to need it");
        assert!(RAN.lock().unwrap().is_empty());
        assert_eq!(cuCtxSynchronize(), 0);
    }
    RAN.lock().unwrap().clone()
}

#[test]
fn streams_interleave_in_seeded_orders_their_waits_allow_and_a_missing_wait_is_a_hazard() {
    let (a, b) = (stream(), stream());
    let position = |order: &[usize], tag: usize| order.iter().position(|&t| t == tag).unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for _ in 0..40 {
        let order = interleaving(a, b, false);
        assert!(position(&order, 1) < position(&order, 2) && position(&order, 2) < position(&order, 3), "{order:?}");
        assert!(position(&order, 4) < position(&order, 5) && position(&order, 5) < position(&order, 6), "{order:?}");
        seen.insert(order);
    }
    assert!(seen.len() > 5, "the streams interleaved in only {} ways: {seen:?}", seen.len());
    assert!(seen.iter().any(|o| o[0] == 4), "stream b never ran first: {seen:?}");
    for _ in 0..40 {
        let order = interleaving(a, b, true);
        assert!(position(&order, 2) < position(&order, 4), "the wait did not hold: {order:?}");
    }

    // A copy into device memory on `a`, read back on `b`: with an event wait, then without.
    let (mut device, mut host) = (0u64, std::ptr::null_mut());
    // SAFETY: plain out-parameters; the copies stay inside the 256-byte allocations.
    unsafe {
        assert_eq!(cuMemAlloc_v2(&mut device, 256), 0);
        assert_eq!(cuMemHostAlloc(&mut host, 512, 0), 0);
        let back = host.cast::<u8>().add(256).cast::<c_void>();
        let written = event();
        assert_eq!(cuMemcpyHtoDAsync_v2(device, host, 256, a), 0);
        assert_eq!(cuEventRecord(written, a), 0);
        assert_eq!(cuStreamWaitEvent(b, written, 0), 0);
        assert_eq!(cuMemcpyDtoHAsync_v2(back, device, 256, b), 0);
        assert_eq!(cuCtxSynchronize(), 0, "ordered by the wait");
        assert_eq!(cuMemcpyHtoDAsync_v2(device, host, 256, a), 0);
        assert_eq!(cuMemcpyDtoHAsync_v2(back, device, 256, b), 0);
        assert_eq!(cuCtxSynchronize(), 719, "no wait between the write and the read");
        let mut text = std::ptr::null();
        assert_eq!(cuGetErrorString(719, &mut text), 0);
        let message = CStr::from_ptr(text).to_string_lossy().into_owned();
        for part in [
            "hazard: cuMemcpy",
            "of 256 bytes on stream ",
            &format!(" memory at 0x{device:x} that cuMemcpy"),
            "with no event wait ordering that before it",
        ] {
            assert!(message.contains(part), "no '{part}' in: {message}");
        }
    }
}
