//! An emulated CUDA device: the CUDA backend's kernels (`runtime/kernels/*.cu`, compiled
//! unchanged as C++ over an emulation header) launched by name on the CPU, on device
//! memory in a mapping of its own that host code never dereferences.
//!
//! Execution model: the blocks of a launch run one after another in an order shuffled by
//! the launch's seed; a block's threads run as fibers on the calling thread, in an order
//! reshuffled at every step, each until it exits or waits at a barrier or a warp shuffle.
//! A barrier opens when every thread of the block waits at that same barrier, a shuffle
//! when the whole warp waits at it. Reported as a fault instead of hanging or reading
//! garbage: threads waiting at different barriers or exiting while others wait, a shuffle
//! reading a lane that has exited or does not exist, an access outside the live
//! allocations (guard pages around each; freed memory is never reused), and a pointer
//! argument that is not device memory. Results are the host compiler's, not a GPU's.

use std::ffi::{c_char, c_void, CStr, CString};

/// The folder of the emulated CUDA libraries built with this crate: `libcuda.so.1` (the
/// driver API over the emulated device, with NVRTC, cuBLAS and cuDNN), `libnvrtc.so.13`,
/// `libcublas.so.13` and `libcudnn.so.9`. The CUDA backend's loader uses them when `LMS_CUDA_EMULATOR=1`.
pub const LIBRARY_DIR: &str = env!("LMS_CUDA_EMULATOR_LIBRARY_DIR");
use std::fmt;

mod ffi {
    use std::ffi::{c_char, c_void};
    extern "C" {
        pub fn lms_emu_alloc(bytes: u64, out: *mut u64) -> i32;
        pub fn lms_emu_free(addr: u64) -> i32;
        pub fn lms_emu_used() -> u64;
        pub fn lms_emu_allocations(bytes: *mut u64) -> u64;
        pub fn lms_emu_valid_range(addr: u64, len: u64) -> i32;
        pub fn lms_emu_kernel_count() -> usize;
        pub fn lms_emu_kernel_name(i: usize) -> *const c_char;
        pub fn lms_emu_kernel_source(i: usize) -> *const c_char;
        pub fn lms_emu_kernel_launches(i: usize) -> u64;
        pub fn lms_emu_kernel_index(name: *const c_char) -> i64;
        pub fn lms_emu_launch(
            index: i64,
            grid: *const u32,
            block: *const u32,
            shared_bytes: u32,
            params: *mut *mut c_void,
            seed: u64,
            error: *mut c_char,
            error_len: usize,
        ) -> i32;
    }
}

/// What went wrong on the emulated device (one line).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EmuError {
    /// Device memory ran out (its address space is exhausted).
    OutOfMemory(u64),
    /// A copy or free names memory that is not (all) inside one live allocation.
    InvalidAddress(String),
    /// No kernel of that name.
    NoSuchKernel(String),
    /// The launch was refused before running: configuration or arguments.
    BadLaunch(String),
    /// A fault while the kernel ran: divergence, a bad shuffle, an invalid access.
    Fault(String),
}

impl fmt::Display for EmuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmuError::OutOfMemory(bytes) => write!(f, "emulated device: out of memory allocating {bytes} bytes"),
            EmuError::InvalidAddress(what) => write!(f, "emulated device: {what}"),
            EmuError::NoSuchKernel(name) => write!(f, "emulated device: no kernel {name}"),
            EmuError::BadLaunch(why) => write!(f, "emulated device: launch refused: {why}"),
            EmuError::Fault(why) => write!(f, "emulated device: kernel fault: {why}"),
        }
    }
}

impl std::error::Error for EmuError {}

/// An address in device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DevicePtr(pub u64);

impl DevicePtr {
    /// The address `bytes` further on.
    pub fn offset(self, bytes: u64) -> DevicePtr {
        DevicePtr(self.0 + bytes)
    }
}

