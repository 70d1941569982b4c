//! Name globs for flags such as `--trainable`: `*` matches any run of
//! characters (`/` and `.` included), `?` one character, `[...]` a class
//! (ranges `a-z`, negated by a leading `!` or `^`), `{a,b}` either
//! alternative, `\` escapes the next character. A pattern is matched by
//! simulating its automaton over the set of positions it can be at, so
//! matching takes time linear in the name (times the pattern's length)
//! whatever the pattern: no backtracking.

use crate::error::{Error, Result};
use crate::flags;

/// Most alternatives one pattern's braces may expand to.
const MAX_ALTERNATIVES: usize = 256;

/// The globs one flag gave.
#[derive(Clone, Debug)]
pub struct Globs {
    /// The flag, for errors (`--trainable`).
    flag: String,
    patterns: Vec<String>,
    /// Each pattern's alternatives (its braces expanded), compiled.
    compiled: Vec<Vec<Vec<Token>>>,
}

/// One step of a compiled pattern.
#[derive(Clone, Debug, PartialEq)]
enum Token {
    /// Any run of characters.
    Star,
    /// Any one character.
    Any,
    /// One character in (or, negated, not in) the inclusive ranges.
    Class {
        ranges: Vec<(char, char)>,
        negated: bool,
    },
    Literal(char),
}

impl Globs {
    /// Compiles `patterns`, given by `flag`; an invalid pattern is an error
    /// naming the flag.
    pub fn new(flag: &str, patterns: &[String]) -> Result<Globs> {
        let compiled = patterns
            .iter()
            .map(|p| {
                let invalid = |why: &str| Error::Usage(format!("{flag} '{p}' is not a glob: {why}"));
                let alternatives = expand(p).map_err(invalid)?;
                alternatives.iter().map(|a| compile(a).map_err(invalid)).collect::<Result<Vec<_>>>()
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Globs { flag: flag.to_string(), patterns: patterns.to_vec(), compiled })
    }

    /// No pattern was given.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// Whether `name` matches any pattern.
    pub fn matches(&self, name: &str) -> bool {
        self.compiled.iter().any(|alternatives| alternatives.iter().any(|tokens| matches(tokens, name)))
    }

    /// Fails naming the first pattern that matches none of `names` (what
    /// they are: `what`), with the closest names.
    pub fn require_each_matches(&self, what: &str, names: &[&str]) -> Result<()> {
        let unmatched = self
            .compiled
            .iter()
            .position(|alternatives| !names.iter().any(|name| alternatives.iter().any(|tokens| matches(tokens, name))));
        match unmatched {
            Some(i) => {
                let pattern = &self.patterns[i];
                let close = flags::closest(names.iter().copied(), |name| resemblance(pattern, name));
                Err(flags::no_match(&self.flag, pattern, what, &close))
            }
            None => Ok(()),
        }
    }
}

/// The brace-free patterns `pattern` stands for: `a{b,c}d` is `abd` and
/// `acd`; braces nest; an escaped brace or comma is literal.
fn expand(pattern: &str) -> std::result::Result<Vec<String>, &'static str> {
    let chars: Vec<char> = pattern.chars().collect();
    // The first top-level `{` and its matching `}`, with the top-level commas between.
    let (mut depth, mut open, mut commas) = (0usize, None, Vec::new());
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 1,
            '{' => {
                depth += 1;
                open.get_or_insert(i);
            }
            ',' if depth == 1 => commas.push(i),
            '}' if depth == 0 => return Err("a '}' closes no '{'"),
            '}' => {
                depth -= 1;
                if depth == 0 {
                    let start = open.expect("an open brace");
                    let (prefix, suffix): (String, String) =
                        (chars[..start].iter().collect(), chars[i + 1..].iter().collect());
                    let mut bounds = vec![start];
                    bounds.extend(&commas);
                    bounds.push(i);
                    let mut out = Vec::new();
                    for pair in bounds.windows(2) {
                        let middle: String = chars[pair[0] + 1..pair[1]].iter().collect();
                        for rest in expand(&format!("{middle}{suffix}"))? {
                            out.push(format!("{prefix}{rest}"));
                            if out.len() > MAX_ALTERNATIVES {
                                return Err("its braces expand to too many alternatives");
                            }
                        }
                    }
                    return Ok(out);
                }
            }
            _ => {}
        }
        i += 1;
    }
    if depth > 0 {
        return Err("a '{' is never closed");
    }
    Ok(vec![pattern.to_string()])
}

