//! Values and rules of command-line flags: the ranges numeric flags must lie
//! in (parsers for clap's `value_parser`), and flags that have no effect
//! without another. Names a flag gives that must match something in the model
//! (op types, scopes, dimensions, globs) are checked where the model is known,
//! and errors name close candidates ([`no_match`], [`close_candidates`]).

use crate::error::{Error, Result};

/// A count that must be at least 1 (`--batch`, `--limit`, `--steps`, ...).
pub fn count(text: &str) -> Result<usize, String> {
    let n: usize = text.trim().parse().map_err(|_| format!("'{text}' is not a whole number"))?;
    if n == 0 {
        return Err("must be at least 1".into());
    }
    Ok(n)
}

/// Most budgets `plan-curve` plans at: each is a whole planner run.
pub const MAX_BUDGET_STEPS: usize = 1000;

/// `plan-curve --budget-steps`: from 2 (the smallest budget and no limit) to
/// [`MAX_BUDGET_STEPS`].
pub fn budget_steps(text: &str) -> Result<usize, String> {
    match count(text)? {
        n if n < 2 => Err("must be at least 2 (the smallest budget and no limit)".into()),
        n if n > MAX_BUDGET_STEPS => Err(format!("must be at most {MAX_BUDGET_STEPS}")),
        n => Ok(n),
    }
}

/// A finite number above zero (`--lr`).
pub fn positive(text: &str) -> Result<f32, String> {
    let x: f32 = text.trim().parse().map_err(|_| format!("'{text}' is not a number"))?;
    if !(x.is_finite() && x > 0.0) {
        return Err("must be a finite number above 0".into());
    }
    Ok(x)
}

/// A number in [0, 1) (`--momentum`).
pub fn fraction(text: &str) -> Result<f32, String> {
    let x: f32 = text.trim().parse().map_err(|_| format!("'{text}' is not a number"))?;
    if !(0.0..1.0).contains(&x) {
        return Err("must be at least 0 and below 1".into());
    }
    Ok(x)
}

/// A byte size above zero (`--budget 16GiB`).
pub fn size(text: &str) -> Result<u64, String> {
    match crate::units::parse_bytes(text)? {
        0 => Err("must be above 0 bytes".into()),
        bytes => Ok(bytes),
    }
}

/// A byte size, zero allowed (`--host-budget 0`: no host memory, so the
/// planner only recomputes).
pub fn size_or_zero(text: &str) -> Result<u64, String> {
    crate::units::parse_bytes(text)
}

/// A named dimension `NAME=N` with N at least 1 (`--dim`).
pub fn dim(text: &str) -> Result<(String, usize), String> {
    let (name, value) = text.split_once('=').ok_or_else(|| format!("'{text}' is not NAME=N"))?;
    if name.is_empty() {
        return Err(format!("'{text}' names no dimension"));
    }
    Ok((name.to_string(), count(value).map_err(|e| format!("dimension '{name}': {e}"))?))
}

/// Fails when `flag` is given (`given`) but `needed` is not (`has_needed`):
/// the flag would have no effect.
pub fn needs(given: bool, flag: &str, has_needed: bool, needed: &str) -> Result<()> {
    if given && !has_needed {
        return Err(Error::Usage(format!("{flag} has no effect without {needed}")));
    }
    Ok(())
}

/// An error for `flag`'s value `name`, which matches no `what`, naming the
/// `close` candidates when there are any.
pub fn no_match(flag: &str, name: &str, what: &str, close: &[&str]) -> Error {
    let hint = if close.is_empty() {
        String::new()
    } else {
        format!(" (close: {})", close.iter().map(|c| format!("'{c}'")).collect::<Vec<_>>().join(", "))
    };
    Error::Usage(format!("{flag} '{name}' matches no {what}{hint}"))
}

/// Up to three of `known` closest to `name`, best first.
pub fn close_candidates<'a>(name: &str, known: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    closest(known, |k| similarity(name, k))
}

/// Up to three of `known` with the highest `score` of at least 0.5, best
/// first, ties by name.
pub fn closest<'a>(known: impl IntoIterator<Item = &'a str>, score: impl Fn(&str) -> f64) -> Vec<&'a str> {
    let mut scored: Vec<(f64, &str)> =
        known.into_iter().map(|k| (score(k), k)).filter(|&(score, _)| score >= 0.5).collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.dedup_by(|a, b| a.1 == b.1);
    scored.into_iter().take(3).map(|(_, k)| k).collect()
}

/// Normalised Levenshtein similarity ignoring case: 1 for equal names.
pub fn similarity(a: &str, b: &str) -> f64 {
    strsim::normalized_levenshtein(&a.to_lowercase(), &b.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_ranges() {
        assert_eq!(count("3"), Ok(3));
        assert_eq!(count("0"), Err("must be at least 1".into()));
        assert!(count("-1").is_err());
        assert_eq!(positive("0.5"), Ok(0.5));
        for bad in ["0", "-1", "nan", "inf"] {
            assert!(positive(bad).is_err(), "{bad}");
        }
        assert_eq!(fraction("0"), Ok(0.0));
        assert!(fraction("1").is_err() && fraction("7").is_err() && fraction("nan").is_err());
        assert!(size("0").is_err() && size("1KiB") == Ok(1024));
        assert_eq!(dim("seq=4"), Ok(("seq".into(), 4)));
        assert!(dim("seq=0").is_err() && dim("=3").is_err() && dim("seq").is_err());
        assert_eq!(budget_steps("2"), Ok(2));
        assert_eq!(budget_steps("1000"), Ok(1000));
        assert_eq!(budget_steps("1"), Err("must be at least 2 (the smallest budget and no limit)".into()));
        assert_eq!(budget_steps("1000000000"), Err("must be at most 1000".into()));
    }

    #[test]
    fn dependent_flags_and_candidates() {
        let err = needs(true, "--host-budget", false, "--budget").unwrap_err();
        assert_eq!(err.to_string(), "--host-budget has no effect without --budget");
        assert!(needs(false, "--host-budget", false, "--budget").is_ok());
        assert_eq!(close_candidates("Conv2", ["Conv", "Relu", "ConvTranspose"]), ["Conv"]);
        let close = close_candidates("Rellu", ["Relu", "Add"]);
        let err = no_match("--incl-types", "Rellu", "op type of the graph", &close);
        assert_eq!(err.to_string(), "--incl-types 'Rellu' matches no op type of the graph (close: 'Relu')");
    }
}
