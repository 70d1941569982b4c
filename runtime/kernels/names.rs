//! Which kernels a `.cu` source defines, read from its text: shared by the CUDA backend
//! (`backend/cuda/kernels.rs`) and the emulated device's build script, which include this
//! file, so both see the same kernels.

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
