//! The fuzz loop: mutate a seed, run the target, and catch what must never happen — a
//! panic, an input that runs longer than the per-input limit (a watchdog ends the process
//! when one runs past [`HANG_FACTOR`] times the limit: a hang), or an execution holding more
//! than 1 GiB (with
//! [`super::alloc::CountingAlloc`] installed). Every finding's input is written to a file
//! in the output folder; a finding's message is short and names that file, never the
//! input's bytes. The run stops after [`MAX_FINDINGS`].

use super::alloc;
use super::mutate::Rng;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Makes a new input from a seed; the other seeds are there for splicing.
pub type Mutator = fn(&mut Rng, &[u8], &[Vec<u8>]) -> Vec<u8>;

/// Runs one input; true when it got past decoding and validation.
pub type Run = Box<dyn Fn(&[u8]) -> bool>;

/// Something to fuzz: seed inputs, a mutator, and the code under test, which returns
/// whether the input got past decoding and validation (an accepted input).
pub struct Target {
    /// Short name, used in file names and reports.
    pub name: &'static str,
    /// Valid inputs that mutation starts from.
    pub seeds: Vec<Vec<u8>>,
    /// Makes a new input from a seed.
    pub mutate: Mutator,
    /// Runs one input.
    pub run: Run,
}

/// How long to fuzz and where findings go.
#[derive(Clone, Debug)]
pub struct Options {
    /// Stop after this many executions.
    pub executions: u64,
    /// Stop after this much time, whatever the count.
    pub time: Duration,
    /// An input running longer than this is a hang.
    pub per_input: Duration,
    /// Seed of the mutation generator (the same seed gives the same inputs).
    pub seed: u64,
    /// Folder for the inputs of findings.
    pub out: PathBuf,
    /// Print a progress line to stderr every this many executions (0: never).
    pub progress_every: u64,
}

/// What went wrong on one input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FindingKind {
    /// The target panicked.
    Panic,
    /// The target took longer than the per-input limit.
    Slow,
    /// The target held more than [`alloc::LIMIT`] bytes.
    Memory,
}

/// One finding: its kind, what happened and the file holding its input.
#[derive(Clone, Debug)]
pub struct Finding {
    /// What went wrong.
    pub kind: FindingKind,
    /// The panic message, time or bytes.
    pub message: String,
    /// The input, written to the output folder.
    pub input: PathBuf,
}

/// The result of a fuzz run.
#[derive(Clone, Debug, Default)]
pub struct Summary {
    /// Inputs run.
    pub executions: u64,
    /// Inputs that got past decoding and validation.
    pub accepted: u64,
    /// Wall time of the run.
    pub elapsed: Duration,
    /// The longest single execution.
    pub slowest: Duration,
    /// Most bytes live during any execution.
    pub peak_bytes: usize,
    /// Everything that went wrong.
    pub findings: Vec<Finding>,
}

/// An input running this many times the per-input limit is a hang: the watchdog writes it
/// out and ends the process.
pub const HANG_FACTOR: u32 = 10;

/// The run stops after this many findings: a target that fails every input would
/// otherwise write one file per execution.
pub const MAX_FINDINGS: usize = 100;

/// Characters of a panic message kept in a finding (the input itself is in its file).
const MESSAGE_CHARS: usize = 400;

/// The input being run, for the watchdog and the allocator's hard limit.
static CURRENT: Mutex<Vec<u8>> = Mutex::new(Vec::new());
/// Where the input goes when the allocator refuses an allocation (opened before the run).
static MEMORY_FILE: Mutex<Option<File>> = Mutex::new(None);
/// The start of the clock in which input start times are kept.
static EPOCH: OnceLock<Instant> = OnceLock::new();
/// The last panic's message and place, recorded by the run's panic hook.
static LAST_PANIC: Mutex<Option<String>> = Mutex::new(None);

/// Writes the input being run to the memory-finding file without allocating; called by the
/// allocator just before it refuses an allocation (and the process aborts).
pub fn save_current_input() {
    if let (Ok(input), Ok(file)) = (CURRENT.try_lock(), MEMORY_FILE.try_lock()) {
        if let Some(file) = file.as_ref() {
            let _ = file.set_len(0);
            let _ = file.write_all_at(&input, 0);
        }
    }
}

