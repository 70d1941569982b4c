//! The emulated driver API and NVRTC, called as the backend calls them through cudarc:
//! NVRTC accepts exactly the sources the kernels were built from and refuses an edited
//! one; the driver loads only its NVRTC's images, launches their kernels, refuses host
//! pointers and reports a kernel's fault through `cuGetErrorString`.

// Links the crate, whose C++ holds the functions declared below.
use lms_cuda_emulator as _;
use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

extern "C" {
    fn nvrtcCreateProgram(
        program: *mut *mut c_void,
        text: *const c_char,
        name: *const c_char,
        headers: c_int,
        sources: *const *const c_char,
        names: *const *const c_char,
    ) -> c_int;
    fn nvrtcCompileProgram(program: *mut c_void, options: c_int, values: *const *const c_char) -> c_int;
    fn nvrtcGetProgramLogSize(program: *mut c_void, size: *mut usize) -> c_int;
    fn nvrtcGetProgramLog(program: *mut c_void, log: *mut c_char) -> c_int;
    fn nvrtcGetCUBINSize(program: *mut c_void, size: *mut usize) -> c_int;
    fn nvrtcGetCUBIN(program: *mut c_void, image: *mut c_char) -> c_int;
    fn nvrtcDestroyProgram(program: *mut *mut c_void) -> c_int;
    fn cuModuleLoadData(module: *mut *mut c_void, image: *const c_void) -> c_int;
    fn cuModuleGetFunction(function: *mut *mut c_void, module: *mut c_void, name: *const c_char) -> c_int;
    fn cuMemAlloc_v2(ptr: *mut u64, bytes: usize) -> c_int;
    fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, bytes: usize) -> c_int;
    fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, bytes: usize) -> c_int;
    #[allow(clippy::too_many_arguments)]
    fn cuLaunchKernel(
        function: *mut c_void,
        gx: c_uint,
        gy: c_uint,
        gz: c_uint,
        bx: c_uint,
        by: c_uint,
        bz: c_uint,
        shared: c_uint,
        stream: *mut c_void,
        params: *mut *mut c_void,
        extra: *mut *mut c_void,
    ) -> c_int;
    fn cuGetErrorString(error: c_int, text: *mut *const c_char) -> c_int;
}

const COMMON: &str = include_str!("../../kernels/common.cuh");
const TRAINING: &str = include_str!("../../kernels/training.cu");
const FAULTS: &str = include_str!("../cpp/faults.cu");

/// Compiles `text` as program `name`: the image, or NVRTC's status and log.
fn compile(name: &str, text: &str) -> Result<Vec<u8>, (c_int, String)> {
    let (text, name) = (CString::new(text).unwrap(), CString::new(name).unwrap());
    let mut program = std::ptr::null_mut();
    // SAFETY: valid C strings and out-parameters; the program is destroyed once.
    unsafe {
        assert_eq!(
            nvrtcCreateProgram(&mut program, text.as_ptr(), name.as_ptr(), 0, std::ptr::null(), std::ptr::null()),
            0
        );
        let status = nvrtcCompileProgram(program, 0, std::ptr::null());
        let result = if status == 0 {
            let mut size = 0;
            assert_eq!(nvrtcGetCUBINSize(program, &mut size), 0);
            let mut image = vec![0u8; size];
            assert_eq!(nvrtcGetCUBIN(program, image.as_mut_ptr().cast()), 0);
            Ok(image)
        } else {
            let mut size = 0;
            assert_eq!(nvrtcGetProgramLogSize(program, &mut size), 0);
            let mut log = vec![0 as c_char; size];
            assert_eq!(nvrtcGetProgramLog(program, log.as_mut_ptr()), 0);
            Err((status, CStr::from_ptr(log.as_ptr()).to_string_lossy().into_owned()))
        };
        assert_eq!(nvrtcDestroyProgram(&mut program), 0);
        result
    }
}

