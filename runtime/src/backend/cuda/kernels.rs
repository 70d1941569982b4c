//! The backend's CUDA C kernels: the `.cu` sources of `runtime/kernels/`, embedded in the
//! binary, compiled by NVRTC to machine code (CUBIN) once per process and GPU
//! architecture, and loaded as modules.

use super::error::CudaError;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{result as nvrtc, sys as nvrtc_sys, Ptx};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::ffi::{CStr, CString};
use std::sync::{Arc, Mutex, OnceLock};

/// Prepended to every source: shared types (`Layout`) and device helpers.
const COMMON: &str = include_str!("../../../kernels/common.cuh");

/// The kernel sources, by file name.
pub const SOURCES: &[(&str, &str)] = &[
    ("elementwise.cu", include_str!("../../../kernels/elementwise.cu")),
    ("indexing.cu", include_str!("../../../kernels/indexing.cu")),
    ("norm.cu", include_str!("../../../kernels/norm.cu")),
    ("pool.cu", include_str!("../../../kernels/pool.cu")),
    ("reduce.cu", include_str!("../../../kernels/reduce.cu")),
    ("training.cu", include_str!("../../../kernels/training.cu")),
];

/// The full text NVRTC compiles for source `code`: the common header, then the source.
fn program_text(code: &str) -> String {
    format!("{COMMON}\n{code}")
}

// The names of a source's kernels, read the same way by the emulator's build script.
#[path = "../../../kernels/names.rs"]
mod names;
pub use names::kernel_names;

/// The kind of a kernel parameter, as far as passing it goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Param {
    /// A device pointer.
    Ptr,
    /// `int`.
    I32,
    /// `i64`.
    I64,
    /// `u64`.
    U64,
    /// `float`.
    F32,
    /// `double`.
    F64,
    /// A struct passed by value (`Layout`, `ReduceParams`, ...).
    Struct,
}

impl Param {
    /// The kind of a C parameter declaration such as `const float* x` or `i64 n`.
    fn of(declaration: &str) -> Option<Param> {
        let words: Vec<&str> = declaration.split_whitespace().filter(|w| *w != "const").collect();
        let ty = words.first()?;
        Some(match *ty {
            _ if declaration.contains('*') => Param::Ptr,
            "int" => Param::I32,
            "i64" => Param::I64,
            "u64" => Param::U64,
            "float" => Param::F32,
            "double" => Param::F64,
            t if t.starts_with(|c: char| c.is_ascii_uppercase()) && words.len() == 2 => Param::Struct,
            _ => return None,
        })
    }
}

/// The parameter list after `name(` in `code` (up to the closing parenthesis), parsed.
fn parameters(code: &str, declaration: &str) -> Option<Vec<Param>> {
    let start = code.find(declaration)? + declaration.len();
    let list = &code[start..start + code[start..].find(')')?];
    let list: String = list.split('\\').collect::<Vec<_>>().join(" ");
    if list.trim().is_empty() {
        return Some(Vec::new());
    }
    list.split(',').map(Param::of).collect()
}

/// The parameters of every kernel of every source, by kernel name (macro-made kernels
/// take their macro's parameters).
pub fn signatures() -> &'static HashMap<String, Vec<Param>> {
    static SIGNATURES: OnceLock<HashMap<String, Vec<Param>>> = OnceLock::new();
    SIGNATURES.get_or_init(|| {
        let mut all = HashMap::new();
        for &(_, code) in SOURCES {
            for name in kernel_names(code) {
                let plain = parameters(code, &format!("__global__ void {name}("));
                let made = || {
                    let call = code.lines().find(|l| l.trim().contains(&format!("({name},")))?;
                    let macro_name = call.trim().split('(').next()?;
                    let body = code.split(&format!("#define {macro_name}(")).nth(1)?;
                    parameters(body, "__global__ void NAME(")
                };
                if let Some(params) = plain.or_else(made) {
                    all.insert(name, params);
                }
            }
        }
        all
    })
}

/// NVRTC's target for a device of compute capability `major.minor`: machine code for
/// exactly that GPU (`sm_XY`), so no PTX is left for the driver to JIT (PTX from an NVRTC
/// newer than the driver does not load).
pub fn architecture(major: i32, minor: i32) -> String {
    format!("sm_{major}{minor}")
}