fn write_finding(out: &Path, target: &str, kind: &str, n: usize, input: &[u8]) -> PathBuf {
    let path = out.join(format!("{target}-{kind}-{n}.bin"));
    std::fs::write(&path, input).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
    path
}

/// Starts a thread that ends the process (exit status 3) when one input runs longer than
/// `limit`, after writing the input out; it stops when `done` is set.
fn watchdog(started: Arc<AtomicU64>, done: Arc<AtomicBool>, limit: Duration, out: PathBuf, target: &'static str) {
    std::thread::spawn(move || {
        while !done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
            let at = started.load(Ordering::Relaxed);
            let now = clock_ms();
            if at != 0 && now.saturating_sub(at) > limit.as_millis() as u64 {
                let input = CURRENT.lock().map(|i| i.clone()).unwrap_or_default();
                let path = write_finding(&out, target, "hang", 0, &input);
                eprintln!("lms-fuzz: {target}: an input ran past {limit:?}; written to {}", path.display());
                std::process::exit(3);
            }
        }
    });
}

/// Milliseconds on the run's clock, plus one (0 means "no input running").
fn clock_ms() -> u64 {
    EPOCH.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// Fuzzes `target` until `options.executions` or `options.time` is reached.
pub fn run(target: &Target, options: &Options) -> Summary {
    assert!(!target.seeds.is_empty(), "{}: no seeds", target.name);
    std::fs::create_dir_all(&options.out).unwrap_or_else(|e| panic!("{}: {e}", options.out.display()));
    let memory_path = options.out.join(format!("{}-memory.bin", target.name));
    let file = File::create(&memory_path).unwrap_or_else(|e| panic!("{}: {e}", memory_path.display()));
    *MEMORY_FILE.lock().expect("not poisoned") = Some(file);
    let (started, done) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicBool::new(false)));
    watchdog(started.clone(), done.clone(), options.per_input * HANG_FACTOR, options.out.clone(), target.name);
    let previous_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|info| {
        if let Ok(mut last) = LAST_PANIC.lock() {
            *last = Some(info.to_string().replace('\n', " ").chars().take(MESSAGE_CHARS).collect());
        }
    }));
    let mut rng = Rng::new(options.seed);
    let mut summary = Summary::default();
    let start = Instant::now();
    while summary.executions < options.executions
        && start.elapsed() < options.time
        && summary.findings.len() < MAX_FINDINGS
    {
        let seed = &target.seeds[rng.below(target.seeds.len())];
        let input = (target.mutate)(&mut rng, seed, &target.seeds);
        {
            let mut current = CURRENT.lock().expect("no panic while holding the input");
            current.clear();
            current.extend_from_slice(&input);
        }
        alloc::reset_peak();
        let t0 = Instant::now();
        started.store(clock_ms(), Ordering::Relaxed);
        let outcome = catch_unwind(AssertUnwindSafe(|| (target.run)(&input)));
        started.store(0, Ordering::Relaxed);
        let took = t0.elapsed();
        summary.executions += 1;
        summary.slowest = summary.slowest.max(took);
        summary.peak_bytes = summary.peak_bytes.max(alloc::peak());
        let n = summary.findings.len();
        let mut found = |kind: FindingKind, label: &str, message: String| {
            let input = write_finding(&options.out, target.name, label, n, &input);
            summary.findings.push(Finding { kind, message, input });
        };
        match outcome {
            Ok(accepted) => summary.accepted += u64::from(accepted),
            Err(_) => {
                let message = LAST_PANIC.lock().ok().and_then(|mut m| m.take()).unwrap_or_default();
                found(FindingKind::Panic, "panic", message);
            }
        }
        if took > options.per_input {
            found(FindingKind::Slow, "slow", format!("took {took:?}"));
        }
        if alloc::peak() > alloc::LIMIT {
            found(FindingKind::Memory, "memory", format!("{} bytes live", alloc::peak()));
        }
        if options.progress_every > 0 && summary.executions % options.progress_every == 0 {
            eprintln!(
                "{}: {} executions, {} accepted, {} findings, {:.0} s",
                target.name,
                summary.executions,
                summary.accepted,
                summary.findings.len(),
                start.elapsed().as_secs_f64()
            );
        }
    }
    summary.elapsed = start.elapsed();
    done.store(true, Ordering::Relaxed);
    std::panic::set_hook(previous_hook);
    *MEMORY_FILE.lock().expect("not poisoned") = None;
    let _ = std::fs::remove_file(&memory_path);
    summary
}