fn function(image: &[u8], name: &str) -> Result<*mut c_void, c_int> {
    let mut module = std::ptr::null_mut();
    let mut function = std::ptr::null_mut();
    let name = CString::new(name).unwrap();
    // SAFETY: the image is a live buffer; plain out-parameters.
    unsafe {
        match cuModuleLoadData(&mut module, image.as_ptr().cast()) {
            0 => {}
            e => return Err(e),
        }
        match cuModuleGetFunction(&mut function, module, name.as_ptr()) {
            0 => Ok(function),
            e => Err(e),
        }
    }
}

fn launch(function: *mut c_void, threads: c_uint, args: &mut [*mut c_void]) -> c_int {
    // SAFETY: `args` points at one value per parameter of the kernel.
    unsafe {
        cuLaunchKernel(
            function,
            1,
            1,
            1,
            threads,
            1,
            1,
            0,
            std::ptr::null_mut(),
            args.as_mut_ptr(),
            std::ptr::null_mut(),
        )
    }
}

#[test]
fn nvrtc_accepts_the_built_sources_and_refuses_an_edited_one() {
    let image = compile("training.cu", &format!("{COMMON}\n{TRAINING}")).expect("the built source compiles");
    assert!(function(&image, "sgd_f32").is_ok());
    assert_eq!(function(&image, "unary_f32").err(), Some(500), "a kernel of another source is not in this module");

    let edited = format!("{COMMON}\n{}", TRAINING.replace("lr * (double)g[i]", "lr * 2.0 * (double)g[i]"));
    let (status, log) = compile("training.cu", &edited).unwrap_err();
    assert_eq!(status, 6);
    assert!(log.contains("another version of this source"), "{log}");
    // The emulator's own fault kernels are not a backend source.
    assert!(compile("faults.cu", &format!("{COMMON}\n{FAULTS}")).is_err());
    assert_eq!(function(b"\x7fELF not an emulated image\0", "sgd_f32").err(), Some(200));
}

#[test]
fn launches_run_refuse_host_pointers_and_report_faults() {
    let image = compile("training.cu", &format!("{COMMON}\n{TRAINING}")).unwrap();
    let sgd = function(&image, "sgd_f32").unwrap();
    let (w, g) = ([1.0f32, 2.0, 3.0], [10.0f32, 10.0, 10.0]);
    let mut ptrs = [0u64; 3];
    // SAFETY: plain copies into fresh device allocations of the right size.
    unsafe {
        for p in &mut ptrs {
            assert_eq!(cuMemAlloc_v2(p, 12), 0);
        }
        assert_eq!(cuMemcpyHtoD_v2(ptrs[0], w.as_ptr().cast(), 12), 0);
        assert_eq!(cuMemcpyHtoD_v2(ptrs[1], g.as_ptr().cast(), 12), 0);
    }
    let (n, mut lr) = (std::cell::Cell::new(3i64), 0.1f64);
    let mut args: Vec<*mut c_void> = vec![
        n.as_ptr().cast(),
        (&mut lr as *mut f64).cast(),
        (&mut ptrs[0] as *mut u64).cast(),
        (&mut ptrs[1] as *mut u64).cast(),
        (&mut ptrs[2] as *mut u64).cast(),
    ];
    assert_eq!(launch(sgd, 32, &mut args), 0);
    let mut out = [0f32; 3];
    // SAFETY: a copy of 12 bytes out of a 12-byte allocation.
    assert_eq!(unsafe { cuMemcpyDtoH_v2(out.as_mut_ptr().cast(), ptrs[2], 12) }, 0);
    assert_eq!(out, [0.0, 1.0, 2.0]);

    let mut host = out.as_mut_ptr() as u64;
    args[4] = (&mut host as *mut u64).cast();
    assert_eq!(launch(sgd, 32, &mut args), 1, "a host pointer is refused");

    // n = 1000 over 12-byte buffers: the kernel reads past the end of its allocation.
    n.set(1000);
    args[4] = (&mut ptrs[2] as *mut u64).cast();
    assert_eq!(launch(sgd, 32, &mut args), 719);
    let mut text = std::ptr::null();
    // SAFETY: a plain out-parameter; the string is the driver's.
    let message = unsafe {
        assert_eq!(cuGetErrorString(719, &mut text), 0);
        CStr::from_ptr(text).to_string_lossy().into_owned()
    };
    assert!(message.contains("sgd_f32") && message.contains("invalid memory access"), "{message}");
}