/// The tokens of a brace-free pattern.
fn compile(pattern: &str) -> std::result::Result<Vec<Token>, &'static str> {
    let mut tokens = Vec::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        let token = match c {
            '*' => {
                // A run of stars is one star.
                if tokens.last() == Some(&Token::Star) {
                    continue;
                }
                Token::Star
            }
            '?' => Token::Any,
            '\\' => Token::Literal(chars.next().ok_or("it ends with an escape")?),
            '[' => {
                let negated = chars.next_if(|&c| c == '!' || c == '^').is_some();
                let mut ranges = Vec::new();
                loop {
                    // A ']' first in the class is literal.
                    let lo = match chars.next().ok_or("a '[' is never closed")? {
                        ']' if !ranges.is_empty() => break,
                        '\\' => chars.next().ok_or("it ends with an escape")?,
                        c => c,
                    };
                    let hi = if chars.peek() == Some(&'-') && chars.clone().nth(1).is_some_and(|c| c != ']') {
                        chars.next();
                        match chars.next().ok_or("a '[' is never closed")? {
                            '\\' => chars.next().ok_or("it ends with an escape")?,
                            c => c,
                        }
                    } else {
                        lo
                    };
                    if hi < lo {
                        return Err("a class range runs backwards");
                    }
                    ranges.push((lo, hi));
                }
                Token::Class { ranges, negated }
            }
            c => Token::Literal(c),
        };
        tokens.push(token);
    }
    Ok(tokens)
}

/// Whether `name` matches `tokens` as a whole: the set of token positions
/// the pattern can be at is advanced by each character, a star keeping its
/// position and also letting the next token start.
fn matches(tokens: &[Token], name: &str) -> bool {
    let mut at = vec![false; tokens.len() + 1];
    let mut next = at.clone();
    let close = |set: &mut [bool]| {
        for i in 0..tokens.len() {
            if set[i] && tokens[i] == Token::Star {
                set[i + 1] = true;
            }
        }
    };
    at[0] = true;
    close(&mut at);
    for c in name.chars() {
        next.iter_mut().for_each(|b| *b = false);
        for (i, token) in tokens.iter().enumerate().filter(|&(i, _)| at[i]) {
            match token {
                Token::Star => next[i] = true,
                Token::Any => next[i + 1] = true,
                Token::Literal(l) => next[i + 1] |= *l == c,
                Token::Class { ranges, negated } => {
                    next[i + 1] |= ranges.iter().any(|&(lo, hi)| lo <= c && c <= hi) != *negated;
                }
            }
        }
        close(&mut next);
        std::mem::swap(&mut at, &mut next);
        if !at.iter().any(|&b| b) {
            return false;
        }
    }
    at[tokens.len()]
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
        for bad in ["{a,b", "a}", "x\\", "[z-a]"] {
            assert!(Globs::new("--frozen", &[bad.into()]).is_err(), "{bad} compiled");
        }
    }

    #[test]
    fn classes_alternatives_and_escapes() {
        assert!(globs(&["conv[0-9].w"]).matches("conv3.w") && !globs(&["conv[0-9].w"]).matches("convx.w"));
        assert!(globs(&["conv[!0-9]*"]).matches("convx") && !globs(&["conv[!0-9]*"]).matches("conv1"));
        assert!(globs(&["[]x]"]).matches("]") && globs(&["[a-]"]).matches("-"));
        assert!(globs(&["*.{weight,bias}"]).matches("fc.bias") && !globs(&["*.{weight,bias}"]).matches("fc.scale"));
        assert!(globs(&["{a,b{c,d}}e"]).matches("bde") && globs(&["{a,b{c,d}}e"]).matches("ae"));
        assert!(globs(&["a\\*b"]).matches("a*b") && !globs(&["a\\*b"]).matches("axb"));
        assert!(globs(&["a?c"]).matches("abc") && !globs(&["a?c"]).matches("ac"));
        assert!(globs(&[""]).matches("") && !globs(&[""]).matches("x"));
        assert!(globs(&["ü*"]).matches("über"), "characters, not bytes");
        let many = "{a,b}".repeat(9);
        assert!(Globs::new("--frozen", &[many]).is_err(), "512 alternatives");
    }
}
