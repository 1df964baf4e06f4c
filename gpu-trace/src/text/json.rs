//! JSON lines that stay safe when `cat`ed or `tail -f`ed to a terminal:
//! serde_json escapes C0 controls; this formatter also writes DEL, C1
//! controls and the bidi and format characters as `\u` escapes.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::{ser::Formatter, value::RawValue, Serializer};

use crate::text::terminal::is_invisible_format;

struct TerminalSafeJson;

fn needs_unicode_escape(c: char) -> bool {
    // C0 is already escaped by serde_json; these are what it leaves raw.
    ('\u{7f}'..='\u{9f}').contains(&c) || is_invisible_format(c)
}

impl Formatter for TerminalSafeJson {
    fn write_string_fragment<W: ?Sized + Write>(
        &mut self,
        writer: &mut W,
        fragment: &str,
    ) -> io::Result<()> {
        // Every character escaped here is encoded from 0x7f up: most
        // fragments (ASCII paths, names) have none and go out at once.
        if fragment.bytes().all(|b| b < 0x7f) {
            return writer.write_all(fragment.as_bytes());
        }
        let mut start = 0;
        for (i, c) in fragment.char_indices() {
            if needs_unicode_escape(c) {
                writer.write_all(&fragment.as_bytes()[start..i])?;
                // JSON's \u takes four hex digits: a character beyond the
                // BMP (tag characters) is written as its UTF-16 pair.
                for unit in c.encode_utf16(&mut [0; 2]) {
                    write!(writer, "\\u{unit:04x}")?;
                }
                start = i + c.len_utf8();
            }
        }
        writer.write_all(&fragment.as_bytes()[start..])
    }
}

/// Writes `value` as one line of JSON (no newline), terminal-safe.
pub fn write<W: Write, T: Serialize + ?Sized>(out: W, value: &T) -> serde_json::Result<()> {
    value.serialize(&mut Serializer::with_formatter(out, TerminalSafeJson))
}

pub fn to_string<T: Serialize + ?Sized>(value: &T) -> String {
    let mut out = Vec::new();
    write(&mut out, value).expect("plain data serializes");
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// `value` rendered once, for values repeated on many lines.
pub fn to_raw<T: Serialize + ?Sized>(value: &T) -> Box<RawValue> {
    RawValue::from_string(to_string(value)).expect("serde_json writes valid JSON")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn del_c1_and_bidi_become_unicode_escapes() {
        let text = "a\u{7f}b\u{9b}c\u{202e}d\u{2028}e\u{1b}f\"g";
        let json = to_string(text);
        assert_eq!(json, r#""a\u007fb\u009bc\u202ed\u2028e\u001bf\"g""#);
        assert!(json.chars().all(|c| !c.is_control()), "{json:?}");
        let back: String = serde_json::from_str(&json).expect("parses back");
        assert_eq!(back, text);
        // A tag character (beyond the BMP) reads back as itself.
        let tagged = "ok\u{e0072}x";
        let json = to_string(tagged);
        assert_eq!(json, r#""ok\udb40\udc72x""#);
        let back: String = serde_json::from_str(&json).expect("parses back");
        assert_eq!(back, tagged);
    }
}
