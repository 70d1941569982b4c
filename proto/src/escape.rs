//! Names from input files as they appear in messages: a node, tensor or op-type name, an
//! external-data location or a path is user data, and a control character in it (a
//! newline, an ESC starting a terminal sequence) must neither split the one error line
//! nor act on the user's terminal. [`escape`] is the one function every message uses.

use std::borrow::Cow;
use std::fmt;

/// `text` with every control or invisible formatting character written as an escape —
/// `\n`, `\r`, `\t`, `\x1b` for other ASCII controls, `\u{202e}` beyond — and everything
/// else as it is. The result holds no control character, so escaping it again changes
/// nothing, and a whole message line can be passed through it a second time.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_ascii_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if needs_escape(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// A name shown through [`escape`] by `Display`, for format strings.
#[derive(Clone, Copy, Debug)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&escape(self.0))
    }
}

/// Control characters (C0, DEL, C1) and the invisible characters that reorder or hide
/// text: bidirectional overrides and isolates, zero-width characters, the soft hyphen
/// and the byte-order mark, and the line and paragraph separators.
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{ad}'
                | '\u{61c}'
                | '\u{180e}'
                | '\u{200b}'..='\u{200f}'
                | '\u{2028}'..='\u{202e}'
                | '\u{2060}'..='\u{2069}'
                | '\u{feff}'
        )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_become_escapes_and_the_rest_stays() {
        assert_eq!(escape("evil\n\x1b[2J"), "evil\\n\\x1b[2J");
        assert_eq!(escape("a\tb\rc\u{7f}\u{85}"), "a\\tb\\rc\\x7f\\u{85}");
        assert_eq!(escape("flip\u{202e}gnp.exe"), "flip\\u{202e}gnp.exe");
        assert!(matches!(escape("block.conv1/grad 層 'q'\\"), Cow::Borrowed(_)));
        assert_eq!(Escaped("x\ny").to_string(), "x\\ny");
    }

    #[test]
    fn escaping_twice_is_escaping_once() {
        for text in ["evil\n\x1b[2J", "\u{0}\u{1f}\u{9f}\u{2066}", "plain"] {
            let once = escape(text).into_owned();
            assert!(!once.chars().any(needs_escape), "{once:?}");
            assert_eq!(escape(&once), once);
        }
    }
}
