//! Byte counts for people and the default host-memory budget, shared by the
//! compiler's reports and the runtime's pools.

/// Host budget when the machine's physical memory is unknown: 8 GiB.
pub const FALLBACK_HOST_MEMORY: u64 = 8 << 30;

/// A byte count for people: `512 B`, `3.06 MiB`, `14.90 GiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.2} {}", UNITS[unit])
}

/// The default host budget: half of [`machine_memory`].
pub fn default_host_memory() -> u64 {
    machine_memory() / 2
}

/// The machine's physical memory as `/proc/meminfo` reports it, or twice
/// [`FALLBACK_HOST_MEMORY`] when it cannot be read: the device limit of a run
/// whose plan has no budget, and the bound of what is read into memory.
pub fn machine_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| parse_mem_total(&text))
        .unwrap_or(2 * FALLBACK_HOST_MEMORY)
}

/// Bytes of the `MemTotal:` line of a `/proc/meminfo` text (given in kB).
fn parse_mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line.split_whitespace().skip(1);
    let kib: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => kib.checked_mul(1024),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_formatting_and_meminfo() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(16 << 30), "16.00 GiB");
        assert_eq!(parse_mem_total("MemTotal:       16384 kB\nMemFree: 1 kB\n"), Some(16 << 20));
        assert_eq!(parse_mem_total("MemFree: 1 kB\n"), None);
        assert!(default_host_memory() > 0);
        assert_eq!(default_host_memory(), machine_memory() / 2);
    }
}
