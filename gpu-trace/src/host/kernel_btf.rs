//! Facts from the kernel's BTF (/sys/kernel/btf/vmlinux): whether a struct
//! exists, and where a member lies. A single pass over the type section per
//! question, no index built: the BTF crates parse all ~150k types into
//! tables first, which took 100 ms of a start-up that must stay well under
//! that.
//!
//! Format: Documentation/bpf/btf.rst in the kernel tree.

use anyhow::{bail, ensure, Context};

const VMLINUX: &str = "/sys/kernel/btf/vmlinux";
const MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_ENUM: u32 = 6;
/// How deep member_offset looks into anonymous structs and unions.
const ANONYMOUS_DEPTH: u32 = 4;

/// The running kernel's BTF, as read once.
pub struct KernelBtf {
    data: Vec<u8>,
}

/// A struct found in the type section: where its member entries start.
struct Found {
    kind: u32,
    /// The type's size in bytes (structs, unions, enums).
    size: u32,
    members_at: usize,
    members: usize,
    bitfields: bool,
}

impl KernelBtf {
    /// The running kernel's BTF for a unit test, or None with a line saying
    /// the test skips (a build machine without BTF).
    #[cfg(test)]
    pub fn for_test() -> Option<Self> {
        let read = Self::read();
        if let Err(e) = &read {
            eprintln!("skipping: no kernel BTF here ({e:#})");
        }
        read.ok()
    }

    pub fn read() -> anyhow::Result<Self> {
        let data = std::fs::read(VMLINUX).with_context(|| format!("reading {VMLINUX}"))?;
        Self::from_bytes(data)
    }

    fn from_bytes(data: Vec<u8>) -> anyhow::Result<Self> {
        ensure!(
            data.len() >= 24 && u16::from_ne_bytes([data[0], data[1]]) == MAGIC,
            "{VMLINUX} is not BTF in this machine's byte order"
        );
        Ok(Self { data })
    }

    pub fn has_struct(&self, name: &str) -> anyhow::Result<bool> {
        Ok(self.find_struct(name)?.is_some())
    }

    /// The size of `struct name` in bytes: the stride of an array of them.
    pub fn struct_size(&self, name: &str) -> anyhow::Result<u32> {
        match self.find_struct(name)? {
            Some(found) => Ok(found.size),
            None => bail!("no struct {name} in {VMLINUX}"),
        }
    }

    /// Byte offset of `member` in `struct name`, also where it lies in an
    /// anonymous struct or union of it, as C names it (a kernel built with
    /// CONFIG_RANDSTRUCT puts most of task_struct in one).
    pub fn member_offset(&self, name: &str, member: &str) -> anyhow::Result<u32> {
        let Some(found) = self.find_struct(name)? else {
            bail!("no struct {name} in {VMLINUX}");
        };
        let Some(bits) = self.bit_offset_in(&found, member, 0)? else {
            bail!("struct {name} has no member {member} in {VMLINUX}")
        };
        ensure!(bits % 8 == 0, "{name}.{member} is a bitfield");
        Ok(bits / 8)
    }

    /// Bit offset of `member` in `found`, its own members first, then those
    /// of its anonymous structs and unions.
    fn bit_offset_in(
        &self,
        found: &Found,
        member: &str,
        depth: u32,
    ) -> anyhow::Result<Option<u32>> {
        let mut anonymous = Vec::new();
        for index in 0..found.members {
            let entry = found.members_at + index * 12;
            let name = self.word(entry)?;
            let offset = self.word(entry + 8)?;
            // With bitfields the low 24 bits hold the bit offset.
            let bits = if found.bitfields {
                offset & 0xff_ffff
            } else {
                offset
            };
            if name == 0 {
                anonymous.push((self.word(entry + 4)?, bits));
            } else if self.string_at(name) == member.as_bytes() {
                return Ok(Some(bits));
            }
        }
        if depth == ANONYMOUS_DEPTH {
            return Ok(None);
        }
        for (type_id, bits) in anonymous {
            let Some(inner) = self.type_by_id(type_id)? else {
                continue;
            };
            if matches!(inner.kind, KIND_STRUCT | KIND_UNION) {
                if let Some(inner_bits) = self.bit_offset_in(&inner, member, depth + 1)? {
                    return Ok(Some(bits + inner_bits));
                }
            }
        }
        Ok(None)
    }

    /// The value of `name` in `enum type_name` (32-bit enums: the kernel's
    /// own enumerations of controllers and the like).
    pub fn enum_value(&self, type_name: &str, name: &str) -> anyhow::Result<u32> {
        let Some(found) = self.find_type(KIND_ENUM, type_name)? else {
            bail!("no enum {type_name} in {VMLINUX}");
        };
        for index in 0..found.members {
            let entry = found.members_at + index * 8;
            if self.string_at(self.word(entry)?) == name.as_bytes() {
                return self.word(entry + 4);
            }
        }
        bail!("enum {type_name} has no {name} in {VMLINUX}")
    }

    fn word(&self, at: usize) -> anyhow::Result<u32> {
        let bytes = self.data.get(at..at + 4).context("BTF cut short")?;
        Ok(u32::from_ne_bytes(bytes.try_into().expect("four bytes")))
    }

    fn header_len(&self) -> anyhow::Result<usize> {
        Ok(self.word(4)? as usize)
    }

    fn string_at(&self, offset: u32) -> &[u8] {
        let strings = self.header_len().unwrap_or(0) + self.word(16).unwrap_or(0) as usize;
        let rest = self
            .data
            .get(strings + offset as usize..)
            .unwrap_or_default();
        &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
    }

