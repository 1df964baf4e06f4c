//! The tracer object for kernels before 5.12, whose BPF lacks
//! compare-and-exchange and exchange.
//!
//! The programs use them only where the loader's SLOT_COUNTS is 1
//! (gpu-trace-ebpf's slot_count.rs), but a verifier before 5.12 refuses
//! every store instruction with a non-zero immediate before it looks at
//! which branches can run ("BPF_STX uses reserved fields"). With
//! SLOT_COUNTS 0 those instructions never run, so each is turned into the
//! atomic add those kernels know: the same registers and size, never
//! executed, and no longer refused.

use anyhow::Context;
use object::{Object, ObjectSection, SectionKind};

/// BPF's atomic store class and mode (`BPF_STX | BPF_ATOMIC`); the low
/// bits of the size (`BPF_W`, `BPF_DW`) complete the opcode.
const STX_ATOMIC: u8 = 0x03 | 0xc0;
const SIZE_MASK: u8 = 0x18;
const SIZE_W: u8 = 0x00;
const SIZE_DW: u8 = 0x18;
/// `BPF_ADD` without `BPF_FETCH`: the one atomic operation of 5.10.
const ATOMIC_ADD: i32 = 0x00;
/// `BPF_CMPXCHG` and `BPF_XCHG`, the operations slot_count.rs uses.
const COMPARE_AND_EXCHANGE: i32 = 0xf1;
const EXCHANGE: i32 = 0xe1;
const INSTRUCTION_LEN: usize = 8;

/// An object's bytes, aligned as the ELF reader needs them.
pub struct AlignedObject {
    chunks: Vec<Chunk>,
    len: usize,
}

#[repr(C, align(32))]
#[derive(Clone, Copy)]
struct Chunk([u8; 32]);

impl AlignedObject {
    fn copy_of(bytes: &[u8]) -> Self {
        let mut chunks = vec![Chunk([0; 32]); bytes.len().div_ceil(32)];
        for (chunk, part) in chunks.iter_mut().zip(bytes.chunks(32)) {
            chunk.0[..part.len()].copy_from_slice(part);
        }
        Self {
            chunks,
            len: bytes.len(),
        }
    }

    pub fn bytes(&self) -> &[u8] {
        // SAFETY: the chunks are plain bytes laid out one after another
        // (repr(C), no padding), at least `len` of them.
        unsafe { std::slice::from_raw_parts(self.chunks.as_ptr().cast::<u8>(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`, borrowed mutably.
        unsafe { std::slice::from_raw_parts_mut(self.chunks.as_mut_ptr().cast::<u8>(), self.len) }
    }
}

/// `object` with every atomic instruction of its code sections made an
/// atomic add; how many were changed.
pub fn without_atomics(object: &[u8]) -> anyhow::Result<(AlignedObject, usize)> {
    let ranges: Vec<(usize, usize)> = {
        let file = object::File::parse(object).context("reading the tracer object")?;
        file.sections()
            .filter(|section| section.kind() == SectionKind::Text)
            .filter_map(|section| section.file_range())
            .map(|(start, len)| (start as usize, len as usize))
            .collect()
    };
    let mut copy = AlignedObject::copy_of(object);
    let bytes = copy.bytes_mut();
    let mut changed = 0;
    for (start, len) in ranges {
        let code = bytes
            .get_mut(start..start + len)
            .context("a code section past the object's end")?;
        for instruction in code.chunks_exact_mut(INSTRUCTION_LEN) {
            changed += usize::from(made_add(instruction)?);
        }
    }
    Ok((copy, changed))
}

/// Turns one instruction, if an exchange, into the add. Any other atomic
/// but the add (a fetching one, say) would run on those kernels: refused
/// here rather than changed. (The second half of a 16-byte load has
/// opcode 0: never taken for one.)
fn made_add(instruction: &mut [u8]) -> anyhow::Result<bool> {
    let opcode = instruction[0];
    let size = opcode & SIZE_MASK;
    let atomic = opcode & !SIZE_MASK == STX_ATOMIC && (size == SIZE_W || size == SIZE_DW);
    let imm = i32::from_le_bytes([
        instruction[4],
        instruction[5],
        instruction[6],
        instruction[7],
    ]);
    if !atomic || imm == ATOMIC_ADD {
        return Ok(false);
    }
    anyhow::ensure!(
        imm == COMPARE_AND_EXCHANGE || imm == EXCHANGE,
        "the tracer object has an atomic operation {imm:#x} that kernels before 5.12 lack"
    );
    instruction[4..8].copy_from_slice(&ATOMIC_ADD.to_le_bytes());
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `r0 = cmpxchg_64(r6 + 0, r0, r1)` and `r2 = xchg_64(r6 + 96, r2)`,
    /// as the BPF target's compiler emits them.
    const CMPXCHG: [u8; 8] = [0xdb, 0x16, 0x00, 0x00, 0xf1, 0x00, 0x00, 0x00];
    const XCHG: [u8; 8] = [0xdb, 0x26, 0x60, 0x00, 0xe1, 0x00, 0x00, 0x00];
    /// `lock *(u64 *)(r6 + 16) += r1`.
    const ADD: [u8; 8] = [0xdb, 0x16, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00];

    #[test]
    fn compare_and_exchange_and_exchange_become_the_add() {
        for (before, after) in [
            (CMPXCHG, [0xdb, 0x16, 0x00, 0x00, 0, 0, 0, 0]),
            (XCHG, [0xdb, 0x26, 0x60, 0x00, 0, 0, 0, 0]),
        ] {
            let mut instruction = before;
            assert!(made_add(&mut instruction).expect("an exchange"));
            assert_eq!(instruction, after);
        }
    }

    #[test]
    fn the_add_and_other_instructions_stay() {
        // The add; `r1 = 0x...f1` (a 64-bit load's halves); `*(u64 *)(r10 - 8) = r1`.
        for before in [
            ADD,
            [0x18, 0x01, 0, 0, 0xf1, 0, 0, 0],
            [0x00, 0x00, 0, 0, 0xf1, 0, 0, 0],
            [0x7b, 0x1a, 0xf8, 0xff, 0, 0, 0, 0],
        ] {
            let mut instruction = before;
            assert!(!made_add(&mut instruction).expect("no atomic to change"));
            assert_eq!(instruction, before);
        }
    }

    #[test]
    fn a_fetching_add_is_refused_not_changed() {
        // `r1 = atomic_fetch_add((u64 *)(r6 + 16), r1)`.
        let mut instruction = [0xdb, 0x16, 0x10, 0x00, 0x01, 0x00, 0x00, 0x00];
        assert!(made_add(&mut instruction).is_err());
    }

    #[test]
    fn the_tracer_objects_atomics_all_become_adds() {
        let object = super::super::tracer::tracer_object();
        let (patched, changed) = without_atomics(object).expect("patched");
        assert!(changed > 0, "the object has compare-and-exchange");
        let (_, again) = without_atomics(patched.bytes()).expect("patched twice");
        assert_eq!(again, 0, "nothing left but adds");
        assert_eq!(patched.bytes().len(), object.len());
    }
}
