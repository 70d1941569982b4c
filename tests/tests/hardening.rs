//! Hostile and careless use of the `lms` command: each case is one
//! observation that used to succeed silently, clobber a file or hang, and
//! now ends with the documented exit status (2 usage or bad input, 3 does
//! not fit, 4 not proven, 130 stopped by SIGINT), one line on stderr,
//! nothing overwritten and no stray file.

use lms_proto::lms as pb;
use lms_proto::Message;
use lms_tests::{fixture, lms, lms_bin, onnx_data, repo_root};
use std::io::{BufRead, BufReader, Read};
#[cfg(unix)]
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
#[cfg(unix)]
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// A fresh scratch folder for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lms-hardening-{}", std::process::id())).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The sorted names in a folder.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

/// Asserts `lms` failed with `code` and one line on stderr containing
/// `needle`, and returns that line.
fn fails(out: &Output, code: i32, needle: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "stderr: {stderr}");
    assert_eq!(stderr.trim_end().lines().count(), 1, "not one line: {stderr}");
    assert!(stderr.starts_with("lms: error: "), "{stderr}");
    assert!(stderr.contains(needle), "{needle:?} not in: {stderr}");
    stderr
}

/// `lms compile` of the tiny GPT fixture (batch 2) into `dir`, with extra
/// flags; returns the output path.
fn compile(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let model = fixture("models/tiny_gpt.onnx");
    let mut args = vec!["compile", s(&model), "--batch", "2", "-o", s(&out)];
    args.extend(flags);
    let run = lms(&args);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    out
}

/// The original and the TFLMS-rewritten tiny GPT, then `lms verify` of the
/// original against the rewritten graph after `tamper`.
fn verify_tampered(dir: &Path, tamper: impl FnOnce(&mut pb::Graph)) -> Output {
    let original = compile(dir, "original.lms", &[]);
    let rewritten = compile(dir, "rewritten.lms", &["--strategy", "tflms"]);
    let ok = lms(&["verify", s(&original), s(&rewritten)]);
    assert!(ok.status.success(), "untampered: {}", String::from_utf8_lossy(&ok.stderr));
    let mut graph = pb::Graph::decode(&*std::fs::read(&rewritten).unwrap()).unwrap();
    tamper(&mut graph);
    let tampered = dir.join("tampered.lms");
    std::fs::write(&tampered, graph.encode_to_vec()).unwrap();
    lms(&["verify", s(&original), s(&tampered)])
}

fn tensor<'a>(g: &'a mut pb::Graph, name: &str) -> &'a mut pb::Tensor {
    g.tensors.iter_mut().find(|t| t.name == name).unwrap()
}

#[test]
fn verify_rejects_a_zeroed_weight_naming_it() {
    let out = verify_tampered(&scratch("zeroed"), |g| tensor(g, "attn.qkv.weight").data.fill(0));
    fails(&out, 4, "the initial value of variable 'attn.qkv.weight' differs from the original's (content hash ");
}

#[test]
fn verify_rejects_one_flipped_bit_in_a_constant_naming_it() {
    let out = verify_tampered(&scratch("flipped"), |g| {
        let node = g.nodes.iter_mut().find(|n| n.name == "attn.scale").unwrap();
        let Some(pb::attribute::Value::Tensor(t)) = &mut node.attributes[0].value else { panic!("a tensor attribute") };
        t.data[0] ^= 1;
    });
    fails(&out, 4, "constant 'attn.scale' differs from the original's");
}

#[test]
fn verify_rejects_a_swapped_pair_of_same_shaped_weights() {
    let out = verify_tampered(&scratch("swapped"), |g| {
        let (a, b) = ("attn.proj.bias", "mlp.proj.bias");
        let shape = tensor(g, a).shape.clone();
        assert_eq!(shape, tensor(g, b).shape);
        let (x, y) = (tensor(g, a).data.clone(), tensor(g, b).data.clone());
        assert_ne!(x, y, "the pair must differ for the swap to matter");
        tensor(g, a).data = y;
        tensor(g, b).data = x;
    });
    fails(&out, 4, "the initial value of variable 'attn.proj.bias' differs");
}

