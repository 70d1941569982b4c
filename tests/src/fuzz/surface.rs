//! Two more fuzz targets, on what a user or an attacker controls around the files:
//!
//! - [`cli_args`]: `lms` command lines, mutated token by token from seeds and a vocabulary
//!   of flags and hostile values, run as the real binary in a scratch folder restored
//!   before every run. Every run must end with status 0, 2, 3 or 4 within a deadline, a
//!   failure with exactly one `lms: error:` line, every file it reads unchanged, the FIFO
//!   stand-ins still FIFOs, and no temporary file left behind.
//! - [`external_layouts`]: the external data of a model (locations, offsets, lengths) and
//!   the folder around it (files of any size, links inside and out, folders, FIFOs). An
//!   import that succeeds must have read only files inside the model's folder.
//!
//! Inputs are lines of text; mutation works on whole lines and tokens from fixed
//! vocabularies, so no command line names a path outside its scratch folder: devices are
//! stood in for by FIFOs, links to them and zero-filled files made there, and "outside"
//! is a folder beside the model's in the same scratch folder.

use super::alloc;
use super::mutate::Rng;
use super::runner::Target;
use crate::{fixture, lms_bin};
use lms_compiler::frontend::{self, FrontendOptions};
use lms_proto::onnx::StringStringEntryProto;
use lms_proto::Message;
use std::cell::RefCell;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

/// Flags and values command lines are built from. Every file name is one of the scratch
/// folder's entries (see [`CliScratch`]) or a new file in it; none leaves the folder.
pub const CLI_VOCABULARY: &[&str] = &[
    "inspect",
    "compile",
    "show",
    "simulate",
    "run",
    "max-batch",
    "plan-curve",
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
    "--html",
    "--trace",
    "--device-profile",
    "--budget-steps",
    "--data",
    "--resume",
    "--save-state",
    "--save-onnx",
    "--model",
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
    "state.npz",
    "zeros",
    "fifo",
    "fifo-link",
    "link.lms",
];

