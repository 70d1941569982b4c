//! How the `lms` process talks and ends: one line on stderr per error, the
//! exit statuses of [`exit`](crate::exit), stdout written so that a failed
//! write is an error (status 2), quiet death on a closed stdout, SIGINT
//! turned into a flag long work polls, and a panic reported as an internal
//! error (status 1) rather than a backtrace.

use crate::error::Error;
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

/// Restores the default action of SIGPIPE, which Rust programs ignore: when
/// the reader of stdout goes away (`lms inspect --ir | head -1`), lms ends at
/// once and quietly, as other Unix tools do, instead of failing on the write.
pub fn die_quietly_on_closed_stdout() {
    #[cfg(unix)]
    // SAFETY: called first thing in `main`, before any other thread exists;
    // setting a signal's disposition to its default has no other effect.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Writes `text` to standard output at once (unbuffered), so a line shows
/// as soon as it is printed, piped or not, with every control character
/// but the line ends escaped ([`escape`](lms_proto::escape::escape)): a
/// name from an input file printed in a table or summary cannot act on the
/// terminal. A failed write is [`Error::Stdout`] (status 2), never a panic;
/// Rust's own `stdout()` would hide some failures (a descriptor not open for
/// writing), so the bytes go to a duplicate of descriptor 1.
pub fn print(text: &str) -> Result<(), Error> {
    let text = terminal_safe(text);
    #[cfg(unix)]
    let mut out = {
        use std::os::fd::AsFd;
        std::fs::File::from(std::io::stdout().as_fd().try_clone_to_owned().map_err(Error::Stdout)?)
    };
    #[cfg(not(unix))]
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes()).and_then(|()| out.flush()).map_err(Error::Stdout)
}

/// `text` with each line's control characters escaped and its line ends kept.
fn terminal_safe(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.split('\n').any(|line| matches!(lms_proto::escape::escape(line), std::borrow::Cow::Owned(_))) {
        return std::borrow::Cow::Borrowed(text);
    }
    let lines: Vec<_> = text.split('\n').map(lms_proto::escape::escape).collect();
    std::borrow::Cow::Owned(lines.join("\n"))
}

/// Set by the first SIGINT once [`stop_on_interrupt`] is in force.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

/// From now on the first SIGINT (Ctrl-C) only sets the flag [`interrupted`]
/// reads, so long work ends at its next safe point and writes what it was
/// asked to keep; a second SIGINT ends lms at once, as by default.
pub fn stop_on_interrupt() {
    #[cfg(unix)]
    // SAFETY: the handler only stores to an atomic and resets the signal's
    // disposition, both async-signal-safe.
    unsafe {
        libc::signal(libc::SIGINT, on_interrupt as extern "C" fn(libc::c_int) as libc::sighandler_t);
    }
}

/// Whether SIGINT arrived since [`stop_on_interrupt`].
pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

#[cfg(unix)]
extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
    // SAFETY: `signal` is async-signal-safe; the next SIGINT takes its default action.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_DFL);
    }
}

/// Runs `f`; a panic inside it is reported as one line, "lms: internal
/// error: ...", and gives `None`.
pub fn internal_on_panic<T>(f: impl FnOnce() -> T) -> Option<T> {
    std::panic::set_hook(Box::new(|info| {
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "panic".into());
        let at = info.location().map(|l| format!(" at {}:{}", l.file(), l.line())).unwrap_or_default();
        eprintln!("lms: internal error: {}{at} (a bug in lms; please report it)", one_line(&message));
    }));
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok()
}

/// A multi-line message (such as clap's usage errors) as one line: its
/// non-empty lines joined by "; ", without the "error: " prefix, the usage
/// line and the pointer to `--help`, and control characters escaped
/// ([`escape`](lms_proto::escape::escape)), so names from the input can
/// neither split the line nor reach the terminal as control sequences.
pub fn one_line(message: &str) -> String {
    let lines: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(|l| l.strip_prefix("error: ").unwrap_or(l))
        .collect();
    lms_proto::escape::escape(&lines.join("; ")).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multi_line_messages_become_one_line() {
        let clap = "error: invalid value '0' for '--batch <BATCH>': must be at least 1\n\nFor more information, try '--help'.\n";
        assert_eq!(one_line(clap), "invalid value '0' for '--batch <BATCH>': must be at least 1");
        let tip = "error: unexpected argument '--lrr' found\n\n  tip: a similar argument exists: '--lr'\n\nUsage: lms compile [OPTIONS]\n";
        assert_eq!(one_line(tip), "unexpected argument '--lrr' found; tip: a similar argument exists: '--lr'");
        assert_eq!(one_line("node 'evil\x1b[2J\r' (Cos): unsupported\n"), "node 'evil\\x1b[2J\\r' (Cos): unsupported");
    }

    #[test]
    fn printed_text_keeps_its_line_ends_and_escapes_the_rest() {
        assert!(matches!(terminal_safe("a table\nof rows\n"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(terminal_safe("peak at 'evil\x1b[2J'\r\nnext\n"), "peak at 'evil\\x1b[2J'\\r\nnext\n");
    }

    #[test]
    fn a_panic_is_caught_and_gives_none() {
        assert_eq!(internal_on_panic(|| 3), Some(3));
        assert_eq!(internal_on_panic(|| -> u8 { panic!("boom") }), None);
        let _ = std::panic::take_hook();
    }
}
