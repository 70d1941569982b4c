//! Name globs for flags such as `--trainable`: `*` matches any run of
//! characters (`/` and `.` included), `?` one character, `[...]` a class.
//! Patterns compile to finite automata (globset), so matching takes time
//! linear in the name whatever the pattern: no backtracking.

use crate::error::{Error, Result};
use crate::flags;
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// The globs one flag gave.
#[derive(Clone, Debug)]
pub struct Globs {
    /// The flag, for errors (`--trainable`).
    flag: String,
    patterns: Vec<String>,
    set: GlobSet,
}

impl Globs {
    /// Compiles `patterns`, given by `flag`; an invalid pattern is an error
    /// naming the flag.
    pub fn new(flag: &str, patterns: &[String]) -> Result<Globs> {
        let mut set = GlobSetBuilder::new();
        for p in patterns {
            let glob = GlobBuilder::new(p)
                .literal_separator(false)
                .build()
                .map_err(|e| Error::Usage(format!("{flag} '{p}' is not a glob: {}", e.kind())))?;
            set.add(glob);
        }
        let set = set.build().map_err(|e| Error::Usage(format!("{flag}: {e}")))?;
        Ok(Globs { flag: flag.to_string(), patterns: patterns.to_vec(), set })
    }

    /// No pattern was given.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Whether `name` matches any pattern.
    pub fn matches(&self, name: &str) -> bool {
        self.set.is_match(name)
    }

    /// Fails naming the first pattern that matches none of `names` (what
    /// they are: `what`), with the closest names.
    pub fn require_each_matches(&self, what: &str, names: &[&str]) -> Result<()> {
        let mut hits = vec![false; self.patterns.len()];
        for name in names {
            for i in self.set.matches(name) {
                hits[i] = true;
            }
        }
        match hits.iter().position(|hit| !hit) {
            Some(i) => {
                let pattern = &self.patterns[i];
                let close = flags::closest(names.iter().copied(), |name| resemblance(pattern, name));
                Err(flags::no_match(&self.flag, pattern, what, &close))
            }
            None => Ok(()),
        }
    }
}

/// How much `name` resembles what `pattern` asks for: its start against the
/// pattern's literal start (`conv9.*` against `conv1.`), or the whole name
/// against the pattern's literal characters when it starts with a wildcard.
fn resemblance(pattern: &str, name: &str) -> f64 {
    let is_meta = |c: char| matches!(c, '*' | '?' | '[' | ']' | '{' | '}');
    let literal: String = pattern.chars().take_while(|&c| !is_meta(c)).collect();
    if literal.is_empty() {
        let text: String = pattern.chars().filter(|&c| !is_meta(c)).collect();
        return flags::similarity(&text, name);
    }
    let start: String = name.chars().take(literal.chars().count()).collect();
    flags::similarity(&literal, &start)
}

#[cfg(test)]
mod tests {
    use super::Globs;

    fn globs(patterns: &[&str]) -> Globs {
        Globs::new("--trainable", &patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn stars_match_any_run_including_separators() {
        assert!(globs(&["*"]).matches("conv1/weight"));
        assert!(globs(&["conv*"]).matches("conv1.weight"));
        assert!(globs(&["*.bias"]).matches("fc.bias") && !globs(&["*.bias"]).matches("fc.weight"));
        assert!(globs(&["a*b*c"]).matches("axxbyyc") && !globs(&["a*b*c"]).matches("axxbyy"));
    }

    #[test]
    fn a_pathological_pattern_ends_at_once() {
        // A backtracking matcher tries C(10 000, 10) splits here and never ends.
        let name = "a".repeat(10_000);
        assert!(!globs(&["**********Z"]).matches(&name));
    }

    #[test]
    fn patterns_that_match_nothing_are_named_with_candidates() {
        let err = globs(&["fc*", "conv9.*"]).require_each_matches("parameter", &["fc.weight", "conv1.weight"]);
        let err = err.unwrap_err().to_string();
        assert_eq!(err, "--trainable 'conv9.*' matches no parameter (close: 'conv1.weight')");
        let err = Globs::new("--trainable", &["[".into()]).unwrap_err().to_string();
        assert!(err.starts_with("--trainable '[' is not a glob"), "{err}");
    }
}