/// The seed command lines, on the scratch folder's entries.
pub const CLI_SEEDS: &[&str] = &[
    "inspect\nm.onnx\n--batch\n2\n--ir",
    "compile\nm.onnx\n-o\nout.lms\n--batch\n2\n--strategy\ntflms\n--text\nout.txt",
    "compile\nm.onnx\n-o\nout.lms\n--strategy\ntflms\n--budget\n100KiB\n--report\nout.txt",
    "compile\nm.onnx\n-o\nout.lms\n--train\nmomentum\n--momentum\n0.9\n--trainable\nfc1*",
    "max-batch\nm.onnx\n--budget\n16GiB\n--limit\n7",
    "simulate\nseed.lms\n--before\nseed.lms\n--svg\nout.txt",
    "verify\nseed.lms\nseed.lms",
    "run\nseed.lms\n--steps\n1\n--device-memory\n100KiB",
    "run\nseed.lms\n--steps\n1\n--save-state\nstate.npz\n--trace\nfifo-link",
    "compile\nm.onnx\n-o\nfifo\n--report\nout.txt\n--device-profile\nzeros",
    "plan-curve\nm.onnx\n--budget-steps\n3\n--json\nfifo-link",
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
pub(super) fn scratch(name: &str) -> PathBuf {
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

/// Flags whose value is a file lms writes: a scratch file named only after one of these
/// may change; one named anywhere else is read and must keep its contents.
pub const OUTPUT_FLAGS: &[&str] = &[
    "-o",
    "--output",
    "--text",
    "--onnx",
    "--report",
    "--html",
    "--depfile",
    "--svg",
    "--json",
    "--trace",
    "--save-state",
    "--save-onnx",
];

/// How long one `lms` command line may run before it is killed and reported: far above
/// what any command line on the MLP fixture takes, below the runner's per-input limit.
const CHILD_DEADLINE: Duration = Duration::from_secs(8);

/// Address space an `lms` child may take (`RLIMIT_AS`): a runaway allocation fails in the
/// child (and is reported) instead of taking the machine's memory.
const CHILD_ADDRESS_SPACE: u64 = 4 << 30;

/// Bytes of the zero-filled stand-in for `/dev/zero`.
const ZEROS_BYTES: usize = 1 << 20;

/// A scratch file's kind and contents, as the harness last made it.
enum Entry {
    /// A regular file with these bytes.
    File(Vec<u8>),
    /// A symbolic link to this (relative) target.
    Link(&'static str),
    /// A FIFO, drained by the harness.
    Fifo,
}

/// A FIFO kept open for reading and writing by the harness (so a writer's `open` never
/// waits for a reader) and drained by a thread (so a writer never waits for room).
struct DrainedFifo {
    /// The FIFO's device and inode, to notice it being replaced.
    id: (u64, u64),
    /// Held open for the life of the harness; the drainer thread reads from a clone.
    _file: File,
}

impl DrainedFifo {
    fn make(path: &Path) -> DrainedFifo {
        mkfifo(path);
        // Opening a FIFO for reading and writing never blocks on Linux.
        let file = std::fs::OpenOptions::new().read(true).write(true).open(path).expect("open the FIFO");
        let meta = file.metadata().expect("FIFO metadata");
        let mut reader = file.try_clone().expect("FIFO handle");
        // Reads until the process ends (the harness holds a writer, so no end of file).
        std::thread::spawn(move || {
            let mut sink = [0u8; 1 << 16];
            while reader.read(&mut sink).is_ok() {}
        });
        DrainedFifo { id: (meta.dev(), meta.ino()), _file: file }
    }
}

/// The command-line target's scratch folder: the inputs every command line may name,
/// restored before every execution, and everything else removed.
struct CliScratch {
    dir: PathBuf,
    entries: Vec<(&'static str, Entry)>,
    fifo: RefCell<DrainedFifo>,
}

impl CliScratch {
    /// The MLP fixture (`m.onnx`), its compiled graph (`seed.lms`), a zero-filled file
    /// (`zeros`), a FIFO (`fifo`), a link to the model (`link.lms`) and one to the FIFO
    /// (`fifo-link`).
    fn new() -> CliScratch {
        let dir = scratch("cli");
        let model = std::fs::read(fixture("models/mlp.onnx")).expect("the MLP fixture");
        std::fs::write(dir.join("m.onnx"), &model).expect("write the model");
        let out = Command::new(lms_bin())
            .args(["compile", "m.onnx", "--batch", "1", "-o", "seed.lms"])
            .current_dir(&dir)
            .output();
        assert!(out.is_ok_and(|o| o.status.success()), "compiling the seed graph");
        let seed = std::fs::read(dir.join("seed.lms")).expect("the seed graph");
        let entries = vec![
            ("m.onnx", Entry::File(model)),
            ("seed.lms", Entry::File(seed)),
            ("zeros", Entry::File(vec![0; ZEROS_BYTES])),
            ("fifo", Entry::Fifo),
            ("link.lms", Entry::Link("m.onnx")),
            ("fifo-link", Entry::Link("fifo")),
        ];
        let fifo = DrainedFifo::make(&dir.join("fifo"));
        let scratch = CliScratch { dir, entries, fifo: RefCell::new(fifo) };
        scratch.restore();
        scratch
    }

    /// Whether `name` is still what `entry` says (the same FIFO, not just a FIFO).
    fn intact(&self, name: &str, entry: &Entry) -> bool {
        let path = self.dir.join(name);
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            return false;
        };
        let kind = meta.file_type();
        match entry {
            Entry::File(bytes) => kind.is_file() && std::fs::read(&path).is_ok_and(|b| b == *bytes),
            Entry::Link(target) => kind.is_symlink() && std::fs::read_link(&path).is_ok_and(|t| t == Path::new(target)),
            Entry::Fifo => kind.is_fifo() && (meta.dev(), meta.ino()) == self.fifo.borrow().id,
        }
    }

    /// Puts back every entry that differs and removes everything else.
    fn restore(&self) {
        for item in std::fs::read_dir(&self.dir).expect("the scratch folder").flatten() {
            let name = item.file_name();
            if !self.entries.iter().any(|(n, _)| name == *n) {
                remove(&item.path());
            }
        }
        for (name, entry) in &self.entries {
            if self.intact(name, entry) {
                continue;
            }
            let path = self.dir.join(name);
            remove(&path);
            match entry {
                Entry::File(bytes) => std::fs::write(&path, bytes).expect("restore a scratch file"),
                Entry::Link(target) => std::os::unix::fs::symlink(target, &path).expect("restore a link"),
                // A replaced FIFO (a finding already reported it) gets a new drainer; the
                // old one's thread stays blocked on the lost FIFO.
                Entry::Fifo => *self.fifo.borrow_mut() = DrainedFifo::make(&path),
            }
        }
    }

    /// Checks the folder after a command line ran: no temporary file left, the FIFO and
    /// its link still there, and every entry the command line names other than as an
    /// output's value unchanged. Messages name files, never their bytes.
    fn check(&self, args: &[&str]) {
        let names = std::fs::read_dir(&self.dir).expect("the scratch folder").flatten().map(|e| e.file_name());
        let stray: Vec<_> = names.filter(|n| n.to_string_lossy().ends_with(".tmp")).collect();
        assert!(stray.is_empty(), "temporary files left behind: {stray:?}");
        for (name, entry) in &self.entries {
            if self.intact(name, entry) {
                continue;
            }
            assert!(!matches!(entry, Entry::Fifo), "the FIFO {name} was replaced");
            assert!(*name != "fifo-link", "the link {name} to the FIFO was replaced");
            // Named only as an output's value, itself (a link to it is replaced, never
            // followed), and read through no link to it.
            let output = |i: usize| i > 0 && OUTPUT_FLAGS.contains(&args[i - 1]);
            let links = self.entries.iter().filter(|(_, e)| matches!(e, Entry::Link(t) if t == name));
            let aliases: Vec<&str> = links.map(|(n, _)| *n).chain([*name]).collect();
            let named = (0..args.len()).any(|i| args[i] == *name);
            let read = (0..args.len()).any(|i| aliases.contains(&args[i]) && !output(i));
            assert!(named && !read, "{name} changed though the command line reads it or does not name it");
        }
    }
}

/// Removes a file, link or folder of the scratch folder, whatever it is.
fn remove(path: &Path) {
    let dir = std::fs::symlink_metadata(path).is_ok_and(|m| m.is_dir());
    let _ = if dir { std::fs::remove_dir_all(path) } else { std::fs::remove_file(path) };
}

/// Runs `lms` with `args` in `dir`, killed past [`CHILD_DEADLINE`] (a finding), in at most
/// [`CHILD_ADDRESS_SPACE`] of address space.
fn run_lms(dir: &Path, args: &[&str]) -> Output {
    let mut command = Command::new(lms_bin());
    command.args(args).current_dir(dir).stdin(Stdio::null());
    // SAFETY: setrlimit is async-signal-safe and touches only the child's limits.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit { rlim_cur: CHILD_ADDRESS_SPACE, rlim_max: CHILD_ADDRESS_SPACE };
            match libc::setrlimit(libc::RLIMIT_AS, &limit) {
                0 => Ok(()),
                _ => Err(std::io::Error::last_os_error()),
            }
        });
    }
    let child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().expect("start lms");
    let pid = child.id() as libc::pid_t;
    let (send, receive) = std::sync::mpsc::channel();
    std::thread::spawn(move || send.send(child.wait_with_output()));
    match receive.recv_timeout(CHILD_DEADLINE) {
        Ok(out) => out.expect("wait for lms"),
        Err(_) => {
            // SAFETY: kills only the child started above, not yet waited for.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            let _ = receive.recv();
            panic!("lms ran past {CHILD_DEADLINE:?} and was killed");
        }
    }
}