#[cfg(unix)]
#[test]
fn planted_links_are_never_followed_and_outputs_never_become_links() {
    let dir = scratch("links");
    let victim = dir.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    // The old fixed temporary name, planted as a link to the victim; and the
    // output itself a link to the victim.
    std::os::unix::fs::symlink(&victim, dir.join("out.lms.tmp")).unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("text.txt")).unwrap();
    let out = compile(&dir, "out.lms", &["--text", s(&dir.join("text.txt"))]);
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    for written in [out, dir.join("text.txt")] {
        assert!(std::fs::symlink_metadata(&written).unwrap().file_type().is_file(), "{}", written.display());
    }
    assert_eq!(entries(&dir), ["out.lms", "out.lms.tmp", "text.txt", "victim"]);
}

#[test]
fn a_failed_write_says_cannot_write_and_leaves_no_temporary() {
    let dir = scratch("write-failure");
    std::fs::create_dir_all(dir.join("taken").join("inside")).unwrap();
    let model = fixture("models/mlp.onnx");
    let out = lms(&["compile", s(&model), "--batch", "1", "-o", s(&dir.join("taken"))]);
    fails(&out, 2, "taken: cannot write: ");
    assert_eq!(entries(&dir), ["taken"]);
}

#[test]
fn an_output_naming_an_input_or_another_output_is_refused() {
    let dir = scratch("clobber");
    let model = dir.join("m.onnx");
    std::fs::copy(fixture("models/mlp.onnx"), &model).unwrap();
    let before = std::fs::read(&model).unwrap();
    let same = dir.join(".").join("m.onnx");
    fails(
        &lms(&["compile", s(&model), "--batch", "1", "-o", s(&same)]),
        2,
        "is the model: lms never overwrites an input",
    );
    assert_eq!(std::fs::read(&model).unwrap(), before);
    let x = dir.join("x");
    let out = lms(&["compile", s(&model), "--batch", "1", "-o", s(&x), "--text", s(&x), "--report", s(&x)]);
    fails(&out, 2, "--text ");
    assert_eq!(entries(&dir), ["m.onnx"]);
}

#[cfg(unix)]
#[test]
fn external_data_through_a_link_out_of_the_model_folder_is_refused() {
    let dir = scratch("external-link");
    let outside = scratch("external-link-outside");
    let mut model = lms_compiler::frontend::read_model(&fixture("models/mlp.onnx")).unwrap();
    let init = model.graph.as_mut().unwrap().initializer.iter_mut().find(|t| t.name == "fc1.weight").unwrap();
    let data = lms_compiler::frontend::tensor::decode(init, None).unwrap();
    std::fs::write(outside.join("secret.bin"), &*data.bytes).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.bin"), dir.join("weights.bin")).unwrap();
    init.raw_data.clear();
    init.float_data.clear();
    init.data_location = 1;
    init.external_data =
        vec![lms_proto::onnx::StringStringEntryProto { key: "location".into(), value: "weights.bin".into() }];
    let path = dir.join("m.onnx");
    std::fs::write(&path, model.encode_to_vec()).unwrap();
    let out = lms(&["compile", s(&path), "--batch", "1", "-o", s(&dir.join("m.lms"))]);
    fails(&out, 2, "external data location 'weights.bin' must stay inside the model's folder");
    assert_eq!(entries(&dir), ["m.onnx", "weights.bin"]);
}

#[cfg(unix)]
#[test]
fn devices_and_fifos_are_refused_without_reading() {
    fails(&lms(&["inspect", "/dev/zero"]), 2, "/dev/zero: is not a regular file");
    let dir = scratch("fifo");
    let fifo = dir.join("model.onnx");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    // Opening a FIFO for reading would wait for a writer forever.
    fails(&lms(&["inspect", s(&fifo)]), 2, "model.onnx: is not a regular file");
    fails(&lms(&["verify", s(&fifo), s(&fifo)]), 2, "is not a regular file");
}

