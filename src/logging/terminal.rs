//! Text from the network made safe to show on a terminal or in a text log
//! line: every control character is written as a visible escape.
//!
//! A condition message, a reason, an annotation, a kubelet's version, an API
//! server's error or a hook's output can hold ESC (and with it CSI and OSC
//! sequences that recolour, retitle, hide or rewrite what a terminal shows),
//! BEL, a carriage return that overwrites the start of the line, a line
//! feed that forges a whole line, or their 8-bit C1 forms (U+0080–U+009F,
//! which some terminals obey as CSI and OSC). kubectl answered the same
//! attack (CVE-2021-25743) in k8s.io/cli-runtime/pkg/printers/terminal.go,
//! writing ESC as `^[` and CR as `\r`, and cutting a table cell at its first
//! line break (tableprinter.go); this escapes every C0 and C1 control and
//! DEL, and cuts nothing, so what was sent can still be read.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every control character escaped: tab, line feed and carriage
/// return as `\t`, `\n`, `\r`; other C0 controls and DEL as `\x1b`; C1
/// controls as `\u{9b}`. The result is one line that cannot drive a
/// terminal. Text without control characters is returned as it is.
pub fn escape(text: &str) -> Cow<'_, str> {
    escape_except(text, None)
}

/// [`escape`], but line feeds stay: for text that is several lines on
/// purpose (an error with a list of problems), each of them escaped.
pub fn escape_lines(text: &str) -> Cow<'_, str> {
    escape_except(text, Some('\n'))
}

fn escape_except(text: &str, keep: Option<char>) -> Cow<'_, str> {
    let needs = |c: char| c.is_control() && Some(c) != keep;
    let Some(first) = text.find(needs) else {
        return Cow::Borrowed(text);
    };
    let mut out = String::with_capacity(text.len() + 8);
    out.push_str(&text[..first]);
    for c in text[first..].chars() {
        match c {
            c if !needs(c) => out.push(c),
            '\t' => out.push_str("\\t"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x80 => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_left_as_it_is() {
        for text in ["", "Kubelet stopped posting node status.", "名前 é ü ✓"] {
            assert!(matches!(escape(text), Cow::Borrowed(t) if t == text));
        }
    }

    #[test]
    fn every_control_character_is_visible() {
        // ESC starting a CSI (colour) and an OSC (window title, ended by BEL
        // and by ST), CR, LF, tab, NUL, DEL, and C1's CSI, OSC and NEL.
        let text = "a\x1b[31mred\x1b]0;owned\x07b\x1b]8;;http://x\x1b\\c\r\nd\te\0f\x7fg\u{9b}2Jh\u{9d}i\u{85}j";
        assert_eq!(
            escape(text),
            "a\\x1b[31mred\\x1b]0;owned\\x07b\\x1b]8;;http://x\\x1b\\c\\r\\nd\\te\\x00f\\x7fg\\u{9b}2Jh\\u{9d}i\\u{85}j"
        );
        let escaped = escape(text);
        assert!(!escaped.chars().any(char::is_control), "{escaped}");
    }

    #[test]
    fn lines_can_be_kept() {
        assert_eq!(
            escape_lines("problem: a\nproblem: b\x1b[2J\r"),
            "problem: a\nproblem: b\\x1b[2J\\r"
        );
    }
}
