//! Two more fuzz targets, on what a user or an attacker controls around the files:
//!
//! - [`cli_args`]: `lms` command lines, mutated token by token from seeds and a vocabulary
//!   of flags and hostile values, run as the real binary in a scratch folder. Every run
//!   must end with status 0, 2, 3 or 4, a failure with exactly one `lms: error:` line,
//!   the model unchanged and no temporary file left behind.
//! - [`external_layouts`]: the external data of a model (locations, offsets, lengths) and
//!   the folder around it (files of any size, links inside and out, folders, FIFOs). An
//!   import that succeeds must have read only files inside the model's folder.
//!
//! Inputs are lines of text; mutation works on whole lines and tokens from fixed
//! vocabularies, so no command line names a path outside its scratch folder except the
//! planted `../outside` target.

use super::mutate::Rng;
use super::runner::Target;
use crate::{fixture, lms_bin};
use lms_compiler::frontend::{self, FrontendOptions};
use lms_proto::onnx::StringStringEntryProto;
use lms_proto::Message;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Flags and values command lines are built from.
const CLI_VOCABULARY: &[&str] = &[
    "inspect",
    "compile",
    "simulate",
    "run",
    "max-batch",
    "verify",
    "--batch",
    "--dim",
    "--lr",
    "--momentum",
    "--train",
    "momentum",
    "adam",
    "--loss",
    "mse",
    "--trainable",
    "--frozen",
    "--strategy",
    "tflms",
    "none",
    "--budget",
    "--host-budget",
    "--force",
    "--lb",
    "--ub",
    "--n-tensors",
    "--incl-types",
    "--excl-types",
    "--incl-scopes",
    "--excl-scopes",
    "--starting-scope",
    "--starting-op-names",
    "--fuse-swapins",
    "--fuse-threshold",
    "--swap-branches",
    "--branch-threshold",
    "--limit",
    "--steps",
    "--device-memory",
    "--before",
    "--svg",
    "--json",
    "--ir",
    "--text",
    "--onnx",
    "--report",
    "--depfile",
    "-o",
    "--no-verify",
    "--verbose",
    "0",
    "1",
    "2",
    "3",
    "7",
    "-1",
    "nan",
    "inf",
    "1e40",
    "18446744073709551616",
    "0.9",
    "1KiB",
    "0B",
    "100KiB",
    "16GiB",
    "abc",
    "",
    "*",
    "**********Z",
    "fc1*",
    "Relu",
    "NoSuchOp",
    "fc1",
    "nosuch",
    "foo=3",
    "batch=0",
    "=",
    "m.onnx",
    "out.lms",
    "out.txt",
    "seed.lms",
    ".",
    "fifo",
    "link.lms",
];

/// The model every command line reads, and the seeds.
const CLI_SEEDS: &[&str] = &[
    "inspect\nm.onnx\n--batch\n2\n--ir",
    "compile\nm.onnx\n-o\nout.lms\n--batch\n2\n--strategy\ntflms\n--text\nout.txt",
    "compile\nm.onnx\n-o\nout.lms\n--strategy\ntflms\n--budget\n100KiB\n--report\nout.txt",
    "compile\nm.onnx\n-o\nout.lms\n--train\nmomentum\n--momentum\n0.9\n--trainable\nfc1*",
    "max-batch\nm.onnx\n--budget\n16GiB\n--limit\n7",
    "simulate\nseed.lms\n--before\nseed.lms\n--svg\nout.txt",
    "verify\nseed.lms\nseed.lms",
    "run\nseed.lms\n--steps\n1\n--device-memory\n100KiB",
];

/// Mutates a command line: replaces, inserts, deletes, duplicates or swaps tokens.
fn mutate_cli(rng: &mut Rng, seed: &[u8], seeds: &[Vec<u8>]) -> Vec<u8> {
    let text = String::from_utf8_lossy(seed);
    let mut tokens: Vec<String> = text.split('\n').map(str::to_string).collect();
    for _ in 0..1 + rng.below(3) {
        let word = CLI_VOCABULARY[rng.below(CLI_VOCABULARY.len())].to_string();
        let at = rng.below(tokens.len());
        match rng.below(6) {
            0 if tokens.len() > 1 => drop(tokens.remove(at)),
            1 => tokens.insert(at, word),
            2 => tokens.push(tokens[at].clone()),
            3 => {
                let other = rng.below(tokens.len());
                tokens.swap(at, other);
            }
            4 => {
                let other = String::from_utf8_lossy(&seeds[rng.below(seeds.len())]).into_owned();
                tokens.extend(other.split('\n').skip(1).map(str::to_string));
            }
            _ => tokens[at] = word,
        }
    }
    tokens.join("\n").into_bytes()
}