/// The options every source is compiled with, for target `arch`.
pub fn compile_options(arch: &str) -> Vec<String> {
    vec!["--std=c++17".to_string(), format!("--gpu-architecture={arch}")]
}

/// One source compiled to a CUBIN.
#[derive(Clone, Debug)]
pub struct Cubin {
    /// The source file.
    pub source: &'static str,
    /// The ELF image.
    pub image: Vec<u8>,
    /// NVRTC's log (warnings); empty for a clean compile.
    pub log: String,
}

/// Compiles every source for `arch` with NVRTC, or returns the process's earlier result.
pub fn compile_all(arch: &str) -> Result<Arc<Vec<Cubin>>, CudaError> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Vec<Cubin>>>>> = OnceLock::new();
    let mut cache = CACHE.get_or_init(Default::default).lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(compiled) = cache.get(arch) {
        return Ok(Arc::clone(compiled));
    }
    let compiled = Arc::new(SOURCES.iter().map(|&(name, code)| compile(name, code, arch)).collect::<Result<_, _>>()?);
    cache.insert(arch.to_string(), Arc::clone(&compiled));
    Ok(compiled)
}

/// Compiles source `name` (`code` after the common header) to a CUBIN for `arch`.
fn compile(name: &'static str, code: &str, arch: &str) -> Result<Cubin, CudaError> {
    let fail = |message: String| CudaError::Compile { source_name: name, message };
    let text = CString::new(program_text(code)).map_err(|e| fail(e.to_string()))?;
    let file = CString::new(name).map_err(|e| fail(e.to_string()))?;
    let program = nvrtc::create_program(&text, Some(&file)).map_err(|e| fail(format!("{e:?}")))?;
    // SAFETY: `program` was just created from `text` and `file`, which outlive it, and is
    // destroyed once, below.
    let result = unsafe {
        let compiled = nvrtc::compile_program(program, &compile_options(arch));
        let log = nvrtc::get_program_log(program)
            .map(|raw| CStr::from_ptr(raw.as_ptr()).to_string_lossy().trim().to_string())
            .unwrap_or_default();
        match compiled {
            Err(e) => Err(fail(format!("{e:?} for {arch}\n{log}"))),
            Ok(()) => {
                cubin(program).map(|image| Cubin { source: name, image, log }).map_err(|e| fail(format!("{e:?}")))
            }
        }
    };
    // SAFETY: as above; the program is not used after this.
    let _ = unsafe { nvrtc::destroy_program(program) };
    result
}

/// The CUBIN of a compiled program.
///
/// # Safety
/// `program` must be a live, successfully compiled NVRTC program.
unsafe fn cubin(program: nvrtc_sys::nvrtcProgram) -> Result<Vec<u8>, nvrtc::NvrtcError> {
    let mut size = 0usize;
    nvrtc_sys::nvrtcGetCUBINSize(program, &mut size).result()?;
    let mut image = vec![0u8; size];
    nvrtc_sys::nvrtcGetCUBIN(program, image.as_mut_ptr().cast()).result()?;
    Ok(image)
}

/// NVRTC's version, `(major, minor)`.
pub fn nvrtc_version() -> Result<(i32, i32), CudaError> {
    let (mut major, mut minor) = (0, 0);
    // SAFETY: plain out-parameters.
    unsafe { nvrtc_sys::nvrtcVersion(&mut major, &mut minor) }
        .result()
        .map_err(|e| CudaError::Library(format!("nvrtcVersion: {e:?}")))?;
    Ok((major, minor))
}

/// The compute capabilities NVRTC can compile for, as `major * 10 + minor`.
pub fn nvrtc_architectures() -> Result<Vec<i32>, CudaError> {
    let mut count = 0;
    // SAFETY: plain out-parameters; the buffer holds `count` entries.
    unsafe {
        nvrtc_sys::nvrtcGetNumSupportedArchs(&mut count)
            .result()
            .map_err(|e| CudaError::Library(format!("nvrtcGetNumSupportedArchs: {e:?}")))?;
        let mut archs = vec![0; usize::try_from(count).unwrap_or(0)];
        nvrtc_sys::nvrtcGetSupportedArchs(archs.as_mut_ptr())
            .result()
            .map_err(|e| CudaError::Library(format!("nvrtcGetSupportedArchs: {e:?}")))?;
        Ok(archs)
    }
}

