//! Tests stay in their sandbox: no test, bench or fuzz harness names a path under the
//! machine's device, process or kernel folders as an output, and the device files are
//! intact after the suite.
//!
//! Named to sort last: cargo runs a package's test binaries in order (unit tests, then
//! integration tests by name), and this package is the last of the workspace, so
//! [`devices_are_intact_after_the_suite`] checks after every other test binary ran; the
//! unit tests of `tests/src/lib.rs` check before them, and `fuzz_bounded` around its run.

use lms_tests::fuzz::surface::{CLI_SEEDS, CLI_VOCABULARY, LAYOUT_LINES};
use lms_tests::repo_root;
use std::path::{Path, PathBuf};

/// The machine's folders no test may name: written here, a test damages the machine.
const SYSTEM_ROOTS: [&str; 3] = ["dev", "proc", "sys"];

/// Read-only uses of system paths in the tests, each (file, a fragment of its line) and why
/// it cannot harm: nothing here is ever written to.
const ALLOWED: &[(&str, &str, &str)] = &[
    // A real device as an *input* that lms must refuse without reading: `inspect` has no
    // output file. No FIFO stands in for a character device (mknod needs root).
    ("tests/tests/hardening.rs", r#"fails(&lms(&["inspect", ""#, "inspect refuses a device, reading nothing"),
    // The devices whose metadata the suite checks (symlink_metadata: never opened).
    ("tests/src/lib.rs", "(1, 3)), (", "the devices checked before and after the suite"),
    // The bounded reader refusing a device, in its unit test: it only opens for reading.
    ("proto/src/input.rs", "read_regular(Path::new(", "the bounded reader refuses a device"),
];

/// `/dev/`, `/proc/` and `/sys/` as they start a path.
fn system_prefixes() -> Vec<String> {
    SYSTEM_ROOTS.iter().map(|r| format!("/{r}/")).collect()
}

/// Whether `text` names a path under a system folder: a prefix starting the text or after a
/// character that cannot be part of a path (so `target/dev/x` does not count).
fn names_system_path(text: &str) -> bool {
    system_prefixes().iter().any(|prefix| {
        text.match_indices(prefix.as_str()).any(|(at, _)| {
            let before = text[..at].chars().next_back();
            !before.is_some_and(|c| c.is_alphanumeric() || "_-./$".contains(c))
        })
    })
}

#[test]
fn fuzz_vocabularies_name_only_scratch_paths() {
    let cli_words = CLI_VOCABULARY.iter().copied().chain(CLI_SEEDS.iter().flat_map(|s| s.split('\n')));
    for word in cli_words {
        assert!(!names_system_path(word), "the CLI fuzz vocabulary names a system path: {word:?}");
        assert!(!word.contains('/'), "a CLI fuzz word leaves the scratch folder: {word:?}");
    }
    for line in LAYOUT_LINES {
        assert!(!names_system_path(line), "a layout line names a system path: {line:?}");
        for word in line.split(' ') {
            let inside =
                !word.starts_with('/') && (!word.contains("..") || word.split('/').take(2).eq(["..", "outside"]));
            assert!(inside, "a layout word leaves the layout's scratch folder: {line:?}");
        }
    }
}

/// The Rust files of `dir` and its folders.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The test code of the workspace, as (file, text, first line to scan): integration tests,
/// the test and fuzz harness and benches whole, and the crates' sources from their first
/// `#[cfg(test)]` on (the unit-test modules).
fn test_sources() -> Vec<(PathBuf, String, usize)> {
    let root = repo_root();
    let mut sources = Vec::new();
    for (dirs, whole) in [
        (&["tests/tests", "tests/src", "runtime/tests", "compiler/benches"][..], true),
        (&["compiler/src", "runtime/src", "proto/src"][..], false),
    ] {
        let mut files = Vec::new();
        for dir in dirs {
            rust_files(&root.join(dir), &mut files);
        }
        for path in files {
            let text = std::fs::read_to_string(&path).expect("a source file");
            let first = if whole { Some(0) } else { text.lines().position(|l| l.trim() == "#[cfg(test)]") };
            if let Some(first) = first {
                sources.push((path, text, first));
            }
        }
    }
    sources
}

#[test]
fn no_test_names_a_system_path() {
    let root = repo_root();
    let this = Path::new(file!()).file_name().expect("this file's name");
    let sources = test_sources();
    assert!(sources.len() > 30, "the scan found only {} files under {}", sources.len(), root.display());
    let mut found = Vec::new();
    for (path, text, first) in &sources {
        let rel = path.strip_prefix(&root).unwrap_or(path).to_string_lossy().into_owned();
        if path.file_name() == Some(this) {
            continue;
        }
        for (n, line) in text.lines().enumerate().skip(*first) {
            let code = line.trim_start();
            if code.starts_with("//") || !names_system_path(code) {
                continue;
            }
            if !ALLOWED.iter().any(|(file, fragment, _)| rel == *file && code.contains(fragment)) {
                found.push(format!("{rel}:{}: {code}", n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "tests name system paths (use a FIFO or file in the test's scratch folder):\n{}",
        found.join("\n")
    );
}

#[cfg(target_os = "linux")]
#[test]
fn devices_are_intact_after_the_suite() {
    lms_tests::assert_devices_intact("after the test suite");
}