/// A scratch folder for one target, emptied first.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lms-fuzz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).expect("no NUL in a scratch path");
    // SAFETY: a valid NUL-terminated path; mkfifo only creates a file system entry.
    let made = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(made, 0, "mkfifo {}", path.display());
}

/// The command-line target: the `lms` binary in a scratch folder holding the MLP fixture
/// (`m.onnx`), its compiled graph (`seed.lms`), a FIFO and a link to the model.
pub fn cli_args() -> Target {
    let dir = scratch("cli");
    std::fs::copy(fixture("models/mlp.onnx"), dir.join("m.onnx")).expect("copy the MLP fixture");
    let seed = Command::new(lms_bin()).args(["compile", "m.onnx", "-o", "seed.lms"]).current_dir(&dir).output();
    assert!(seed.is_ok_and(|o| o.status.success()), "compiling the seed graph");
    mkfifo(&dir.join("fifo"));
    std::os::unix::fs::symlink("m.onnx", dir.join("link.lms")).expect("link");
    let model = std::fs::read(dir.join("m.onnx")).expect("model");
    let run = move |input: &[u8]| {
        let text = String::from_utf8_lossy(input);
        let out = Command::new(lms_bin()).args(text.split('\n')).current_dir(&dir).output().expect("run lms");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code();
        let help = code == Some(2) && stderr.contains("\nCommands:");
        assert!(matches!(code, Some(0 | 2 | 3 | 4)), "status {:?} for {text:?}: {stderr}", out.status);
        if code != Some(0) && !help {
            assert!(
                stderr.starts_with("lms: error: ") && stderr.trim_end().lines().count() == 1,
                "not one error line for {text:?}: {stderr}"
            );
        }
        assert_eq!(std::fs::read(dir.join("m.onnx")).ok().as_ref(), Some(&model), "the model changed: {text:?}");
        let stray = std::fs::read_dir(&dir).expect("scratch").flatten().map(|e| e.file_name());
        let stray: Vec<_> = stray.filter(|n| n.to_string_lossy().ends_with(".tmp")).collect();
        assert!(stray.is_empty(), "temporary files left by {text:?}: {stray:?}");
        code == Some(0)
    };
    let seeds = CLI_SEEDS.iter().map(|s| s.as_bytes().to_vec()).collect();
    Target { name: "cli", seeds, mutate: mutate_cli, run: Box::new(run) }
}

/// Lines a layout is made of: `tensor NAME LOCATION OFFSET LENGTH` makes an initializer
/// external; `file NAME SIZE`, `link NAME TARGET`, `dir NAME` and `fifo NAME` make the
/// folder's entries.
const LAYOUT_LINES: &[&str] = &[
    "tensor fc1.weight w.bin 0 32768",
    "tensor fc1.weight w.bin 16 32768",
    "tensor fc2.bias w.bin 0 256",
    "tensor fc2.bias sub/b.bin 0 256",
    "tensor fc2.bias link.bin 0 256",
    "tensor fc2.bias out.bin 0 256",
    "tensor fc2.bias fifo 0 256",
    "tensor fc2.bias sub 0 256",
    "tensor fc2.bias ../outside/secret.bin 0 256",
    "tensor fc2.bias /dev/zero 0 256",
    "tensor fc2.bias w.bin 18446744073709551615 256",
    "tensor fc2.bias w.bin 0 -1",
    "tensor fc2.bias w.bin abc 256",
    "tensor fc3.bias w.bin 4 40",
    "file w.bin 32784",
    "file w.bin 10",
    "file w.bin 0",
    "file sub/b.bin 256",
    "link link.bin w.bin",
    "link link.bin ../outside/secret.bin",
    "link link.bin /dev/zero",
    "link out.bin link.bin",
    "link sub ../outside",
    "dir sub",
    "fifo fifo",
];