/// Checks that this NVRTC can make machine code for a GPU of compute capability
/// `major.minor` that a driver of CUDA version `driver` (e.g. 13000) loads: the GPU's
/// architecture must be among NVRTC's, and NVRTC's major version not above the driver's.
pub fn check_toolchain(major: i32, minor: i32, driver: i32) -> Result<(), CudaError> {
    let (nv_major, nv_minor) = nvrtc_version()?;
    let (drv_major, drv_minor) = (driver / 1000, driver % 1000 / 10);
    if nv_major > drv_major {
        return Err(CudaError::Library(format!(
            "NVRTC {nv_major}.{nv_minor} is newer than the driver (CUDA {drv_major}.{drv_minor}): \
             its machine code may not load; use an NVRTC {drv_major}.x (e.g. pip's nvidia-cuda-nvrtc) \
             through LMS_CUDA_LIB_DIR"
        )));
    }
    let archs = nvrtc_architectures()?;
    if !archs.contains(&(major * 10 + minor)) {
        return Err(CudaError::Library(format!(
            "NVRTC {nv_major}.{nv_minor} cannot compile for this GPU (sm_{major}{minor}); it supports {}",
            archs.iter().map(|a| format!("sm_{a}")).collect::<Vec<_>>().join(", ")
        )));
    }
    Ok(())
}

/// The kernel modules loaded in one context, with their functions looked up on demand.
pub struct Kernels {
    /// Module per kernel function name.
    owners: BTreeMap<String, Arc<CudaModule>>,
    functions: RefCell<HashMap<&'static str, CudaFunction>>,
}