/// Allocates `bytes` of device memory (256-aligned, ending against a guard page).
pub fn alloc(bytes: u64) -> Result<DevicePtr, EmuError> {
    let mut addr = 0;
    // SAFETY: a plain out-parameter.
    match unsafe { ffi::lms_emu_alloc(bytes, &mut addr) } {
        0 => Ok(DevicePtr(addr)),
        _ => Err(EmuError::OutOfMemory(bytes)),
    }
}

/// Frees an allocation; its memory becomes inaccessible for good.
pub fn free(ptr: DevicePtr) -> Result<(), EmuError> {
    // SAFETY: the device checks that `ptr` starts a live allocation.
    match unsafe { ffi::lms_emu_free(ptr.0) } {
        0 => Ok(()),
        _ => Err(EmuError::InvalidAddress(format!("free of 0x{:x}, not a live allocation", ptr.0))),
    }
}

/// Bytes of device memory allocated and not freed.
pub fn used() -> u64 {
    // SAFETY: no arguments.
    unsafe { ffi::lms_emu_used() }
}

/// How many allocating calls of the emulated driver API (`cuMemAlloc_v2`,
/// `cuMemAllocAsync`, `cuMemHostAlloc`, `cuMemAllocHost_v2`) this process made so far, and
/// their bytes. With `LMS_CUDA_EMULATOR_ALLOCATIONS=<file>` each such call also appends a
/// line `ENTRY_POINT BYTES` to that file, for a test to read what a child process allocated.
pub fn driver_allocations() -> (u64, u64) {
    let mut bytes = 0;
    // SAFETY: a valid out-parameter.
    let count = unsafe { ffi::lms_emu_allocations(&mut bytes) };
    (count, bytes)
}

/// Whether `[ptr, ptr + len)` lies inside one live allocation.
pub fn valid_range(ptr: DevicePtr, len: u64) -> bool {
    // SAFETY: a range query only.
    unsafe { ffi::lms_emu_valid_range(ptr.0, len) != 0 }
}

fn check_range(ptr: DevicePtr, len: usize, what: &str) -> Result<(), EmuError> {
    if valid_range(ptr, len as u64) {
        Ok(())
    } else {
        Err(EmuError::InvalidAddress(format!("{what} of {len} bytes at 0x{:x} outside every live allocation", ptr.0)))
    }
}

/// Copies `src` to device memory at `dst`.
pub fn copy_to_device(dst: DevicePtr, src: &[u8]) -> Result<(), EmuError> {
    check_range(dst, src.len(), "copy to the device")?;
    // SAFETY: the range was just checked to be inside a live, read-write allocation.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.0 as *mut u8, src.len()) };
    Ok(())
}

/// Copies device memory at `src` into `dst`.
pub fn copy_from_device(dst: &mut [u8], src: DevicePtr) -> Result<(), EmuError> {
    check_range(src, dst.len(), "copy from the device")?;
    // SAFETY: as above.
    unsafe { std::ptr::copy_nonoverlapping(src.0 as *const u8, dst.as_mut_ptr(), dst.len()) };
    Ok(())
}

/// A kernel argument, as the kernel's parameter declares it.
#[derive(Clone, Debug, PartialEq)]
pub enum Arg {
    /// A pointer (device memory, or null).
    Ptr(u64),
    /// `int`.
    I32(i32),
    /// `i64`.
    I64(i64),
    /// `u64`.
    U64(u64),
    /// `float`.
    F32(f32),
    /// `double`.
    F64(f64),
    /// A struct passed by value, as its bytes.
    Bytes(Vec<u8>),
}

impl From<DevicePtr> for Arg {
    fn from(ptr: DevicePtr) -> Arg {
        Arg::Ptr(ptr.0)
    }
}

impl Arg {
    fn bytes(&self) -> Vec<u8> {
        match self {
            Arg::Ptr(v) | Arg::U64(v) => v.to_ne_bytes().to_vec(),
            Arg::I32(v) => v.to_ne_bytes().to_vec(),
            Arg::I64(v) => v.to_ne_bytes().to_vec(),
            Arg::F32(v) => v.to_ne_bytes().to_vec(),
            Arg::F64(v) => v.to_ne_bytes().to_vec(),
            Arg::Bytes(b) => b.clone(),
        }
    }
}