/// The command-line target: the `lms` binary in a scratch folder ([`CliScratch`], restored
/// before every execution). Every run ends with status 0, 2, 3 or 4 (or the usage text),
/// a failure with exactly one `lms: error:` line, within [`CHILD_DEADLINE`] and
/// [`alloc::LIMIT`] of resident memory, and leaves the folder as [`CliScratch::check`]
/// requires.
pub fn cli_args() -> Target {
    let scratch = CliScratch::new();
    let children_peak = std::cell::Cell::new(alloc::children_peak());
    let run = move |input: &[u8]| {
        scratch.restore();
        let text = String::from_utf8_lossy(input);
        let args: Vec<&str> = text.split('\n').collect();
        let out = run_lms(&scratch.dir, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        let code = out.status.code();
        let help = code == Some(2) && stderr.contains("\nCommands:");
        let first = stderr.lines().next().unwrap_or("").chars().take(300).collect::<String>();
        assert!(matches!(code, Some(0 | 2 | 3 | 4)), "status {}: {first}", out.status);
        if code != Some(0) && !help {
            let lines = stderr.trim_end().lines().count();
            assert!(stderr.starts_with("lms: error: ") && lines == 1, "{lines} stderr lines, the first: {first}");
        }
        scratch.check(&args);
        let peak = alloc::children_peak();
        let was = children_peak.replace(peak);
        assert!(peak <= alloc::LIMIT || was > alloc::LIMIT, "lms held {} MiB", peak >> 20);
        code == Some(0)
    };
    let seeds = CLI_SEEDS.iter().map(|s| s.as_bytes().to_vec()).collect();
    Target { name: "cli", seeds, mutate: mutate_cli, run: Box::new(run) }
}

/// Lines a layout is made of: `tensor NAME LOCATION OFFSET LENGTH` makes an initializer
/// external; `file NAME SIZE`, `zeros NAME SIZE` (zero-filled), `link NAME TARGET`,
/// `dir NAME` and `fifo NAME` make the folder's entries. `$OUTSIDE` stands for the absolute
/// path of a folder beside the model's, in the same scratch folder: stand-ins for devices
/// and files elsewhere are FIFOs, links and zero-filled files made there.
pub const LAYOUT_LINES: &[&str] = &[
    "tensor fc1.weight w.bin 0 32768",
    "tensor fc1.weight w.bin 16 32768",
    "tensor fc2.bias w.bin 0 256",
    "tensor fc2.bias sub/b.bin 0 256",
    "tensor fc2.bias link.bin 0 256",
    "tensor fc2.bias out.bin 0 256",
    "tensor fc2.bias fifo 0 256",
    "tensor fc2.bias sub 0 256",
    "tensor fc2.bias ../outside/secret.bin 0 256",
    "tensor fc2.bias zeros 0 256",
    "tensor fc2.bias $OUTSIDE/secret.bin 0 256",
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
    "link link.bin fifo",
    "link link.bin $OUTSIDE/secret.bin",
    "zeros zeros 4096",
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
            [kind @ ("file" | "zeros"), name, size] => {
                let size = size.parse::<usize>().unwrap_or(0).min(1 << 20);
                let _ = std::fs::create_dir_all(path(name).parent().expect("a parent"));
                let byte = |i: usize| if kind == "zeros" { 0 } else { i as u8 };
                std::fs::write(path(name), (0..size).map(byte).collect::<Vec<u8>>())
            }
            ["link", name, target] => std::os::unix::fs::symlink(target, path(name)),
            ["dir", name] => std::fs::create_dir_all(path(name)),
            ["fifo", name] if std::fs::symlink_metadata(path(name)).is_err() => {
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
        let layout = String::from_utf8_lossy(input).replace("$OUTSIDE", &outside.to_string_lossy());
        materialise(&dir, &layout, &model);
        let imported =
            frontend::load(&dir.join("m.onnx"), &FrontendOptions { batch: Some(1), ..Default::default() }).is_ok();
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