/// Runs `lms` with `args` (stdin closed), killing it and failing the test when
/// it has not ended within 60 seconds; with `address_space`, the child may map
/// at most that many bytes (`RLIMIT_AS`), so an allocation sized by a file
/// fails in it instead of taking the machine's memory.
#[cfg(unix)]
fn lms_bounded(args: &[&str], address_space: Option<u64>) -> Output {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new(lms_bin());
    command.args(args).stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(bytes) = address_space {
        let limit = libc::rlimit { rlim_cur: bytes, rlim_max: bytes };
        // SAFETY: setrlimit is async-signal-safe and touches only the child.
        unsafe {
            command.pre_exec(move || match libc::setrlimit(libc::RLIMIT_AS, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            });
        }
    }
    let mut child = command.spawn().unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(60) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("lms {args:?} did not end within 60 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// A FIFO (nobody writes it) and a 64 MiB zero-filled file in `dir`.
#[cfg(unix)]
fn fifo_and_zeros(dir: &Path) -> [PathBuf; 2] {
    let fifo = dir.join("fifo");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let zeros = dir.join("zeros");
    std::fs::File::create(&zeros).unwrap().set_len(64 << 20).unwrap();
    [fifo, zeros]
}

#[cfg(unix)]
#[test]
fn fifos_and_large_files_as_inputs_end_at_once() {
    let dir = scratch("bounded-inputs");
    let program = compile(&dir, "m.lms", &[]);
    let out = dir.join("out.onnx");
    for input in fifo_and_zeros(&dir) {
        let name = input.file_name().unwrap().to_str().unwrap();
        let cases: [&[&str]; 4] = [
            &["simulate", s(&program), "--device-profile", s(&input)],
            &["run", s(&program), "--device", "cpu", "--data", s(&input)],
            &["run", s(&program), "--device", "cpu", "--steps", "1", "--resume", s(&input)],
            &["run", s(&program), "--device", "cpu", "--steps", "1", "--save-onnx", s(&out), "--model", s(&input)],
        ];
        for args in cases {
            fails(&lms_bounded(args, None), 2, name);
        }
    }
    assert_eq!(entries(&dir), ["fifo", "m.lms", "zeros"]);
}

/// Writes a `.npz` at `path` holding one array `name`: a `.npy` header saying
/// `descr` and `shape`, then `values` zero bytes, deflated (a few MB on disk).
fn zip_bomb(path: &Path, name: &str, descr: &str, shape: &str, values: u64) {
    use std::io::Write;
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({shape}), }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut npy = b"\x93NUMPY\x01\x00".to_vec();
    npy.extend_from_slice(&(header.len() as u16).to_le_bytes());
    npy.extend_from_slice(header.as_bytes());
    let options = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .compression_level(Some(1))
        .large_file(values > u64::from(u32::MAX) / 2);
    let mut zip = zip::ZipWriter::new(std::fs::File::create(path).unwrap());
    zip.start_file(format!("{name}.npy"), options).unwrap();
    zip.write_all(&npy).unwrap();
    let chunk = vec![0u8; 1 << 20];
    let mut left = values;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        zip.write_all(&chunk[..n]).unwrap();
        left -= n as u64;
    }
    zip.finish().unwrap();
}

