//! One fact from the kernel's BTF (/sys/kernel/btf/vmlinux): where a struct
//! member lies. A single pass over the type section, no index built: the
//! BTF crates parse all ~150k types into tables first, which took 100 ms
//! of a start-up that must stay well under that.
//!
//! Format: Documentation/bpf/btf.rst in the kernel tree.

use std::path::Path;

use anyhow::{bail, ensure, Context};

const VMLINUX: &str = "/sys/kernel/btf/vmlinux";
const MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;

/// Byte offset of `member` in `struct name`, from the running kernel's BTF.
pub fn member_offset(name: &str, member: &str) -> anyhow::Result<u32> {
    let data = std::fs::read(VMLINUX).with_context(|| format!("reading {VMLINUX}"))?;
    member_offset_in(&data, name, member).with_context(|| {
        format!(
            "finding {name}.{member} in {}",
            Path::new(VMLINUX).display()
        )
    })
}

fn member_offset_in(data: &[u8], name: &str, member: &str) -> anyhow::Result<u32> {
    let word = |at: usize| -> anyhow::Result<u32> {
        let bytes = data.get(at..at + 4).context("BTF cut short")?;
        Ok(u32::from_ne_bytes(bytes.try_into().expect("four bytes")))
    };
    ensure!(
        data.len() >= 24 && u16::from_ne_bytes([data[0], data[1]]) == MAGIC,
        "not BTF in this machine's byte order"
    );
    let header_len = word(4)? as usize;
    let types = header_len + word(8)? as usize;
    let types_end = types + word(12)? as usize;
    let strings = header_len + word(16)? as usize;
    let string_at = |offset: u32| -> &[u8] {
        let start = strings + offset as usize;
        let rest = data.get(start..).unwrap_or_default();
        &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
    };

    let mut at = types;
    while at < types_end {
        let name_offset = word(at)?;
        let info = word(at + 4)?;
        let kind = (info >> 24) & 0x1f;
        let members = (info & 0xffff) as usize;
        at += 12;
        if kind == KIND_STRUCT && string_at(name_offset) == name.as_bytes() {
            let bitfields = info >> 31 == 1;
            for index in 0..members {
                let entry = at + index * 12;
                if string_at(word(entry)?) == member.as_bytes() {
                    let offset = word(entry + 8)?;
                    // With bitfields the low 24 bits hold the bit offset.
                    let bits = if bitfields {
                        offset & 0xff_ffff
                    } else {
                        offset
                    };
                    ensure!(bits % 8 == 0, "{name}.{member} is a bitfield");
                    return Ok(bits / 8);
                }
            }
        }
        at += kind_data_len(kind, members)?;
    }
    bail!("struct {name} with a member {member} not found")
}

/// Bytes that follow a type's 12-byte header, by kind.
fn kind_data_len(kind: u32, members: usize) -> anyhow::Result<usize> {
    Ok(match kind {
        // pointer, forward, typedef, volatile, const, restrict, function,
        // float, type tag
        2 | 7..=12 | 16 | 18 => 0,
        // int, variable, decl tag
        1 | 14 | 17 => 4,
        3 => 12,
        // struct, union, datasec, enum64
        4 | 5 | 15 | 19 => members * 12,
        // enum, function prototype
        6 | 13 => members * 8,
        other => bail!("unknown BTF kind {other}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tiny BTF blob: an int, then `struct pair { int first; int second; }`.
    fn blob() -> Vec<u8> {
        let strings = b"\0int\0pair\0first\0second\0";
        let mut types = Vec::new();
        let mut put = |words: &[u32]| {
            for w in words {
                types.extend_from_slice(&w.to_ne_bytes());
            }
        };
        put(&[1, 1 << 24, 4, 32]); // int, with its encoding word
        put(&[5, (KIND_STRUCT << 24) | 2, 8]); // struct pair, two members
        put(&[10, 1, 0]); // first at bit 0
        put(&[16, 1, 32]); // second at bit 32
        let mut data = Vec::new();
        data.extend_from_slice(&MAGIC.to_ne_bytes());
        data.extend_from_slice(&[1, 0]); // version, flags
        for w in [
            24,
            0,
            types.len() as u32,
            types.len() as u32,
            strings.len() as u32,
        ] {
            data.extend_from_slice(&w.to_ne_bytes());
        }
        data.extend_from_slice(&types);
        data.extend_from_slice(strings);
        data
    }

    #[test]
    fn finds_a_member_after_skipping_other_types() {
        assert_eq!(member_offset_in(&blob(), "pair", "second").unwrap(), 4);
        assert_eq!(member_offset_in(&blob(), "pair", "first").unwrap(), 0);
    }

    #[test]
    fn a_missing_member_or_struct_is_an_error() {
        assert!(member_offset_in(&blob(), "pair", "third").is_err());
        assert!(member_offset_in(&blob(), "int", "first").is_err());
        assert!(member_offset_in(b"not btf at all, not at all", "pair", "first").is_err());
    }

    #[test]
    fn reads_task_struct_stack_from_this_kernel() {
        if !Path::new(VMLINUX).exists() {
            eprintln!("skipping: no {VMLINUX}");
            return;
        }
        let offset = member_offset("task_struct", "stack").unwrap();
        assert!(offset > 0 && offset < 4096, "{offset}");
    }
}
