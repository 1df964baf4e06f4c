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

/// One JSON object written field by field, straight into a line buffer:
/// under a flood every event is a line of some forty fields, and going
/// through serde's serializer cost more than everything else watch does per
/// event. Strings are escaped by `write_str`, as `write` escapes them.
pub struct ObjectWriter<'a> {
    out: &'a mut Vec<u8>,
    empty: bool,
}

impl<'a> ObjectWriter<'a> {
    pub fn begin(out: &'a mut Vec<u8>) -> Self {
        out.push(b'{');
        Self { out, empty: true }
    }

    pub fn end(self) {
        self.out.push(b'}');
    }

    /// `"key":`; keys are our own identifiers, which need no escaping.
    /// Inlined, so that each key's length is a constant and its copy a few
    /// moves rather than a call to memcpy.
    #[inline(always)]
    fn key(&mut self, key: &'static str) -> &mut Vec<u8> {
        debug_assert!(key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'));
        if !self.empty {
            self.out.push(b',');
        }
        self.empty = false;
        self.out.push(b'"');
        self.out.extend_from_slice(key.as_bytes());
        self.out.extend_from_slice(b"\":");
        self.out
    }

    #[inline(always)]
    pub fn str(&mut self, key: &'static str, value: &str) {
        write_str(self.key(key), value);
    }

    #[inline(always)]
    pub fn opt_str(&mut self, key: &'static str, value: Option<&str>) {
        match value {
            Some(value) => self.str(key, value),
            None => self.key(key).extend_from_slice(b"null"),
        }
    }

    #[inline(always)]
    pub fn num(&mut self, key: &'static str, value: impl itoa::Integer) {
        let mut digits = itoa::Buffer::new();
        let text = digits.format(value);
        self.key(key).extend_from_slice(text.as_bytes());
    }

    #[inline(always)]
    pub fn opt_num(&mut self, key: &'static str, value: Option<impl itoa::Integer>) {
        match value {
            Some(value) => self.num(key, value),
            None => self.key(key).extend_from_slice(b"null"),
        }
    }

    #[inline(always)]
    pub fn bool(&mut self, key: &'static str, value: bool) {
        let text: &[u8] = if value { b"true" } else { b"false" };
        self.key(key).extend_from_slice(text);
    }

    /// A value rendered once beforehand (see `to_raw`).
    #[inline(always)]
    pub fn raw(&mut self, key: &'static str, value: &RawValue) {
        self.key(key).extend_from_slice(value.get().as_bytes());
    }

    #[inline(always)]
    pub fn opt_raw(&mut self, key: &'static str, value: Option<&RawValue>) {
        match value {
            Some(value) => self.raw(key, value),
            None => self.key(key).extend_from_slice(b"null"),
        }
    }

    /// A string value written by `write` into the line: for the odd value
    /// that is not text (a timestamp formatted in place).
    #[inline(always)]
    pub fn str_with(&mut self, key: &'static str, write: impl FnOnce(&mut Vec<u8>)) {
        let out = self.key(key);
        out.push(b'"');
        let start = out.len();
        write(out);
        debug_assert!(
            out[start..].iter().all(|&b| is_plain(b)),
            "needs no escaping"
        );
        out.push(b'"');
    }
}

/// A byte that goes into a JSON string as it is, in every context.
fn is_plain(b: u8) -> bool {
    (0x20..0x7f).contains(&b) && b != b'"' && b != b'\\'
}

/// `value` as a JSON string, quotes included, escaped as `write` escapes it.
pub fn write_str(out: &mut Vec<u8>, value: &str) {
    // Most strings (ASCII paths, names) need no escape at all. Every byte is
    // looked at, without an early exit, so that the check runs in SIMD.
    if value.bytes().fold(true, |plain, b| plain & is_plain(b)) {
        out.push(b'"');
        out.extend_from_slice(value.as_bytes());
        out.push(b'"');
    } else {
        // The rest goes through the one terminal-safe escaper.
        write(&mut *out, value).expect("a string serializes into memory");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_as_the_serializer_escapes_them() {
        let hostile = [
            "",
            "plain /dev/nvidia-uvm",
            "quote\" back\\ slash",
            "\u{0}\u{1}\u{8}\u{9}\u{a}\u{c}\u{d}\u{1b}[31m\u{1f}",
            "a\u{7f}b\u{80}\u{9b}\u{9f}c\u{a0}",
            "bidi \u{202e}evil\u{2066} zw\u{200b}\u{feff}",
            "tag \u{e0072}\u{e0100} emoji \u{1f600} accent é ü",
        ];
        for text in hostile {
            let mut ours = Vec::new();
            write_str(&mut ours, text);
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                to_string(text),
                "{text:?}"
            );
        }
    }

    #[test]
    fn random_strings_are_escaped_as_the_serializer_escapes_them() {
        // Characters from every class the two escapers treat apart: plain
        // ASCII, JSON's own escapes, C0, DEL, C1, format characters, and
        // characters of two, three and four bytes that go out as they are.
        let alphabet: Vec<char> = ('\u{0}'..='\u{7f}')
            .chain('\u{80}'..='\u{a0}')
            .chain([
                '\u{ad}', 'é', '\u{61c}', '\u{200b}', '\u{202e}', '\u{2066}', '€',
            ])
            .chain([
                '\u{feff}',
                '\u{fffb}',
                '\u{1f600}',
                '\u{e0001}',
                '\u{e01ef}',
                '\u{10ffff}',
            ])
            .collect();
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for _ in 0..20_000 {
            let len = (next() % 24) as usize;
            let text: String = (0..len)
                .map(|_| alphabet[(next() % alphabet.len() as u64) as usize])
                .collect();
            let mut ours = Vec::new();
            write_str(&mut ours, &text);
            assert_eq!(
                String::from_utf8(ours).unwrap(),
                to_string(&text),
                "{text:?}"
            );
        }
    }

    #[test]
    fn an_object_reads_back_as_written() {
        let raw = to_raw(&serde_json::json!({"a": [1, "b"]}));
        let mut out = Vec::new();
        let mut object = ObjectWriter::begin(&mut out);
        object.str("s", "x\ny");
        object.opt_str("none", None);
        object.num("n", -7i32);
        object.opt_num("big", Some(u64::MAX));
        object.opt_num("no_num", None::<u32>);
        object.bool("t", true);
        object.raw("raw", &raw);
        object.opt_raw("no_raw", None);
        object.str_with("time", |out| out.extend_from_slice(b"12:00"));
        object.end();
        let back: serde_json::Value = serde_json::from_slice(&out).expect("valid JSON");
        assert_eq!(
            back,
            serde_json::json!({"s": "x\ny", "none": null, "n": -7, "big": u64::MAX,
                "no_num": null, "t": true, "raw": {"a": [1, "b"]}, "no_raw": null, "time": "12:00"})
        );
    }

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
