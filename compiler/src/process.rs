//! How the `lms` process ends: one line on stderr per error, the exit
//! statuses of [`exit`](crate::exit), quiet death on a closed stdout, and a
//! panic reported as an internal error (status 1) rather than a backtrace.

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
    fn a_panic_is_caught_and_gives_none() {
        assert_eq!(internal_on_panic(|| 3), Some(3));
        assert_eq!(internal_on_panic(|| -> u8 { panic!("boom") }), None);
        let _ = std::panic::take_hook();
    }
}
