//! The backend's CUDA C kernels: the `.cu` sources of `runtime/kernels/`, embedded in the
//! binary, compiled by NVRTC once per process and GPU architecture, and loaded as modules.

use super::error::CudaError;
use cudarc::driver::{CudaContext, CudaFunction, CudaModule};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
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

/// The names of the `extern "C" __global__` functions a source defines, directly or
/// through its one-line macros (`NAME(kernel_name, ...)` after a `#define NAME`).
pub fn kernel_names(code: &str) -> Vec<String> {
    let lines: Vec<&str> = code.lines().map(str::trim).collect();
    let mut names = Vec::new();
    let mut macros: Vec<&str> = Vec::new();
    // Whether the current line belongs to a macro definition.
    let mut in_macro = false;
    for (i, line) in lines.iter().enumerate() {
        let continued = in_macro;
        in_macro = line.ends_with('\\') && (continued || line.starts_with("#define "));
        if let Some(rest) = line.strip_prefix("#define ") {
            let body = if line.ends_with('\\') { lines.get(i + 1).copied().unwrap_or_default() } else { rest };
            if body.contains("__global__") {
                macros.extend(rest.split('(').next());
            }
            continue;
        }
        if continued {
            continue;
        }
        if let Some(rest) = line.split("__global__ void ").nth(1) {
            names.extend(rest.split('(').next().map(str::to_string));
        } else if let Some((name, args)) = line.split_once('(') {
            if macros.contains(&name) {
                names.extend(args.split([',', ')']).next().map(|n| n.trim().to_string()));
            }
        }
    }
    names
}

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

/// NVRTC's target for a device of compute capability `major.minor`, when known; PTX
/// for an older or unknown device is left to the driver's default.
fn architecture(major: i32, minor: i32) -> Option<&'static str> {
    Some(match (major, minor) {
        (7, 5) => "compute_75",
        (8, 0) => "compute_80",
        (8, 6) => "compute_86",
        (8, 9) => "compute_89",
        (9, 0) => "compute_90",
        (10, 0) => "compute_100",
        (12, 0) => "compute_120",
        _ => return None,
    })
}

/// PTX of every source for one architecture.
type Compiled = Vec<(&'static str, Ptx)>;

/// Compiled PTX per architecture, shared by every backend of the process.
fn cache() -> &'static Mutex<HashMap<Option<&'static str>, Arc<Compiled>>> {
    static CACHE: OnceLock<Mutex<HashMap<Option<&'static str>, Arc<Compiled>>>> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new(HashMap::new()))
}

/// Compiles every source for `arch` with NVRTC, or returns the process's earlier result.
pub fn compile_all(arch: Option<&'static str>) -> Result<Arc<Compiled>, CudaError> {
    let mut cache = cache().lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(compiled) = cache.get(&arch) {
        return Ok(Arc::clone(compiled));
    }
    let mut compiled = Vec::with_capacity(SOURCES.len());
    for &(name, code) in SOURCES {
        let options = CompileOptions {
            arch,
            name: Some(name.to_string()),
            options: vec!["--std=c++17".to_string()],
            ..CompileOptions::default()
        };
        let ptx = compile_ptx_with_opts(program_text(code), options)
            .map_err(|error| CudaError::Compile { source_name: name, error })?;
        compiled.push((name, ptx));
    }
    let compiled = Arc::new(compiled);
    cache.insert(arch, Arc::clone(&compiled));
    Ok(compiled)
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
        let compiled = compile_all(architecture(major, minor))?;
        let mut owners = BTreeMap::new();
        for ((_, ptx), &(_, code)) in compiled.iter().zip(SOURCES) {
            let module = ctx.load_module(ptx.clone())?;
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
        assert_eq!(all["binary_i64"], [I32, Struct, Ptr, Ptr, Ptr]);
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

    /// Compiles every source with NVRTC where libnvrtc can be loaded (no GPU needed);
    /// says so and returns where it cannot.
    #[test]
    fn sources_compile_with_nvrtc() {
        // SAFETY: only probes whether the shared library can be opened.
        if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
            eprintln!("skipped: libnvrtc could not be loaded (no CUDA toolkit on this machine)");
            return;
        }
        for arch in [None, Some("compute_90")] {
            let compiled = compile_all(arch).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(compiled.len(), SOURCES.len());
            for ((file, ptx), &(_, code)) in compiled.iter().zip(SOURCES) {
                let text = ptx.to_src();
                for name in kernel_names(code) {
                    assert!(text.contains(&format!(".entry {name}(")), "{file}: {name} missing from the PTX");
                }
            }
        }
    }
}