    fn find_struct(&self, name: &str) -> anyhow::Result<Option<Found>> {
        self.find_type(KIND_STRUCT, name)
    }

    fn find_type(&self, wanted: u32, name: &str) -> anyhow::Result<Option<Found>> {
        self.first_type(|_, kind, name_offset| {
            kind == wanted && self.string_at(name_offset) == name.as_bytes()
        })
    }

    /// The type numbered `id` (types count from 1; 0 is void).
    fn type_by_id(&self, id: u32) -> anyhow::Result<Option<Found>> {
        self.first_type(|this_id, _, _| this_id == id)
    }

    /// The first type for which `wanted(id, kind, name offset)` holds.
    fn first_type(
        &self,
        mut wanted: impl FnMut(u32, u32, u32) -> bool,
    ) -> anyhow::Result<Option<Found>> {
        let types = self.header_len()? + self.word(8)? as usize;
        let types_end = types + self.word(12)? as usize;
        let mut at = types;
        let mut id = 1;
        while at < types_end {
            let name_offset = self.word(at)?;
            let info = self.word(at + 4)?;
            let kind = (info >> 24) & 0x1f;
            let members = (info & 0xffff) as usize;
            let size = self.word(at + 8)?;
            at += 12;
            if wanted(id, kind, name_offset) {
                return Ok(Some(Found {
                    kind,
                    size,
                    members_at: at,
                    members,
                    bitfields: info >> 31 == 1,
                }));
            }
            at += kind_data_len(kind, members)?;
            id += 1;
        }
        Ok(None)
    }
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

    /// A tiny BTF blob: an int, then `struct pair { int first; int second; }`,
    /// then `enum side { first = 0, second = 7 }`, then
    /// `struct nest { int first; struct { int pad; union { int deep; }; }; }`.
    fn blob() -> Vec<u8> {
        let strings = b"\0int\0pair\0first\0second\0side\0nest\0pad\0deep\0";
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
        put(&[23, (KIND_ENUM << 24) | 2, 4]); // enum side, two values
        put(&[10, 0]); // first = 0
        put(&[16, 7]); // second = 7
        put(&[28, (KIND_STRUCT << 24) | 2, 12]); // 4: struct nest
        put(&[10, 1, 0]); // first at bit 0
        put(&[0, 5, 32]); // anonymous struct (type 5) at bit 32
        put(&[0, (KIND_STRUCT << 24) | 2, 8]); // 5: the anonymous struct
        put(&[33, 1, 0]); // pad at bit 0
        put(&[0, 6, 32]); // anonymous union (type 6) at bit 32
        put(&[0, (KIND_UNION << 24) | 1, 4]); // 6: the anonymous union
        put(&[37, 1, 0]); // deep at bit 0
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

    fn btf() -> KernelBtf {
        KernelBtf::from_bytes(blob()).unwrap()
    }

    #[test]
    fn finds_a_member_after_skipping_other_types() {
        assert_eq!(btf().member_offset("pair", "second").unwrap(), 4);
        assert_eq!(btf().member_offset("pair", "first").unwrap(), 0);
        assert!(btf().has_struct("pair").unwrap());
        assert_eq!(btf().struct_size("pair").unwrap(), 8);
        assert!(!btf().has_struct("int").unwrap());
    }

    #[test]
    fn finds_a_member_in_anonymous_structs_and_unions() {
        assert_eq!(btf().member_offset("nest", "first").unwrap(), 0);
        assert_eq!(btf().member_offset("nest", "pad").unwrap(), 4);
        assert_eq!(btf().member_offset("nest", "deep").unwrap(), 8);
        assert!(btf().member_offset("nest", "second").is_err());
        assert_eq!(btf().struct_size("nest").unwrap(), 12);
    }

    #[test]
    fn finds_an_enum_value_and_not_a_struct_of_the_same_name() {
        assert_eq!(btf().enum_value("side", "second").unwrap(), 7);
        assert_eq!(btf().enum_value("side", "first").unwrap(), 0);
        assert!(btf().enum_value("side", "third").is_err());
        assert!(btf().enum_value("pair", "first").is_err());
        assert!(!btf().has_struct("side").unwrap());
    }

    #[test]
    fn a_missing_member_or_struct_is_an_error() {
        assert!(btf().member_offset("pair", "third").is_err());
        assert!(btf().member_offset("int", "first").is_err());
        assert!(KernelBtf::from_bytes(b"not btf at all, not at all".to_vec()).is_err());
    }

    #[test]
    fn reads_the_devices_controller_id_from_this_kernel() {
        if !std::path::Path::new(VMLINUX).exists() {
            eprintln!("skipping: no {VMLINUX}");
            return;
        }
        let btf = KernelBtf::read().unwrap();
        let id = btf
            .enum_value("cgroup_subsys_id", "devices_cgrp_id")
            .unwrap();
        let count = btf
            .enum_value("cgroup_subsys_id", "CGROUP_SUBSYS_COUNT")
            .unwrap();
        assert!(id < count, "{id} {count}");
    }

    #[test]
    fn reads_task_struct_stack_from_this_kernel() {
        if !std::path::Path::new(VMLINUX).exists() {
            eprintln!("skipping: no {VMLINUX}");
            return;
        }
        let offset = KernelBtf::read()
            .unwrap()
            .member_offset("task_struct", "stack")
            .unwrap();
        assert!(offset > 0 && offset < 4096, "{offset}");
    }
}
