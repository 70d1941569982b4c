//! Human-readable byte sizes: formatting and parsing.

/// Formats a byte count with binary units (shared with the runtime's reports):
/// `512 B`, `1.50 KiB`, `3.06 MiB`.
pub use lms_proto::units::format_bytes;

/// Two byte counts for people, side by side: as [`format_bytes`] writes
/// them, each with its exact bytes when the two would read the same
/// (`2.15 MiB (2252800 B)` beside `2.15 MiB (2252801 B)`).
pub fn format_bytes_pair(a: u64, b: u64) -> (String, String) {
    let (x, y) = (format_bytes(a), format_bytes(b));
    if x == y && a != b {
        (format!("{x} ({a} B)"), format!("{y} ({b} B)"))
    } else {
        (x, y)
    }
}

/// Parses a byte size: a number with an optional unit, binary (`KiB`, `MiB`,
/// `GiB`, `TiB`) or decimal (`KB`, `MB`, `GB`, `TB`), or plain bytes (`B`).
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let value: f64 = number.parse().map_err(|_| format!("'{text}' is not a size (try 16GiB)"))?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "kib" | "k" => 1024.0,
        "mib" | "m" => 1024.0 * 1024.0,
        "gib" | "g" => 1024.0 * 1024.0 * 1024.0,
        "tib" | "t" => 1024f64.powi(4),
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        other => return Err(format!("unknown size unit '{other}' in '{text}'")),
    };
    let bytes = value * scale;
    if !bytes.is_finite() || bytes > u64::MAX as f64 {
        return Err(format!("'{text}' is too large"));
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_bytes("16GiB"), Ok(16 << 30));
        assert_eq!(parse_bytes("1.5 KiB"), Ok(1536));
        assert_eq!(parse_bytes("1000"), Ok(1000));
        assert_eq!(parse_bytes("2GB"), Ok(2_000_000_000));
        assert!(parse_bytes("lots").is_err());
        assert!(parse_bytes("3 parsecs").is_err());
    }

    #[test]
    fn a_pair_that_reads_the_same_shows_its_bytes() {
        assert_eq!(format_bytes_pair(2252800, 2252801), ("2.15 MiB (2252800 B)".into(), "2.15 MiB (2252801 B)".into()));
        assert_eq!(format_bytes_pair(2 << 20, 3 << 20), ("2.00 MiB".into(), "3.00 MiB".into()));
        assert_eq!(format_bytes_pair(512, 512), ("512 B".into(), "512 B".into()));
    }

    #[test]
    fn formats_binary_units() {
        assert_eq!(format_bytes(0), "0 B");
        assert_eq!(format_bytes(1023), "1023 B");
        assert_eq!(format_bytes(1536), "1.50 KiB");
        assert_eq!(format_bytes(16 << 30), "16.00 GiB");
    }
}