#[cfg(unix)]
#[test]
fn a_zip_bomb_is_refused_before_it_is_inflated() {
    let dir = scratch("zip-bomb");
    let program = compile(&dir, "m.lms", &[]);
    // 3 GiB of values behind a few MB of file, in a process that may map 2 GiB:
    // reading the member before checking it fails there.
    let inflated: u64 = 3 << 30;
    let rows = inflated / (16 * 4);
    let bomb = dir.join("bomb.npz");
    zip_bomb(&bomb, "tokens", "<f4", &format!("{rows}, 16"), rows * 16 * 4);
    assert!(std::fs::metadata(&bomb).unwrap().len() < 64 << 20);
    let limit = Some(2 << 30);
    let out = lms_bounded(&["run", s(&program), "--device", "cpu", "--data", s(&bomb)], limit);
    fails(&out, 2, "bomb.npz: array 'tokens' is f32 [50331648, 16], the graph's input 'tokens' wants i64");
    let out = lms_bounded(&["run", s(&program), "--device", "cpu", "--steps", "1", "--resume", s(&bomb)], limit);
    fails(&out, 2, "bomb.npz: is 3");
    fails(&out, 2, "bytes, over the maximum of");
}

#[cfg(unix)]
#[test]
fn sizes_from_files_and_flags_are_checked_before_they_are_allocated() {
    let dir = scratch("huge-sizes");
    // An input edited to 2^44 i64 values: the op reading it would make more
    // than 2^40 elements, so the file is refused at load (exit 2, naming the
    // op) before anything is allocated.
    let program = compile(&dir, "m.lms", &[]);
    let mut g = pb::Graph::decode(std::fs::read(&program).unwrap().as_slice()).unwrap();
    let plan = g.plan.as_mut().unwrap();
    assert_eq!(plan.budget_device_bytes, None);
    (plan.arena_device_bytes, plan.arena_host_bytes) = (None, None);
    let tokens = tensor(&mut g, "tokens");
    tokens.shape = vec![1 << 44];
    tokens.bytes = 8 << 44;
    let huge = dir.join("huge.lms");
    std::fs::write(&huge, g.encode_to_vec()).unwrap();
    let out = lms_bounded(&["run", s(&huge), "--device", "cpu", "--steps", "1"], None);
    fails(&out, 2, "node 'tok_emb' (Gather): shape too large");
    // A plan without a budget whose arena the machine cannot hold: the
    // machine's memory is the device limit, so the run ends with exit 3.
    let mlp = fixture("models/mlp.onnx");
    let wide = dir.join("wide.lms");
    let compiled = lms(&["compile", s(&mlp), "--batch", "2147483648", "-o", s(&wide)]);
    assert!(compiled.status.success(), "{}", String::from_utf8_lossy(&compiled.stderr));
    fails(&lms_bounded(&["run", s(&wide), "--device", "cpu", "--steps", "1"], None), 3, "out of device memory at node");
    // A budget above what the system gives (2^47 bytes is the whole address
    // space of a process) ends the same way when the device arena, the
    // input's block in it, is allocated.
    let out = lms_bounded(&["run", s(&wide), "--device", "cpu", "--steps", "1", "--device-memory", "1000TiB"], None);
    fails(&out, 3, "cannot allocate 4.09 TiB for the device arena: the system refused that much memory");
    // A run without a budget says where its limit comes from.
    let small = lms_bounded(&["run", s(&program), "--device", "cpu", "--steps", "1"], None);
    let stdout = String::from_utf8_lossy(&small.stdout);
    assert!(stdout.contains("(the machine's memory: the plan has no budget)"), "{stdout}");
    let curve = lms(&["plan-curve", s(&mlp), "--batch", "2", "--budget-steps", "1000000000"]);
    fails(&curve, 2, "'--budget-steps <BUDGET_STEPS>': must be at most 1000");
    assert_eq!(entries(&dir), ["huge.lms", "m.lms", "wide.lms"]);
}

#[test]
fn an_exponential_glob_ends_at_once() {
    let model = fixture("models/mlp.onnx");
    let dir = scratch("glob");
    let out = lms(&["compile", s(&model), "--batch", "1", "-o", s(&dir.join("m.lms")), "--trainable", "**********Z"]);
    fails(&out, 2, "--trainable '**********Z' matches no weight or buffer of the model");
    assert!(entries(&dir).is_empty());
}

