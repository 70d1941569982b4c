//! The HTML report in a real browser: ResNet-50 (light) compiled with TFLMS
//! under 16 GiB at batch 256, loaded by headless Chromium (the Debian package
//! `chromium`, which `fixtures/fetch-onnx-testdata.sh` installs); the test
//! reads the DOM after the page's script ran. Without Chromium the test
//! fails, saying how to install it, unless `LMS_REQUIRE_BROWSER=0` lets it
//! skip.

use lms_tests::{lms, lms_ok, onnx_data};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn scratch(name: &str) -> PathBuf {
    lms_tests::scratch_path("html-report", name)
}

/// The Chromium binary on PATH; `None` (having said why) when it is missing
/// and `LMS_REQUIRE_BROWSER=0` allows skipping; panics when it is missing
/// otherwise.
fn chromium() -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .flat_map(|dir| ["chromium", "chromium-browser"].map(|name| dir.join(name)))
        .find(|candidate| candidate.is_file());
    if found.is_none() && std::env::var("LMS_REQUIRE_BROWSER").as_deref() == Ok("0") {
        eprintln!("skipping the browser test: no chromium on PATH and LMS_REQUIRE_BROWSER=0");
        return None;
    }
    Some(found.unwrap_or_else(|| {
        panic!(
            "no chromium on PATH: the HTML report is tested in headless Chromium; install it with \
             `bash fixtures/fetch-onnx-testdata.sh` (Debian package chromium), or set LMS_REQUIRE_BROWSER=0 to skip"
        )
    }))
}

/// The DOM of `page` after its scripts ran, as headless Chromium dumps it.
/// Each page gets its own profile folder: two browsers sharing one (tests run
/// in parallel) make the second exit with Chromium's "profile in use" code 21.
fn rendered_dom(browser: &Path, page: &Path) -> String {
    let stem = page.file_stem().unwrap().to_string_lossy();
    let profile = scratch(&format!("chromium-profile-{stem}"));
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.canonicalize().unwrap().display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {}: {e}", browser.display()));
    // Read the DOM while waiting, so a full pipe never blocks the browser.
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut dom = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut dom).map(|_| dom)
    });
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(120) {
            let _ = child.kill();
            panic!("{} did not finish rendering {} in 120 s", browser.display(), page.display());
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(status.success(), "{} --dump-dom failed: {status}", browser.display());
    reader.join().unwrap().unwrap()
}