impl Kernels {
    /// Compiles (once per process) and loads every source into `ctx`.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Kernels, CudaError> {
        let (major, minor) = ctx.compute_capability()?;
        let compiled = compile_all(&architecture(major, minor))?;
        let mut owners = BTreeMap::new();
        for (cubin, &(_, code)) in compiled.iter().zip(SOURCES) {
            let module = ctx.load_module(Ptx::from_binary(cubin.image.clone()))?;
            for name in kernel_names(code) {
                owners.insert(name, Arc::clone(&module));
            }
        }
        Ok(Kernels { owners, functions: RefCell::new(HashMap::new()) })
    }

    /// The kernel function `name`.
    pub fn function(&self, name: &'static str) -> Result<CudaFunction, CudaError> {
        if let Some(f) = self.functions.borrow().get(name) {
            return Ok(f.clone());
        }
        let module = self.owners.get(name).ok_or_else(|| CudaError::MissingFunction(name.to_string()))?;
        let function = module.load_function(name)?;
        self.functions.borrow_mut().insert(name, function.clone());
        Ok(function)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_source_defines_kernels_and_names_are_unique() {
        let mut all = Vec::new();
        for &(file, code) in SOURCES {
            let names = kernel_names(code);
            assert!(!names.is_empty(), "{file} defines no kernel");
            all.extend(names);
        }
        let count = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), count, "a kernel name is defined twice");
        for name in ["binary_f32", "copy_4", "where_8", "gather_grad_f32", "dropout_f32", "pad_2"] {
            assert!(all.iter().any(|n| n == name), "{name} not found in {all:?}");
        }
    }

    #[test]
    fn every_kernel_has_a_parsed_signature() {
        use Param::*;
        let all = signatures();
        for &(file, code) in SOURCES {
            for name in kernel_names(code) {
                assert!(all.contains_key(&name), "{file}: no signature for {name}");
            }
        }
        assert_eq!(all["binary_i64"], [I32, Struct, Ptr, Ptr, Ptr, Ptr]);
        assert_eq!(all["gather_8"], [I64, I64, I64, I64, Ptr, I32, Ptr, Ptr]);
        assert_eq!(all["unary_f32"], [I32, I64, Ptr, Ptr, F32, F32]);
        assert_eq!(all["dropout_f32"], [I64, Struct, F64, F64, Ptr, Ptr, Ptr]);
        assert_eq!(all["pad_2"], [Struct, Ptr, Ptr, U64]);
    }

    #[test]
    fn kernel_names_reads_plain_and_macro_kernels() {
        let code = "extern \"C\" __global__ void plain(int n) {}\n\
                    #define TWICE(NAME, T) \\\n    extern \"C\" __global__ void NAME(T x) {}\n\
                    TWICE(twice_f32, float)\nTWICE(twice_i64, long long)\n\
                    #define HELPER(x) ((x) + 1)\n";
        assert_eq!(kernel_names(code), ["plain", "twice_f32", "twice_i64"]);
    }

    /// Set in the child process that [`every_source_compiles_to_cubin_for_sm_80_and_sm_90_without_warnings`]
    /// runs in.
    const NVRTC_CHILD_VAR: &str = "LMS_NVRTC_TEST_CHILD";

    /// Compiles every source to a CUBIN for sm_80 and sm_90 with the runtime's own options
    /// (no GPU needed). NVRTC comes from `fixtures/.cuda` (installed by
    /// `fixtures/fetch-onnx-testdata.sh`) or the backend's usual search; without it the
    /// test fails unless `LMS_SKIP_NVRTC_TEST` is set. It runs in a child process of its
    /// own, without `LMS_CUDA_EMULATOR`: CUDA's NVRTC is loaded with its symbols global and
    /// its CUBINs cached per process, so in the process of the other tests it would take
    /// the place of the emulated device's (which then refused the images they loaded).
    #[test]
    fn every_source_compiles_to_cubin_for_sm_80_and_sm_90_without_warnings() {
        use super::super::loader::{self, CudaLibrary};
        if std::env::var_os("LMS_SKIP_NVRTC_TEST").is_some() {
            eprintln!("skipped: LMS_SKIP_NVRTC_TEST is set");
            return;
        }
        if std::env::var_os(NVRTC_CHILD_VAR).is_none() {
            let module = module_path!().split_once("::").map_or(module_path!(), |(_, rest)| rest);
            let name = format!("{module}::every_source_compiles_to_cubin_for_sm_80_and_sm_90_without_warnings");
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args(["--exact", &name, "--test-threads", "1"])
                .env(NVRTC_CHILD_VAR, "1")
                .env_remove(loader::EMULATOR_VAR)
                .output()
                .unwrap();
            let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success() && text.contains("1 passed"), "in its own process:\n{text}");
            return;
        }
        let project = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/.cuda");
        let mut places = loader::with_wheel_folders("fixtures/.cuda", &project);
        places.extend(loader::places().iter().cloned());
        if let Err(missing) = loader::load_from(CudaLibrary::Nvrtc, &places) {
            panic!(
                "{}\nrun `bash fixtures/fetch-onnx-testdata.sh` (it installs NVRTC into fixtures/.cuda), \
                 or set LMS_SKIP_NVRTC_TEST=1 to skip this test",
                loader::listing(&[Err(missing)])
            );
        }
        for arch in ["sm_80", "sm_90"] {
            let compiled = compile_all(arch).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(compiled.len(), SOURCES.len());
            for (cubin, &(file, code)) in compiled.iter().zip(SOURCES) {
                assert_eq!(cubin.source, file);
                assert!(cubin.log.is_empty(), "{file} for {arch}: NVRTC warned:\n{}", cubin.log);
                assert!(cubin.image.starts_with(b"\x7fELF"), "{file} for {arch}: not an ELF image");
                for name in kernel_names(code) {
                    let symbol = format!("\0{name}\0").into_bytes();
                    assert!(
                        cubin.image.windows(symbol.len()).any(|w| w == symbol),
                        "{file} for {arch}: {name} missing from the CUBIN"
                    );
                }
            }
        }
    }

    #[test]
    fn the_target_is_the_devices_own_machine_code() {
        assert_eq!(architecture(9, 0), "sm_90");
        assert_eq!(architecture(8, 6), "sm_86");
        assert_eq!(compile_options("sm_90"), ["--std=c++17", "--gpu-architecture=sm_90"]);
    }
}
