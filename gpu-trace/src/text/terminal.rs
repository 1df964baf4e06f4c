//! Text for a terminal. Everything human-readable gpu-trace writes passes
//! through `TerminalLines`, which escapes what could move the cursor, set a
//! window title, hide text or reorder it: C0 and C1 controls, DEL, and the
//! Unicode bidi and format characters (an RLO in a cgroup name would make
//! a fix read backwards).

use std::{
    borrow::Cow,
    fmt,
    io::{self, Write},
};

use anstyle::Style;
use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};

/// Characters that are not controls yet change how a line is displayed,
/// or show nothing at all: bidi overrides reorder it, tag characters and
/// variation selectors carry a hidden message inside a name that looks
/// harmless, a Hangul filler makes a name look blank. That is every format
/// character (Unicode's category Cf, from unicode-properties, so it follows
/// new Unicode versions), the line and paragraph separators, and the rest of
/// Unicode's Default_Ignorable_Code_Point set, which is not Cf.
pub fn is_invisible_format(c: char) -> bool {
    if c.is_ascii() {
        return false;
    }
    matches!(
        c.general_category(),
        GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    ) || matches!(c,
        // Combining grapheme joiner, Hangul fillers, Khmer inherent vowels.
        '\u{34f}' | '\u{115f}' | '\u{1160}' | '\u{17b4}' | '\u{17b5}' | '\u{3164}' | '\u{ffa0}'
        // Variation selectors: Mongolian, then the two blocks.
        | '\u{180b}'..='\u{180d}' | '\u{180f}'
        | '\u{fe00}'..='\u{fe0f}'
        | '\u{e0100}'..='\u{e01ef}'
        // Unassigned, and ignorable whatever they become.
        | '\u{2065}' | '\u{fff0}'..='\u{fff8}' | '\u{e0000}'..='\u{e0fff}')
}

/// What `escape` rewrites.
pub fn needs_escape(c: char) -> bool {
    c.is_control() || is_invisible_format(c)
}

/// `text` with every control and format character written as an escape
/// (`\n`, `\t`, `\u{1b}`, `\u{202e}`): one line, shown as it is stored.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if needs_escape(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// Bytes from another process (a path, a command name) as text: valid
/// UTF-8 as it is, invalid bytes as `\xNN`, controls escaped.
pub fn printable(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(&escape(chunk.valid()));
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// A writer of human text, line by line: each line is escaped whole before
/// it is written, so no field of it can reach the terminal raw.
pub struct TerminalLines<'a, W: Write> {
    out: &'a mut W,
    /// Colour the styled parts (text/style.rs decides).
    paint: bool,
}

impl<'a, W: Write> TerminalLines<'a, W> {
    pub fn new(out: &'a mut W) -> Self {
        Self { out, paint: false }
    }

    /// Styled parts get their colour (`parts`); plain lines are the same.
    pub fn painted(out: &'a mut W, paint: bool) -> Self {
        Self { out, paint }
    }

    /// One line made of parts, each escaped on its own; a styled part is
    /// wrapped in its colour and a reset when painting. The escaping comes
    /// first, so nothing inside a part can end or forge a colour.
    pub fn parts(&mut self, parts: &[(Option<Style>, &str)]) -> io::Result<()> {
        for (style, text) in parts {
            let text = escape(text);
            match style {
                Some(style) if self.paint => {
                    write!(self.out, "{}{text}{}", style.render(), style.render_reset())?
                }
                _ => self.out.write_all(text.as_bytes())?,
            }
        }
        self.out.write_all(b"\n")
    }

    /// Writes one line (any newline inside it is escaped) and a newline.
    pub fn line(&mut self, text: fmt::Arguments<'_>) -> io::Result<()> {
        let text = match text.as_str() {
            Some(fixed) => Cow::Borrowed(fixed),
            None => Cow::Owned(text.to_string()),
        };
        self.out.write_all(escape(&text).as_bytes())?;
        self.out.write_all(b"\n")
    }