#[test]
fn resnet50_tflms_report_renders_in_headless_chromium() {
    let Some(browser) = chromium() else { return };
    let model = onnx_data("light/light_resnet50.onnx");
    let (graph, page, json) = (scratch("resnet50.lms"), scratch("resnet50.html"), scratch("resnet50.json"));
    let model_arg = model.to_str().unwrap();
    let paths = [graph.to_str().unwrap(), page.to_str().unwrap(), json.to_str().unwrap()];
    let stdout = lms_ok(&[
        "compile",
        model_arg,
        "--batch",
        "256",
        "--strategy",
        "tflms",
        "--budget",
        "16GiB",
        "-o",
        paths[0],
        "--html",
        paths[1],
        "--report",
        paths[2],
        "--quiet",
    ]);
    assert_eq!(stdout, "", "--quiet prints nothing on success");
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let swapped = report["swapped_tensors"].as_u64().unwrap() as usize;
    assert!(swapped > 0, "TFLMS swaps under 16 GiB at batch 256");

    let dom = rendered_dom(&browser, &page);
    assert_eq!(dom.matches("<tr class=\"decision\"").count(), swapped, "the script drew one row per swap");
    let first = &report["swaps"][0]["tensor"].as_str().unwrap();
    assert!(dom.contains(&format!("title=\"{first}\"")), "a row's hover names its tensor {first}");
    for curve in [r#"data-series="before" data-pool="device""#, r#"data-series="after" data-pool="device""#] {
        assert!(dom.contains(curve), "no {curve} curve in the rendered page");
    }
    assert!(dom.contains(r#"data-series="after" data-pool="host""#), "swapped tensors live in host memory");
    assert!(dom.contains("<title>device budget 16.00 GiB</title>"));
    for lane in ["compute", "device-to-host", "host-to-device"] {
        assert_eq!(dom.matches(&format!("data-lane=\"{lane}\"")).count(), 2, "a {lane} lane per graph");
    }
    assert!(dom.contains("class=\"copy\""), "copies are drawn on their streams");
    assert!(dom.contains(&format!("{swapped} decisions: ")));
}

/// A plan that swaps, recomputes and splits (cnn_residual at 2 MiB): the page
/// has a row for the split, says why as `--verbose` does, accounts for the
/// step's whole growth, and draws host memory in its own panel.
#[test]
fn a_split_plan_explains_itself_in_headless_chromium() {
    let Some(browser) = chromium() else { return };
    let model = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/models/cnn_residual.onnx");
    let (graph, page) = (scratch("split.lms"), scratch("split.html"));
    let verbose = lms_ok(&[
        "compile",
        model.to_str().unwrap(),
        "--batch",
        "32",
        "--strategy",
        "auto",
        "--budget",
        "2MiB",
        "-o",
        graph.to_str().unwrap(),
        "--html",
        page.to_str().unwrap(),
        "--verbose",
    ]);
    let dom = rendered_dom(&browser, &page);
    assert_eq!(dom.matches("<tr class=\"decision\" data-kind=\"split\"").count(), 1, "one row for the split");
    assert!(dom.contains("tensors in up to "), "the summary says the batch was split");
    for kind in ["swap", "recompute"] {
        assert!(dom.contains(&format!("data-kind=\"{kind}\"")), "no {kind} rows");
    }
    // The why of each planner decision is the line --verbose prints.
    let why = verbose.lines().find(|l| l.contains("over budget at '")).expect("--verbose names the peak");
    let reason = why.split_once(": ").unwrap().1;
    assert!(dom.contains(&reason.replace('>', "&gt;")), "{reason} not in the page");
    assert!(dom.contains("id=\"time-accounting\"") && dom.contains("data-part=\"split\""));
    assert_eq!(dom.matches("class=\"frame\"").count(), 2, "device and host panels");
}

#[test]
fn simulate_writes_the_same_report_for_the_same_graphs() {
    let graph = scratch("gpt.lms");
    let before = scratch("gpt-none.lms");
    let common = ["fixtures/models/tiny_gpt.onnx", "--batch", "32", "--train", "adam", "--quiet", "-o"];
    lms_ok(&[&["compile"], &common[..], &[before.to_str().unwrap()]].concat());
    let tflms = ["--strategy", "tflms", "--budget", "2200KiB", "--host-budget", "1GiB"];
    lms_ok(&[&["compile"], &common[..], &[graph.to_str().unwrap()], &tflms[..]].concat());
    let pages = [scratch("a.html"), scratch("b.html")];
    for page in &pages {
        let args = ["simulate", graph.to_str().unwrap(), "--before", before.to_str().unwrap(), "--html"];
        lms_ok(&[&args[..], &[page.to_str().unwrap()]].concat());
    }
    let (a, b) = (std::fs::read(&pages[0]).unwrap(), std::fs::read(&pages[1]).unwrap());
    assert_eq!(a, b, "same graphs, same bytes");
    let a = String::from_utf8(a).unwrap();
    assert!(a.starts_with("<!DOCTYPE html>") && a.contains("<title>lms report: tiny_gpt (gpt.lms)</title>"));
    assert!(a.contains(r#"data-series="before""#) && a.contains(r#"data-series="after""#));
    let out = lms(&["simulate", graph.to_str().unwrap(), "--html", graph.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "--html over the input graph is refused");
}

#[test]
fn the_library_builder_writes_the_page_the_command_writes() {
    let (cli_page, lib_page) = (scratch("cli.html"), scratch("lib.html"));
    lms_ok(&[
        "compile",
        "fixtures/models/tiny_gpt.onnx",
        "--batch",
        "32",
        "--budget",
        "2200KiB",
        "--strategy",
        "tflms",
        "--quiet",
        "-o",
        scratch("cli.lms").to_str().unwrap(),
        "--html",
        cli_page.to_str().unwrap(),
    ]);
    let model = lms_tests::fixture("models/tiny_gpt.onnx");
    let report = lms_compiler::Compile::new(model)
        .batch(32)
        .tflms(Default::default())
        .budget("2200KiB")
        .html(&lib_page)
        .write(scratch("lib.lms"));
    assert!(report.unwrap().swapped_tensors > 0);
    let page = std::fs::read_to_string(&lib_page).unwrap();
    assert_eq!(page, std::fs::read_to_string(&cli_page).unwrap());
    assert!(page.contains("<title>lms report: tiny_gpt (tiny_gpt.onnx)</title>"));
    assert!(page.contains(r#"data-series="before""#) && page.contains("device budget 2.15 MiB"));
}
