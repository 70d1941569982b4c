//! `lms doctor`: whether this machine can run the CUDA backend, and with what — the GPU,
//! the driver's CUDA version, each library with its path and version, free device memory,
//! and the kernels compiled for the GPU.

use super::kernels::{architecture, check_toolchain, compile_all, nvrtc_version, SOURCES};
use super::loader::{self, CudaLibrary, Found};
use super::{driver_version, fixed_device_bytes, CudaError, FIXED_DEVICE_BUFFERS, RESERVE};
use cudarc::driver::CudaContext;
use std::fmt::Write;
use std::panic::{catch_unwind, AssertUnwindSafe};

/// What `lms doctor` found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnosis {
    /// The facts gathered, one per line: each library found (version, path, place), the
    /// driver, the GPU and its free memory, the kernels compiled for it.
    pub facts: String,
    /// Why the CUDA backend cannot run here, in one line (for missing libraries, which;
    /// `facts` then lists every place searched), or `None` when it can.
    pub problem: Option<String>,
}

/// Examines this machine's GPU set-up.
pub fn doctor() -> Diagnosis {
    let mut facts = String::new();
    let libraries = CudaLibrary::ALL.to_vec();
    if loader::emulated() {
        let _ = writeln!(facts, "emulated device (no GPU): {}=1; its figures are not a GPU's", loader::EMULATOR_VAR);
    }
    let results: Vec<Result<Found, loader::Missing>> = libraries.iter().map(|&l| loader::load(l)).collect();
    for found in results.iter().flatten() {
        let _ = writeln!(facts, "{}", library_line(found));
    }
    if results.iter().any(Result::is_err) {
        let _ = writeln!(facts, "{}", loader::listing(&results));
        let problem = format!("the GPU cannot be used: {}", loader::missing_line(&results));
        return Diagnosis { facts, problem: Some(problem) };
    }
    let gathered = catch_unwind(AssertUnwindSafe(|| gpu_facts(&mut facts)))
        .unwrap_or_else(|_| Err("a CUDA library lacks a function this build expects (CUDA 12/13, cuDNN 9)".into()));
    Diagnosis { facts, problem: gathered.err().map(|why| format!("the GPU cannot be used: {why}")) }
}

/// One line per library: name, version, path and the place that held it.
fn library_line(found: &Found) -> String {
    let version = catch_unwind(|| version(found.library)).unwrap_or_else(|_| Err("unknown".into()));
    let version = version.unwrap_or_else(|e| format!("version unknown: {e}"));
    format!("{:<10} {:<8} {} ({})", found.library.name(), version, found.path.display(), found.place)
}

/// The version a loaded library reports.
fn version(library: CudaLibrary) -> Result<String, String> {
    let reported: Result<String, CudaError> = match library {
        CudaLibrary::Driver => driver_version().map(|v| format!("{}.{}", v / 1000, v % 1000 / 10)),
        CudaLibrary::Nvrtc => nvrtc_version().map(|(major, minor)| format!("{major}.{minor}")),
        CudaLibrary::Cublas => {
            use cudarc::cublas::sys::{cublasGetProperty, libraryPropertyType as P};
            let mut parts = [0; 3];
            for (part, property) in parts.iter_mut().zip([P::MAJOR_VERSION, P::MINOR_VERSION, P::PATCH_LEVEL]) {
                // SAFETY: a plain out-parameter; the library is loaded.
                unsafe { cublasGetProperty(property, part) }.result().map_err(|e| CudaError::from(e).to_string())?;
            }
            Ok(format!("{}.{}.{}", parts[0], parts[1], parts[2]))
        }
        CudaLibrary::Cudnn => {
            // SAFETY: takes no argument; the library is loaded.
            let v = unsafe { cudarc::cudnn::sys::cudnnGetVersion() };
            Ok(format!("{}.{}.{}", v / 10000, v % 10000 / 100, v % 100))
        }
    };
    reported.map_err(|e| e.to_string())
}

/// The GPUs, device 0's memory, and the kernels compiled for it, appended to `report`.
fn gpu_facts(report: &mut String) -> Result<(), String> {
    let driver = driver_version().map_err(|e| e.to_string())?;
    let count = CudaContext::device_count().map_err(|e| format!("the CUDA driver failed to start: {e}"))?;
    let _ = writeln!(report, "driver: CUDA {}.{}, {count} GPU(s)", driver / 1000, driver % 1000 / 10);
    if count == 0 {
        return Err("no CUDA device found".into());
    }
    let ctx = CudaContext::new(0).map_err(|e| format!("cannot open CUDA device 0: {e}"))?;
    let failed = |e: cudarc::driver::DriverError| e.to_string();
    let name = ctx.name().map_err(failed)?;
    let (major, minor) = ctx.compute_capability().map_err(failed)?;
    let (free, total) = ctx.mem_get_info().map_err(failed)?;
    let gib = |b: usize| b as f64 / (1u64 << 30) as f64;
    let _ = writeln!(report, "GPU 0: {name} (sm_{major}{minor}), {:.2} GiB free of {:.2} GiB", gib(free), gib(total));
    let buffers: Vec<String> = FIXED_DEVICE_BUFFERS.iter().map(|(what, bytes)| format!("{what} {bytes} B")).collect();
    let largest = (free as u64).saturating_sub(RESERVE).saturating_sub(fixed_device_bytes());
    let _ = writeln!(
        report,
        "per run: the plan's device arena + a fixed reserve of {} B ({}), with {:.2} GiB left for the context and \
         libraries; the largest device budget a plan may have here is {} B",
        fixed_device_bytes(),
        buffers.join(", "),
        gib(RESERVE as usize),
        largest
    );
    check_toolchain(major, minor, driver).map_err(|e| e.to_string())?;
    let arch = architecture(major, minor);
    let compiled = compile_all(&arch).map_err(|e| e.to_string())?;
    let warned: Vec<&str> = compiled.iter().filter(|c| !c.log.is_empty()).map(|c| c.source).collect();
    let _ = writeln!(
        report,
        "kernels: {} sources compiled to {arch} CUBIN{}",
        SOURCES.len(),
        if warned.is_empty() { ", no warnings".to_string() } else { format!("; warnings in {}", warned.join(", ")) }
    );
    for cubin in compiled.iter() {
        ctx.load_module(cudarc::nvrtc::Ptx::from_binary(cubin.image.clone()))
            .map_err(|e| format!("the driver refuses {}'s CUBIN: {e}", cubin.source))?;
    }
    Ok(())
}