/// Mutates a layout: replaces, inserts, deletes or reorders whole lines.
fn mutate_layout(rng: &mut Rng, seed: &[u8], _: &[Vec<u8>]) -> Vec<u8> {
    let text = String::from_utf8_lossy(seed);
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for _ in 0..1 + rng.below(3) {
        let line = LAYOUT_LINES[rng.below(LAYOUT_LINES.len())].to_string();
        match rng.below(4) {
            0 if !lines.is_empty() => drop(lines.remove(rng.below(lines.len()))),
            1 if lines.len() > 1 => {
                let (a, b) = (rng.below(lines.len()), rng.below(lines.len()));
                lines.swap(a, b);
            }
            2 if !lines.is_empty() => {
                let at = rng.below(lines.len());
                lines[at] = line;
            }
            _ => lines.push(line),
        }
    }
    lines.join("\n").into_bytes()
}

/// Makes the folder a layout describes under `dir` (emptied first) and writes the model
/// with its external tensors as `dir/m.onnx`.
fn materialise(dir: &Path, layout: &str, model: &lms_proto::onnx::ModelProto) {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("layout folder");
    let mut model = model.clone();
    for line in layout.lines() {
        let words: Vec<&str> = line.split(' ').collect();
        let path = |name: &str| dir.join(name);
        let _ = match words[..] {
            ["file", name, size] => {
                let size = size.parse::<usize>().unwrap_or(0).min(1 << 20);
                let _ = std::fs::create_dir_all(path(name).parent().expect("a parent"));
                std::fs::write(path(name), (0..size).map(|i| i as u8).collect::<Vec<u8>>())
            }
            ["link", name, target] => std::os::unix::fs::symlink(target, path(name)),
            ["dir", name] => std::fs::create_dir_all(path(name)),
            ["fifo", name] if !path(name).exists() => {
                mkfifo(&path(name));
                Ok(())
            }
            ["tensor", name, location, offset, length] => {
                let graph = model.graph.as_mut().expect("a graph");
                if let Some(init) = graph.initializer.iter_mut().find(|t| t.name == name) {
                    init.raw_data.clear();
                    init.float_data.clear();
                    init.data_location = 1;
                    let entry = |k: &str, v: &str| StringStringEntryProto { key: k.into(), value: v.into() };
                    init.external_data =
                        vec![entry("location", location), entry("offset", offset), entry("length", length)];
                }
                Ok(())
            }
            _ => Ok(()),
        };
    }
    std::fs::write(dir.join("m.onnx"), model.encode_to_vec()).expect("write the model");
}

/// The external-data target: imports the MLP fixture with the layout's external tensors;
/// an import that succeeds must have resolved every location inside the model's folder.
pub fn external_layouts() -> Target {
    let root = scratch("layouts");
    let outside = root.join("outside");
    std::fs::create_dir_all(&outside).expect("outside folder");
    std::fs::write(outside.join("secret.bin"), vec![7u8; 1024]).expect("secret");
    let model = frontend::read_model(&fixture("models/mlp.onnx")).expect("the MLP fixture");
    let dir = root.join("model");
    let run = move |input: &[u8]| {
        let layout = String::from_utf8_lossy(input);
        materialise(&dir, &layout, &model);
        let imported = frontend::load(&dir.join("m.onnx"), &FrontendOptions::default()).is_ok();
        if imported {
            let folder = dir.canonicalize().expect("the layout folder");
            let proto = frontend::read_model(&dir.join("m.onnx")).expect("just written");
            for file in frontend::external_files(&proto, &dir) {
                let resolved = file.canonicalize().expect("an imported location exists");
                assert!(resolved.starts_with(&folder), "read {} from outside, layout {layout:?}", resolved.display());
            }
        }
        imported
    };
    let seeds = vec![b"file w.bin 32784\ntensor fc1.weight w.bin 16 32768".to_vec(), b"dir sub".to_vec()];
    Target { name: "external", seeds, mutate: mutate_layout, run: Box::new(run) }
}