#[cfg(unix)]
#[test]
fn a_closed_stdout_ends_quietly() {
    // Its text form (290 KB) overflows the pipe's buffer, so the write after
    // the reader left fails for certain.
    let model = onnx_data("light/light_densenet121.onnx");
    let mut child = Command::new(lms_bin())
        .args(["inspect", s(&model), "--ir"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert!(first.starts_with("graph"), "{first}");
    let out = child.wait_with_output().unwrap();
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    let by_sigpipe = out.status.signal() == Some(libc::SIGPIPE);
    assert!(out.status.success() || by_sigpipe, "{:?}", out.status);
}

#[test]
fn every_bad_flag_value_is_an_error_naming_the_flag() {
    let dir = scratch("flags");
    let (mlp, gpt) = (fixture("models/mlp.onnx"), fixture("models/tiny_gpt.onnx"));
    let out = dir.join("m.lms");
    let cases: [(&Path, &[&str], &str); 11] = [
        (&mlp, &["--batch", "0"], "'--batch <BATCH>': must be at least 1"),
        (&mlp, &["--lr", "nan"], "'--lr <LR>': must be a finite number above 0"),
        (&mlp, &["--train", "momentum", "--momentum", "7"], "'--momentum <MOMENTUM>': must be at least 0 and below 1"),
        (&gpt, &["--dim", "foo=3"], "--dim 'foo' matches no symbolic dimension"),
        (&mlp, &["--strategy", "tflms", "--lb", "3", "--ub", "2"], "--lb 3 is above --ub 2"),
        (&mlp, &["--strategy", "tflms", "--incl-types", "NoSuchOp"], "--incl-types 'NoSuchOp' matches no op type"),
        (
            &mlp,
            &["--strategy", "tflms", "--incl-types", "Rellu"],
            "matches no op type of the training graph (close: 'Relu')",
        ),
        (&mlp, &["--strategy", "tflms", "--incl-scopes", "nosuch"], "--incl-scopes 'nosuch' matches no scope"),
        (&mlp, &["--strategy", "tflms", "--starting-scope", "nosuch"], "--starting-scope 'nosuch' matches no scope"),
        (&mlp, &["--trainable", "nomatch*"], "--trainable 'nomatch*' matches no weight or buffer"),
        (&mlp, &["--host-budget", "1GiB"], "--host-budget has no effect without --budget"),
    ];
    for (model, flags, needle) in cases {
        let mut args = vec!["compile", s(model), "-o", s(&out)];
        if !flags.contains(&"--batch") {
            args.extend(["--batch", "1"]);
        }
        args.extend(flags);
        fails(&lms(&args), 2, needle);
    }
    fails(
        &lms(&["max-batch", s(&mlp), "--budget", "1GiB", "--limit", "0"]),
        2,
        "'--limit <LIMIT>': must be at least 1",
    );
    assert!(entries(&dir).is_empty(), "{:?}", entries(&dir));
    let plain = compile(&dir, "plain.lms", &[]);
    let data = dir.join("data.npz");
    fails(&lms(&["run", s(&plain), "--data", s(&data), "--epochs", "0"]), 2, "'--epochs <EPOCHS>': must be at least 1");
}

#[test]
fn exit_status_says_does_not_fit_and_max_batch_says_when_it_hit_the_limit() {
    let dir = scratch("exit-codes");
    let mlp = fixture("models/mlp.onnx");
    let out = lms(&[
        "compile",
        s(&mlp),
        "--batch",
        "1",
        "-o",
        s(&dir.join("m.lms")),
        "--strategy",
        "tflms",
        "--budget",
        "1KiB",
    ]);
    let err = fails(&out, 3, "does not fit in device memory");
    assert!(err.trim_end().ends_with("; --strategy auto may fit it (it also recomputes tensors and splits the batch)"));
    fails(&lms(&["max-batch", s(&mlp), "--budget", "1KiB"]), 3, "batch 1 does not fit in a device budget of 1.00 KiB");
    let plain = compile(&dir, "plain.lms", &[]);
    fails(&lms(&["run", s(&plain), "--steps", "1", "--device-memory", "1KiB"]), 3, "");

    let limited = lms(&["max-batch", s(&mlp), "--budget", "1GiB", "--limit", "4"]);
    let stdout = String::from_utf8_lossy(&limited.stdout);
    assert!(limited.status.success(), "{}", String::from_utf8_lossy(&limited.stderr));
    assert!(stdout.contains("max batch >=     4") && stdout.contains("stopped at --limit"), "{stdout}");
    let help = String::from_utf8_lossy(&lms(&["--help"]).stdout).into_owned();
    assert!(help.contains("Exit status") && help.contains("  4  rewrite not proven equivalent"), "{help}");
    assert!(help.starts_with("lms trains deep-learning models larger than GPU memory: it compiles"), "{help}");
}

// Every command's outputs against its inputs, `run --save-onnx` against the
// model the graph was compiled from, outputs into FIFOs, stdout failures,
// and `lms run` watched and stopped. Special files are FIFOs and links made
// in each test's scratch folder, never a real device.

fn succeeds(out: &Output) -> String {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout.clone()).unwrap()
}

/// The MLP fixture copied into `dir` and compiled there (batch 2) as
/// `m.lms`; returns (model, graph).
fn mlp_in(dir: &Path) -> (PathBuf, PathBuf) {
    let model = dir.join("mlp.onnx");
    std::fs::copy(fixture("models/mlp.onnx"), &model).unwrap();
    let graph = dir.join("m.lms");
    succeeds(&lms(&["compile", s(&model), "--batch", "2", "-q", "-o", s(&graph)]));
    (model, graph)
}

/// Every file of `dir` with its bytes, to show nothing changed.
fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>)> {
    entries(dir).into_iter().map(|n| (n.clone(), std::fs::read(dir.join(&n)).unwrap_or_default())).collect()
}

