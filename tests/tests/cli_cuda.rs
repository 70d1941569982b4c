//! `lms doctor` and `lms run --device cuda` from the command line. Where a CUDA driver
//! exists, both must succeed; where none does (CI), both must fail with one error line
//! naming the missing libraries, `doctor` listing every library and every place searched
//! on stdout, libcuda first — and NVRTC, installed in `fixtures/.cuda` by the fetch script,
//! is found there through `LMS_CUDA_LIB_DIR`.

use lms_runtime::backend::cuda::driver_missing;
use lms_tests::{fixture, gpu_available, lms_bin, repo_root};
use std::process::{Command, Output};

/// `lms ARGS` from the repository root with `LMS_CUDA_LIB_DIR` set to `lib_dir`.
fn lms_with_lib_dir(args: &[&str], lib_dir: &str) -> Output {
    Command::new(lms_bin())
        .args(args)
        .env("LMS_CUDA_LIB_DIR", lib_dir)
        .current_dir(repo_root())
        .output()
        .expect("run lms")
}

/// `fixtures/.cuda`, after checking that the fetch script installed NVRTC there.
fn project_cuda_dir() -> String {
    let dir = fixture(".cuda");
    assert!(
        dir.join("nvidia/cu13/lib/libnvrtc.so.13").is_file(),
        "{} holds no NVRTC: run `bash fixtures/fetch-onnx-testdata.sh` (the README's test command does)",
        dir.display()
    );
    dir.to_string_lossy().into_owned()
}

#[test]
fn doctor_reports_the_gpu_or_lists_everything_it_tried() {
    if gpu_available("lms doctor") {
        let out = lms_with_lib_dir(&["doctor"], "");
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{stdout}{stderr}");
        for fact in ["driver: CUDA ", "GPU 0: ", " GiB free of ", "libcublas", "libcudnn", "kernels: "] {
            assert!(stdout.contains(fact), "no '{fact}' in:\n{stdout}");
        }
        return;
    }
    let project = project_cuda_dir();
    let absent = "/nonexistent/lms-cuda-libs";
    let out = lms_with_lib_dir(&["doctor"], &format!("{absent}:{project}"));
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(stderr.starts_with("lms: error: the GPU cannot be used: cannot load libcuda"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one error line: {stderr}");
    assert!(stderr.contains("`lms doctor` lists them"), "{stderr}");
    // NVRTC is found in the project folder (its nvidia/*/lib), with its version.
    let nvrtc = format!("{project}/nvidia/cu13/lib/libnvrtc.so.13 (LMS_CUDA_LIB_DIR ");
    let nvrtc_line = stdout.lines().find(|l| l.starts_with("libnvrtc ")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(nvrtc_line.contains(" 13.0 ") && nvrtc_line.contains(&nvrtc), "{nvrtc_line}");
    // The listing: libcuda first, every place in order, the variable's folders first.
    let listing = &stdout[stdout.find("cannot load ").unwrap_or_else(|| panic!("{stdout}"))..];
    assert!(listing.starts_with("cannot load libcuda"), "{listing}");
    let libcuda = listing.find("\n  libcuda (libcuda.so.1, libcuda.so): not found").expect("libcuda listed");
    let libnvrtc = listing.find(&format!("\n  libnvrtc: found {project}")).expect("libnvrtc listed as found");
    assert!(libcuda < libnvrtc, "{listing}");
    let places = [
        format!("LMS_CUDA_LIB_DIR {absent}: no such folder"),
        format!("LMS_CUDA_LIB_DIR {project}: no libcuda.so.1 or libcuda.so"),
        "the dynamic loader's default: ".to_string(),
        "CUDA toolkit /usr/local/cuda/lib64: ".to_string(),
    ];
    let mut at = 0;
    for place in &places {
        let found =
            listing[at..].find(place.as_str()).unwrap_or_else(|| panic!("no '{place}' after {at} in:\n{listing}"));
        at += found + place.len();
    }
    assert!(listing.contains("set LMS_CUDA_LIB_DIR to the folders holding them"), "{listing}");
}

#[test]
fn run_on_cuda_trains_or_fails_with_one_line_naming_the_missing_libraries() {
    let graph = std::env::temp_dir().join(format!("lms-cli-cuda-{}.lms", std::process::id()));
    let out =
        lms_with_lib_dir(&["compile", "fixtures/models/mlp.onnx", "--batch", "4", "-o", graph.to_str().unwrap()], "");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = lms_with_lib_dir(&["run", graph.to_str().unwrap(), "--device", "cuda", "--steps", "1"], "");
    let stderr = String::from_utf8_lossy(&out.stderr);
    if gpu_available("lms run --device cuda") {
        assert!(out.status.success(), "{stderr}");
    } else {
        let reason = driver_missing().expect("no driver");
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("cannot load libcuda"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "one error line: {stderr}");
        assert!(stderr.contains(&reason), "{stderr}\nvs\n{reason}");
    }
    let _ = std::fs::remove_file(graph);
}
