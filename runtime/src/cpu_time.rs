//! The calling thread's CPU time: the time a step or a node took on a core,
//! less the time the system ran other work on it. On a machine shared with
//! other work a step's wall time says how busy the machine was; the CPU
//! backend runs every kernel and copy on the calling thread, so its CPU time
//! is what the step takes on a quiet machine (page faults included).

/// Seconds of CPU time the calling thread has used (`CLOCK_THREAD_CPUTIME_ID`);
/// 0 where the system cannot tell.
pub fn thread_cpu_seconds() -> f64 {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime only fills the timespec it is given.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if status != 0 {
        return 0.0;
    }
    now.tv_sec as f64 + now.tv_nsec as f64 * 1e-9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_advances_the_clock_and_sleep_does_not() {
        let start = thread_cpu_seconds();
        let mut x = 0u64;
        while thread_cpu_seconds() - start < 0.01 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let worked = thread_cpu_seconds();
        assert!(worked - start >= 0.01);
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(thread_cpu_seconds() - worked < 0.04, "sleeping is not CPU time");
    }
}