#[cfg(unix)]
#[test]
fn run_refuses_each_input_and_output_named_twice_and_changes_nothing() {
    let dir = scratch("run-inputs");
    let (model, graph) = mlp_in(&dir);
    let state = dir.join("state.npz");
    succeeds(&lms(&["run", s(&graph), "--steps", "1", "--save-state", s(&state)]));
    let before = snapshot(&dir);
    let (g, m, st) = (s(&graph), s(&model), s(&state));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--save-state", g], "--save-state "),
        (vec!["--save-onnx", g], "--save-onnx "),
        (vec!["--trace", g], "--trace "),
        (vec!["--save-onnx", m, "--model", m], "is the --model"),
        (vec!["--resume", st, "--save-state", st], "is the --resume"),
        (vec!["--data", st, "--trace", st], "is the --data"),
        (vec!["--resume", st, "--save-onnx", st], "is the --resume"),
        (vec!["--save-state", "x.npz", "--trace", "x.npz"], "is also the file of --save-state"),
    ];
    for (flags, needle) in cases {
        let mut args = vec!["run", g];
        args.extend(&flags);
        let line = fails(&lms(&args), 2, needle);
        assert!(line.contains("lms never overwrites an input") || line.contains("is also the file of"), "{line}");
        assert_eq!(snapshot(&dir), before, "lms run {flags:?} changed a file");
    }
}

#[cfg(unix)]
#[test]
fn save_onnx_writes_only_into_the_model_the_graph_was_compiled_from() {
    let dir = scratch("save-onnx");
    let (_, graph) = mlp_in(&dir);
    let trained = dir.join("trained.onnx");
    let other = fixture("models/tiny_gpt.onnx");
    let out = lms(&["run", s(&graph), "--steps", "1", "--save-onnx", s(&trained), "--model", s(&other)]);
    let line = fails(&out, 2, "is not the model");
    assert!(line.contains("tiny_gpt.onnx") && line.contains("m.lms") && line.contains("mlp.onnx"), "{line}");
    assert!(!trained.exists());
    // Without --model: the model the metadata names, beside the graph.
    let text = succeeds(&lms(&["run", s(&graph), "--steps", "1", "--save-onnx", s(&trained)]));
    assert!(text.contains("saved the model with 6 trained weights"), "{text}");
    // A graph that records no model hash cannot tell a wrong model: refused.
    let mut g = lms_proto::lms::Graph::decode(&*std::fs::read(&graph).unwrap()).unwrap();
    g.metadata.retain(|m| m.key != "model.sha256");
    let bare = dir.join("bare.lms");
    std::fs::write(&bare, g.encode_to_vec()).unwrap();
    let again = dir.join("again.onnx");
    let out = lms(&["run", s(&bare), "--steps", "1", "--save-onnx", s(&again), "--model", s(&dir.join("mlp.onnx"))]);
    fails(&out, 2, "records no source model and its sha256");
    assert!(!again.exists());
}