    pub fn blank(&mut self) -> io::Result<()> {
        self.out.write_all(b"\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hostile text: escape sequences (CSI, OSC title), bidi overrides,
    /// line and paragraph separators, DEL and a C1 CSI.
    const HOSTILE: &str =
        "a\u{1b}[2J\u{1b}]0;pwned\u{7}b\u{202e}c\u{2066}d\u{2028}e\u{7f}f\u{9b}g\rh\ni";

    fn raw_controls(text: &str) -> Vec<char> {
        text.chars().filter(|&c| needs_escape(c)).collect()
    }

    #[test]
    fn escapes_controls_c1_del_and_bidi() {
        let out = escape(HOSTILE);
        assert!(raw_controls(&out).is_empty(), "{out:?}");
        assert_eq!(
            out,
            "a\\u{1b}[2J\\u{1b}]0;pwned\\u{7}b\\u{202e}c\\u{2066}d\\u{2028}e\\u{7f}f\\u{9b}g\\rh\\ni"
        );
        assert!(matches!(escape("/dev/nvidia-uvm"), Cow::Borrowed(_)));
        // A tag-character message and a variation selector hidden in a name.
        assert_eq!(
            escape("ok\u{e0072}\u{e006d}x\u{fe0f}"),
            "ok\\u{e0072}\\u{e006d}x\\u{fe0f}"
        );
        assert_eq!(escape("ünïcödé ok"), "ünïcödé ok");
    }

    #[test]
    fn escapes_every_character_that_shows_nothing() {
        // Format and default-ignorable characters: most show nothing (a name
        // that looks blank, a message hidden inside one); the rest join or
        // reorder the text around them.
        let invisible = [
            '\u{ad}',
            '\u{34f}',
            '\u{600}',
            '\u{6dd}',
            '\u{70f}',
            '\u{8e2}',
            '\u{115f}',
            '\u{1160}',
            '\u{17b4}',
            '\u{180e}',
            '\u{180f}',
            '\u{2065}',
            '\u{3164}',
            '\u{ffa0}',
            '\u{fff9}',
            '\u{110bd}',
            '\u{13430}',
            '\u{1bca0}',
            '\u{1d173}',
            '\u{e0001}',
            '\u{e01ef}',
            '\u{e0fff}',
        ];
        for c in invisible {
            let name = format!("gpu{c}0");
            let want = format!("gpu{}0", c.escape_default());
            assert_eq!(escape(&name), want, "U+{:04X}", c as u32);
        }
        // Visible text of other scripts is left as it is.
        for visible in ["한국어", "ünïcödé", "数据中心", "عربي", "🦀 gpu", "Ωμέγα"]
        {
            assert!(matches!(escape(visible), Cow::Borrowed(_)), "{visible}");
        }
    }

    #[test]
    fn bytes_keep_invalid_utf8_visible() {
        assert_eq!(printable(b"/x\ty\xff\x1b"), "/x\\ty\\xff\\u{1b}");
    }

    #[test]
    fn colour_wraps_escaped_parts_and_only_when_painting() {
        let style = crate::text::style::DENIED;
        let parts = [(None, "pid 1 "), (Some(style), HOSTILE), (None, " end")];
        let mut plain = Vec::new();
        TerminalLines::new(&mut plain).parts(&parts).expect("write");
        let plain = String::from_utf8(plain).expect("UTF-8");
        assert!(!plain.contains('\u{1b}'), "{plain:?}");
        assert_eq!(plain, format!("pid 1 {} end\n", escape(HOSTILE)));

        let mut painted = Vec::new();
        TerminalLines::painted(&mut painted, true)
            .parts(&parts)
            .expect("write");
        let painted = String::from_utf8(painted).expect("UTF-8");
        // Our two sequences around the escaped text, and no other ESC at all.
        let want = format!(
            "pid 1 {}{}{} end\n",
            style.render(),
            escape(HOSTILE),
            style.render_reset()
        );
        assert_eq!(painted, want);
        let ours = painted
            .replace(&style.render().to_string(), "")
            .replace(&style.render_reset().to_string(), "");
        assert!(!ours.contains('\u{1b}'), "{painted:?}");
    }

    #[test]
    fn every_line_is_escaped_whole() {
        let mut out = Vec::new();
        let mut lines = TerminalLines::new(&mut out);
        lines
            .line(format_args!("label {HOSTILE} end"))
            .expect("write");
        lines.line(format_args!("fixed")).expect("write");
        let text = String::from_utf8(out).expect("UTF-8");
        assert_eq!(text.lines().count(), 2, "{text:?}");
        assert!(raw_controls(&text.replace('\n', "")).is_empty(), "{text:?}");
    }
}