/// A launch's shape: blocks in the grid, threads per block, dynamic shared memory, and
/// the seed of the block and thread orders.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LaunchConfig {
    /// Blocks along x, y, z.
    pub grid: [u32; 3],
    /// Threads per block along x, y, z.
    pub block: [u32; 3],
    /// Bytes of dynamic shared memory.
    pub shared_bytes: u32,
    /// Seeds the shuffled orders.
    pub seed: u64,
}

impl LaunchConfig {
    /// `grid` blocks of `block` threads along x, seed 0.
    pub fn linear(grid: u32, block: u32) -> LaunchConfig {
        LaunchConfig { grid: [grid, 1, 1], block: [block, 1, 1], shared_bytes: 0, seed: 0 }
    }
}

/// The index of kernel `name`.
pub fn kernel_index(name: &str) -> Result<usize, EmuError> {
    let c = CString::new(name).map_err(|_| EmuError::NoSuchKernel(name.escape_debug().to_string()))?;
    // SAFETY: `c` is a valid C string for the call.
    let index = unsafe { ffi::lms_emu_kernel_index(c.as_ptr()) };
    usize::try_from(index).map_err(|_| EmuError::NoSuchKernel(name.escape_debug().to_string()))
}

/// Launches kernel `name` with `args` (one per parameter, in order) and runs it to the end.
pub fn launch(name: &str, config: LaunchConfig, args: &[Arg]) -> Result<(), EmuError> {
    let index = kernel_index(name)?;
    let mut values: Vec<Vec<u64>> = args
        .iter()
        .map(|a| {
            let bytes = a.bytes();
            // Each value in its own 8-byte-aligned buffer.
            let mut words = vec![0u64; bytes.len().div_ceil(8).max(1)];
            // SAFETY: `words` holds at least `bytes.len()` bytes.
            unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), words.as_mut_ptr().cast::<u8>(), bytes.len()) };
            words
        })
        .collect();
    let mut params: Vec<*mut c_void> = values.iter_mut().map(|v| v.as_mut_ptr().cast::<c_void>()).collect();
    // SAFETY: `params` points at one argument value per parameter, alive for the call.
    unsafe { launch_raw(index, config, params.as_mut_ptr()) }
}

/// Launches kernel `index` with driver-style parameters (`params[i]` points at argument
/// `i`'s value).
///
/// # Safety
/// `params` must hold one valid pointer per parameter of the kernel, each to a value of
/// the parameter's type.
pub unsafe fn launch_raw(index: usize, config: LaunchConfig, params: *mut *mut c_void) -> Result<(), EmuError> {
    let mut error = vec![0 as c_char; 1024];
    let code = ffi::lms_emu_launch(
        index as i64,
        config.grid.as_ptr(),
        config.block.as_ptr(),
        config.shared_bytes,
        params,
        config.seed,
        error.as_mut_ptr(),
        error.len(),
    );
    let message = || CStr::from_ptr(error.as_ptr()).to_string_lossy().into_owned();
    match code {
        0 => Ok(()),
        1 => Err(EmuError::BadLaunch(message())),
        _ => Err(EmuError::Fault(message())),
    }
}

/// One kernel the device holds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelInfo {
    /// Its name.
    pub name: String,
    /// Its source file (`elementwise.cu`, or `faults.cu` for the emulator's own).
    pub source: String,
    /// Launches so far in this process.
    pub launches: u64,
}

/// Every kernel, in source order.
pub fn kernels() -> Vec<KernelInfo> {
    // SAFETY: indices below the count; the names are static C strings.
    unsafe {
        (0..ffi::lms_emu_kernel_count())
            .map(|i| KernelInfo {
                name: CStr::from_ptr(ffi::lms_emu_kernel_name(i)).to_string_lossy().into_owned(),
                source: CStr::from_ptr(ffi::lms_emu_kernel_source(i)).to_string_lossy().into_owned(),
                launches: ffi::lms_emu_kernel_launches(i),
            })
            .collect()
    }
}