#[cfg(unix)]
#[test]
fn every_command_refuses_an_output_naming_an_input() {
    let dir = scratch("commands");
    let (model, graph) = mlp_in(&dir);
    let profile = dir.join("cpu.json");
    std::fs::copy(repo_root().join("compiler/profiles/cpu.json"), &profile).unwrap();
    let before = snapshot(&dir);
    let (m, g, p) = (s(&model), s(&graph), s(&profile));
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["compile", m, "--batch", "2", "-o", "x.lms", "--dump-after", "import", m], "--dump-after "),
        (vec!["compile", m, "--batch", "2", "--device-profile", p, "-o", p], "is the --device-profile"),
        (
            vec!["compile", m, "--batch", "2", "-o", "x.lms", "--dump-after", "import", "x.lms"],
            "is also the file of -o",
        ),
        (vec!["simulate", g, "--svg", g], "is the graph"),
        (vec!["simulate", g, "--device-profile", p, "--html", p], "is the --device-profile"),
        (vec!["plan-curve", m, "--batch", "2", "--svg", m], "is the model"),
        (vec!["plan-curve", m, "--batch", "2", "--device-profile", p, "--json", p], "is the --device-profile"),
    ];
    for (args, needle) in cases {
        let out = Command::new(lms_bin()).args(&args).current_dir(&dir).output().unwrap();
        fails(&out, 2, needle);
        assert_eq!(snapshot(&dir), before, "lms {args:?} changed a file");
    }
}

/// A FIFO made in `dir`.
#[cfg(unix)]
fn fifo(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(name);
    let c = std::ffi::CString::new(s(&path)).unwrap();
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file system entry.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0, "mkfifo");
    path
}

/// A thread reading `fifo` to its end.
#[cfg(unix)]
fn drain(fifo: &Path) -> std::thread::JoinHandle<Vec<u8>> {
    let fifo = fifo.to_path_buf();
    std::thread::spawn(move || std::fs::read(fifo).unwrap())
}

/// Releases a drainer still waiting for a writer (when lms failed before
/// writing): a non-blocking open for writing, which fails when none waits.
#[cfg(unix)]
fn release(fifo: &Path) {
    let _ = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(fifo);
}

#[cfg(unix)]
#[test]
fn compile_writes_into_a_fifo_and_a_link_to_one_keeping_their_type() {
    let dir = scratch("fifo-outputs");
    let (lms_fifo, report_fifo) = (fifo(&dir, "lms.fifo"), fifo(&dir, "report.fifo"));
    let link = dir.join("stdout");
    std::os::unix::fs::symlink(&report_fifo, &link).unwrap();
    let (graph, report) = (drain(&lms_fifo), drain(&report_fifo));
    let model = fixture("models/mlp.onnx");
    let out = lms(&["compile", s(&model), "--batch", "2", "-q", "-o", s(&lms_fifo), "--report", s(&link)]);
    release(&lms_fifo);
    release(&report_fifo);
    succeeds(&out);
    let graph = graph.join().unwrap();
    lms_proto::lms::Graph::decode(&*graph).expect("the .lms bytes came through the FIFO");
    let report: serde_json::Value = serde_json::from_slice(&report.join().unwrap()).unwrap();
    assert_eq!(report["model"], "mlp.onnx");
    assert!(std::fs::symlink_metadata(&lms_fifo).unwrap().file_type().is_fifo());
    assert!(std::fs::symlink_metadata(&report_fifo).unwrap().file_type().is_fifo());
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(entries(&dir), ["lms.fifo", "report.fifo", "stdout"], "no temporary left");
    // Two outputs into one FIFO would reach its reader run together: refused before writing.
    let out = lms(&[
        "compile",
        s(&model),
        "--batch",
        "2",
        "-o",
        s(&lms_fifo),
        "--text",
        s(&link),
        "--report",
        s(&report_fifo),
    ]);
    fails(&out, 2, "is also the file of --text");
}

