//! Compiles every kernel source of the CUDA backend (`runtime/kernels/*.cu`, unchanged,
//! after `common.cuh`) and the emulator's own fault kernels as C++20 over the emulation
//! header, with a table of launchable entries per source and the device (`cpp/`).
//!
//! The same objects, with the emulated driver and its streams, NVRTC, cuBLAS and cuDNN
//! (`cpp/driver.cpp`, `streams.cpp`, `nvrtc.cpp`, `cublas.cpp`, `cudnn.cpp`), are linked into
//! `libcuda.so.1` in `$OUT_DIR/lib`, beside `libnvrtc.so.13`, `libcublas.so.13` and
//! `libcudnn.so.9`, which hold nothing but a dependency on it (so their symbols are found
//! through their handles); the crate's `LIBRARY_DIR` names the folder. Each library's soname
//! is the first name cudarc asks the dynamic loader for, so once the backend's loader has
//! opened them by path, cudarc gets these.
//!
//! `LMS_EMULATOR_SANITIZE=address` or `=thread` builds the C++ with that sanitizer.

use std::fmt::Write;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR"));
    let kernels_dir = manifest.join("../kernels");
    let cpp = manifest.join("cpp");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    println!("cargo:rerun-if-changed={}", kernels_dir.display());
    println!("cargo:rerun-if-changed={}", cpp.display());
    println!("cargo:rerun-if-env-changed=LMS_EMULATOR_SANITIZE");

    let mut sources: Vec<PathBuf> = std::fs::read_dir(&kernels_dir)
        .expect("runtime/kernels")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "cu"))
        .collect();
    sources.sort();
    sources.push(cpp.join("faults.cu"));

    let mut build = cc::Build::new();
    build
        .cpp(true)
        .pic(true)
        .std("c++20")
        .opt_level(2)
        .include(&cpp)
        .flag("-ffp-contract=off")
        .flag("-fno-strict-aliasing");
    build.flag_if_supported("-Wno-unknown-pragmas").flag_if_supported("-Wno-unused-parameter");
    build.flag("-U_FORTIFY_SOURCE");
    if let Ok(sanitizer) = std::env::var("LMS_EMULATOR_SANITIZE") {
        if !sanitizer.is_empty() {
            build.flag(format!("-fsanitize={sanitizer}")).flag("-fno-omit-frame-pointer").opt_level(1);
            let runtime = if sanitizer == "thread" { "tsan" } else { "asan" };
            println!("cargo:rustc-link-lib=dylib={runtime}");
        }
    }
    let driver_build = build.clone();
    build.file(cpp.join("device.cpp"));

    let mut registry = String::from("#include \"kernel_table.h\"\n");
    let mut tables = Vec::new();
    for source in &sources {
        let file = source.file_name().and_then(|f| f.to_str()).expect("source name").to_string();
        let code = std::fs::read_to_string(source).expect("kernel source");
        let stem = file.trim_end_matches(".cu").replace(['-', '.'], "_");
        let table = format!("lms_emu_table_{stem}");
        let mut unit = String::new();
        writeln!(unit, "#include \"cuda_emulation.h\"").unwrap();
        writeln!(unit, "#include \"kernel_table.h\"").unwrap();
        // Each source in a namespace of its own: the common header's device functions are
        // defined once per source, as NVRTC compiles each source apart.
        writeln!(unit, "namespace lms_kernels_{stem} {{").unwrap();
        writeln!(unit, "#include \"{}\"", kernels_dir.join("common.cuh").display()).unwrap();
        writeln!(unit, "#include \"{}\"", source.display()).unwrap();
        writeln!(unit, "}}\nusing namespace lms_kernels_{stem};").unwrap();
        writeln!(unit, "extern const lms_emu::KernelEntry {table}[] = {{").unwrap();
        for name in kernel_names(&code) {
            writeln!(unit, "    LMS_EMU_ENTRY({name}, \"{file}\"),").unwrap();
        }
        writeln!(unit, "    {{nullptr, nullptr, nullptr, nullptr, nullptr}},\n}};").unwrap();
        let path = out.join(format!("{stem}.cpp"));
        write_if_changed(&path, &unit);
        build.file(&path);
        writeln!(registry, "extern const lms_emu::KernelEntry {table}[];").unwrap();
        tables.push(table);
    }
    writeln!(
        registry,
        "const lms_emu::KernelEntry* const* lms_emu_sources(size_t* count) {{\n    \
         static const lms_emu::KernelEntry* const all[] = {{{}}};\n    \
         *count = sizeof all / sizeof all[0];\n    return all;\n}}",
        tables.join(", ")
    )
    .unwrap();
    let path = out.join("registry.cpp");
    write_if_changed(&path, &registry);
    build.file(&path);

    // The driver, NVRTC, cuBLAS and cuDNN.
    let common = std::fs::read_to_string(kernels_dir.join("common.cuh")).expect("common.cuh");
    let mut table = String::from("#include \"emulated_sources.h\"\nstatic const LmsEmulatedSource all[] = {\n");
    for source in sources.iter().filter(|s| s.starts_with(&kernels_dir)) {
        let file = source.file_name().and_then(|f| f.to_str()).expect("source name");
        let code = std::fs::read_to_string(source).expect("kernel source");
        // The text the backend hands NVRTC: the common header, a newline, the source.
        writeln!(table, "    {{\"{file}\", 0x{:016x}ull}},", fnv1a(format!("{common}\n{code}").as_bytes())).unwrap();
    }
    table.push_str(
        "};\nconst LmsEmulatedSource* lms_emulated_sources(size_t* count) {\n    \
         *count = sizeof all / sizeof all[0];\n    return all;\n}\n",
    );
    let path = out.join("emulated_sources.cpp");
    write_if_changed(&path, &table);
    // Linked into the crate too, so its tests call the driver and NVRTC directly.
    let mut driver = driver_build;
    for file in ["driver.cpp", "streams.cpp", "nvrtc.cpp", "cublas.cpp", "cudnn.cpp"] {
        driver.file(cpp.join(file));
    }
    // Named to the linker before the archive it calls into.
    driver.file(&path).compile("lms_cuda_driver");
    build.compile("lms_cuda_emulator");

    let lib = out.join("lib");
    std::fs::create_dir_all(&lib).expect("lib folder");
    let compiler = build.get_compiler();
    let link = |args: &[&std::ffi::OsStr]| {
        let mut command = compiler.to_command();
        command.args(args);
        let status = command.status().expect("the C++ compiler runs");
        assert!(status.success(), "linking the emulated CUDA libraries failed: {command:?}");
    };
    let driver_so = lib.join("libcuda.so.1");
    // Only the libraries' API is exported (not the kernels or the device's internals).
    let exports = out.join("exports.map");
    write_if_changed(&exports, "{\n  global: cu*; nvrtc*; cublas*; cudnn*;\n  local: *;\n};\n");
    let version_script = format!("-Wl,--version-script={}", exports.display());
    link(&[
        version_script.as_ref(),
        "-shared".as_ref(),
        "-o".as_ref(),
        driver_so.as_os_str(),
        "-Wl,-soname,libcuda.so".as_ref(),
        "-Wl,--whole-archive".as_ref(),
        out.join("liblms_cuda_driver.a").as_os_str(),
        out.join("liblms_cuda_emulator.a").as_os_str(),
        "-Wl,--no-whole-archive".as_ref(),
        "-lpthread".as_ref(),
    ]);
    let empty = out.join("empty.c");
    write_if_changed(&empty, "/* a library that only depends on libcuda.so */\n");
    for (file, soname) in
        [("libnvrtc.so.13", "libnvrtc.so"), ("libcublas.so.13", "libcublas.so"), ("libcudnn.so.9", "libcudnn.so")]
    {
        link(&[
            "-shared".as_ref(),
            "-x".as_ref(),
            "c".as_ref(),
            empty.as_os_str(),
            "-x".as_ref(),
            "none".as_ref(),
            "-o".as_ref(),
            lib.join(file).as_os_str(),
            format!("-Wl,-soname,{soname}").as_ref(),
            "-Wl,--no-as-needed".as_ref(),
            driver_so.as_os_str(),
        ]);
    }
    println!("cargo:rustc-env=LMS_CUDA_EMULATOR_LIBRARY_DIR={}", lib.display());
}

/// FNV-1a, as `lms_emulated_hash` in `cpp/emulated_sources.h`.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100000001b3))
}

fn write_if_changed(path: &Path, text: &str) {
    if std::fs::read_to_string(path).ok().as_deref() != Some(text) {
        std::fs::write(path, text).expect("generated source");
    }
}

// The names of a source's kernels, read as the backend reads them.
#[path = "../kernels/names.rs"]
mod names;
use names::kernel_names;
