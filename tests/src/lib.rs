//! Shared helpers for the workspace integration tests: where the fixtures
//! are, and how to run the `lms` binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tests/ has a parent").to_path_buf()
}

/// A file or folder under `fixtures/`.
pub fn fixture(rel: &str) -> PathBuf {
    repo_root().join("fixtures").join(rel)
}

/// The fetched ONNX test data (`fixtures/fetch-onnx-testdata.sh`). Panics with
/// the command to run when it is missing, so a test never passes vacuously.
pub fn onnx_data(rel: &str) -> PathBuf {
    let path = fixture("data/onnx").join(rel);
    assert!(
        path.exists(),
        "{} is missing: run `bash fixtures/fetch-onnx-testdata.sh` first (the README's test command does)",
        path.display()
    );
    path
}

/// Sorted entries of a folder matching a predicate.
pub fn list(dir: &Path, keep: impl Fn(&Path) -> bool) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .filter(|p| keep(p))
        .collect();
    entries.sort();
    entries
}

/// The `lms` binary built by this `cargo test` run (target/<profile>/lms).
pub fn lms_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let profile_dir = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>");
    let bin = profile_dir.join(format!("lms{}", std::env::consts::EXE_SUFFIX));
    assert!(bin.exists(), "{} is missing: run the tests with `cargo test --workspace`", bin.display());
    bin
}

/// Runs `lms` with arguments from the repository root.
pub fn lms(args: &[&str]) -> Output {
    Command::new(lms_bin()).args(args).current_dir(repo_root()).output().expect("run lms")
}