#[cfg(unix)]
#[test]
fn a_failed_write_to_stdout_is_exit_2_and_a_closed_pipe_ends_quietly() {
    let dir = scratch("stdout-failure");
    let model = fixture("models/mlp.onnx");
    // Stdout open for reading only: every write fails (EBADF).
    let read_only = dir.join("read-only");
    std::fs::write(&read_only, b"").unwrap();
    let out = Command::new(lms_bin())
        .args(["inspect", s(&model), "--batch", "1"])
        .stdout(Stdio::from(std::fs::File::open(&read_only).unwrap()))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    fails(&out, 2, "lms: error: cannot write to standard output: ");
    assert_eq!(std::fs::read(&read_only).unwrap(), b"");
    // Stdout a pipe whose reader is gone: SIGPIPE, nothing on stderr.
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe() returns.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    // SAFETY: both descriptors were just opened by pipe() and are owned here only.
    let (reader, writer) = unsafe {
        use std::os::fd::FromRawFd;
        (std::fs::File::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1]))
    };
    drop(reader);
    let out = Command::new(lms_bin())
        .args(["inspect", s(&model), "--batch", "1"])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}: {}", out.status, String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[cfg(unix)]
#[test]
fn run_prints_each_step_as_it_completes_and_stops_on_sigint_saving_the_state() {
    let dir = scratch("sigint");
    let (_, graph) = mlp_in(&dir);
    let state = dir.join("state.npz");
    let mut child = Command::new(lms_bin())
        .args(["run", s(&graph), "--steps", "100000000", "--save-state", s(&state)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read the first line as soon as it comes (a buffered stdout would hold
    // it back), then keep draining so lms never blocks on a full pipe.
    let (first_tx, first_rx) = std::sync::mpsc::channel();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let reader = std::thread::spawn(move || {
        let mut first = String::new();
        stdout.read_line(&mut first).unwrap();
        first_tx.send(first).unwrap();
        let mut rest = String::new();
        stdout.read_to_string(&mut rest).unwrap();
        rest
    });
    let first = match first_rx.recv_timeout(Duration::from_secs(120)) {
        Ok(line) => line,
        Err(_) => {
            let _ = child.kill();
            panic!("no step line within 120 s: stdout is not flushed per step");
        }
    };
    assert!(first.starts_with("step    1  loss "), "{first}");
    // SAFETY: sends SIGINT to the child this test spawned and has not reaped.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) }, 0);
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child.stderr.take().unwrap().read_to_string(&mut stderr).unwrap();
    let rest = reader.join().unwrap();
    assert_eq!(status.code(), Some(130), "{status:?}: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("lms: error: interrupted by SIGINT after step "), "{stderr}");
    assert!(rest.contains("interrupted after step "), "{rest}");
    assert_eq!(entries(&dir), ["m.lms", "mlp.onnx", "state.npz"], "no temporary left");
    let resumed = succeeds(&lms(&["run", s(&graph), "--steps", "1", "--resume", s(&state)]));
    let steps: u64 = stderr.split("after step ").nth(1).unwrap().split(' ').next().unwrap().parse().unwrap();
    assert!(resumed.contains(&format!("resumed after step {steps}")), "{resumed}");
}
