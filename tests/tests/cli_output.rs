//! What the commands print: `compile --quiet` prints nothing on success but
//! still warns on stderr; progress bars and spinners of long work (compile,
//! run, max-batch, verify) are drawn on a terminal and never into a pipe.

use lms_tests::{lms, lms_bin, lms_ok, onnx_data, repo_root};
use std::path::PathBuf;
use std::process::Command;

fn scratch(name: &str) -> PathBuf {
    lms_tests::scratch_path("cli-output", name)
}

/// The bytes a progress bar or spinner draws with: carriage return and escape.
fn has_bar_bytes(bytes: &[u8]) -> bool {
    bytes.iter().any(|&b| b == b'\r' || b == 0x1b)
}

#[test]
fn quiet_compile_prints_only_its_warnings() {
    // VGG-19 never had normalisation: nothing to warn about.
    let model = onnx_data("light/light_vgg19.onnx");
    let out = scratch("vgg19.lms");
    let run = lms(&["compile", model.to_str().unwrap(), "--batch", "1", "--quiet", "-o", out.to_str().unwrap()]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(String::from_utf8(run.stdout).unwrap(), "", "--quiet prints nothing on success");
    assert_eq!(String::from_utf8(run.stderr).unwrap(), "", "no warning for a plain stack of convolutions");
    // A plan forced over its budget: the warning still goes to stderr.
    let forced = scratch("forced.lms");
    let args = ["--strategy", "tflms", "--budget", "1KiB", "--force", "--quiet", "-o", forced.to_str().unwrap()];
    let run = lms(&[&["compile", "fixtures/models/mlp.onnx", "--batch", "1"][..], &args].concat());
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(String::from_utf8(run.stdout).unwrap(), "", "--quiet prints nothing on success");
    let stderr = String::from_utf8(run.stderr).unwrap();
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{stderr}");
    assert!(lines[0].starts_with("lms: warning: --force: wrote a plan over its budget"), "{stderr}");
}

#[test]
fn long_work_draws_nothing_into_a_pipe() {
    let (plain, swapped) = (scratch("gpt.lms"), scratch("gpt-tflms.lms"));
    let gpt = ["fixtures/models/tiny_gpt.onnx", "--batch", "32", "-o"];
    let runs: Vec<Vec<&str>> = vec![
        [&["compile"], &gpt[..], &[plain.to_str().unwrap()]].concat(),
        [&["compile"], &gpt[..], &[swapped.to_str().unwrap(), "--strategy", "tflms"]].concat(),
        vec!["run", plain.to_str().unwrap(), "--steps", "3"],
        vec!["verify", plain.to_str().unwrap(), swapped.to_str().unwrap()],
        vec!["max-batch", "fixtures/models/tiny_gpt.onnx", "--budget", "2200KiB", "--limit", "64"],
    ];
    for args in runs {
        let out = lms(&args);
        assert!(out.status.success(), "lms {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert!(!out.stdout.is_empty(), "lms {args:?} reports on stdout");
        assert_eq!(String::from_utf8_lossy(&out.stderr), "", "lms {args:?} wrote to a piped stderr");
        assert!(!has_bar_bytes(&out.stdout), "lms {args:?} drew into a piped stdout");
    }
}

/// `script` (util-linux) runs `lms run` on a pseudo-terminal: the bar is drawn
/// there, then cleared.
#[test]
fn run_draws_a_progress_bar_on_a_terminal() {
    let graph = scratch("bar.lms");
    lms_ok(&["compile", "fixtures/models/tiny_gpt.onnx", "--batch", "32", "--quiet", "-o", graph.to_str().unwrap()]);
    // Outputs go to the test's scratch folder: lms's stdout, and the session `script` records.
    let (stdout, typescript) = (scratch("bar-stdout.txt"), scratch("bar-typescript.txt"));
    let command = format!("'{}' run '{}' --steps 20 > '{}'", lms_bin().display(), graph.display(), stdout.display());
    let out = Command::new("script")
        .args(["-qec", &command, typescript.to_str().unwrap()])
        .current_dir(repo_root())
        .output()
        .unwrap_or_else(|e| panic!("cannot run `script` (util-linux) to get a terminal: {e}"));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let terminal = String::from_utf8_lossy(&out.stdout);
    assert!(terminal.contains("/20 steps, loss"), "no progress bar on the terminal: {terminal:?}");
    assert!(has_bar_bytes(&out.stdout), "the bar is redrawn and cleared in place");
}
