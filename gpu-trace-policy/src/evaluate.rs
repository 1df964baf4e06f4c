//! Runs a cgroup device program's translated instructions in userspace
//! against one access, to tell which policy denies it without trying it.
//!
//! Our own interpreter rather than a general eBPF VM: device policies from
//! runc, crun, LXC and systemd use only context loads, ALU, jumps and exit,
//! and here every other instruction must end in a clear refusal, never a
//! guess, a panic or an endless loop. The subset is small enough to test
//! instruction by instruction, and it is fuzzed (fuzz/).

use crate::{
    insn::Insn,
    query::{DeviceQuery, CONTEXT_SIZE},
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Allow,
    Deny,
}

/// Why a program cannot be evaluated; shown as "cannot evaluate program N: <this>".
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CannotEvaluate {
    #[error("the kernel withholds its instructions (kernel.kptr_restrict=2?)")]
    NoInstructions,
    #[error("it calls kernel helper {helper} at instruction {pc}")]
    CallsHelper { pc: usize, helper: i32 },
    #[error("it uses a map or a kernel address (64-bit load kind {kind}) at instruction {pc}")]
    UsesMapOrAddress { pc: usize, kind: u8 },
    #[error("instruction {pc} (opcode {code:#04x}) is outside what gpu-trace evaluates")]
    Unsupported { pc: usize, code: u8 },
    #[error("instruction {pc} reads r{reg} before anything was written to it")]
    Uninitialized { pc: usize, reg: u8 },
    #[error("instruction {pc} touches memory outside the context and the stack")]
    BadMemoryAccess { pc: usize },
    #[error("instruction {pc} does arithmetic on a pointer that is not an offset")]
    PointerArithmetic { pc: usize },
    #[error("instruction {pc} jumps outside the program")]
    JumpOutOfRange { pc: usize },
    #[error("it did not finish within {STEP_LIMIT} instructions")]
    StepLimit,
}

const STACK_SIZE: usize = 512;
/// Far more than any device policy runs for one access (they are loop-free).
pub const STEP_LIMIT: usize = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Value {
    Uninit,
    Scalar(u64),
    /// Pointer into the context, at this byte offset.
    Context(i64),
    /// Pointer into the stack frame, at this byte offset from its bottom.
    Stack(i64),
}

struct Machine<'a> {
    insns: &'a [Insn],
    /// r0-r10, and the kernel's auxiliary register (r11), which constant
    /// blinding (net.core.bpf_jit_harden) uses in the instructions it hands back.
    regs: [Value; 12],
    ctx: [u8; CONTEXT_SIZE],
    stack: [u8; STACK_SIZE],
    stack_written: [bool; STACK_SIZE],
}

/// Runs `insns` for `query`: Allow when the program returns an odd value
/// (the kernel tests `ret & 1`), Deny otherwise.
pub fn evaluate(insns: &[Insn], query: &DeviceQuery) -> Result<Outcome, CannotEvaluate> {
    if insns.is_empty() {
        return Err(CannotEvaluate::NoInstructions);
    }
    let mut machine = Machine {
        insns,
        regs: [Value::Uninit; 12],
        ctx: query.context(),
        stack: [0; STACK_SIZE],
        stack_written: [false; STACK_SIZE],
    };
    machine.regs[1] = Value::Context(0);
    machine.regs[10] = Value::Stack(STACK_SIZE as i64);
    let r0 = machine.run()?;
    Ok(if r0 & 1 == 1 {
        Outcome::Allow
    } else {
        Outcome::Deny
    })
}

// Instruction classes and fields (include/uapi/linux/bpf.h, bpf_common.h).
const CLASS_LD: u8 = 0x00;
const CLASS_LDX: u8 = 0x01;
const CLASS_ST: u8 = 0x02;
const CLASS_STX: u8 = 0x03;
const CLASS_ALU: u8 = 0x04;
const CLASS_JMP: u8 = 0x05;
const CLASS_JMP32: u8 = 0x06;
const CLASS_ALU64: u8 = 0x07;
const SOURCE_X: u8 = 0x08;
const MODE_IMM: u8 = 0x00;
const MODE_MEM: u8 = 0x60;
const MODE_MEMSX: u8 = 0x80;
const SIZE_DW: u8 = 0x18;

impl Machine<'_> {
    fn run(&mut self) -> Result<u64, CannotEvaluate> {
        let mut pc = 0usize;
        for _ in 0..STEP_LIMIT {
            let insn = *self
                .insns
                .get(pc)
                .ok_or(CannotEvaluate::JumpOutOfRange { pc })?;
            match insn.code & 0x07 {
                CLASS_ALU | CLASS_ALU64 => self.alu(pc, insn)?,
                CLASS_LDX => self.load(pc, insn)?,
                CLASS_ST | CLASS_STX => self.store(pc, insn)?,
                CLASS_LD => {
                    self.load_imm64(pc, insn)?;
                    pc += 1; // the second half of the 16-byte instruction
                }
                CLASS_JMP | CLASS_JMP32 => match self.jump(pc, insn)? {
                    AfterJump::Next => {}
                    AfterJump::Skip(off) => {
                        pc = jump_target(pc, off, self.insns.len())?;
                        continue;
                    }
                    AfterJump::Exit => return self.scalar(pc, 0),
                },
                _ => unreachable!("three bits, eight classes"),
            }
            pc += 1;
        }
        Err(CannotEvaluate::StepLimit)
    }

    fn read(&self, pc: usize, reg: u8) -> Result<Value, CannotEvaluate> {
        match self.regs.get(usize::from(reg)) {
            None => Err(CannotEvaluate::Unsupported {
                pc,
                code: self.insns[pc].code,
            }),
            Some(Value::Uninit) => Err(CannotEvaluate::Uninitialized { pc, reg }),
            Some(value) => Ok(*value),
        }
    }

    fn scalar(&self, pc: usize, reg: u8) -> Result<u64, CannotEvaluate> {
        match self.read(pc, reg)? {
            Value::Scalar(v) => Ok(v),
            _ => Err(CannotEvaluate::PointerArithmetic { pc }),
        }
    }

    fn write(&mut self, pc: usize, reg: u8, value: Value) -> Result<(), CannotEvaluate> {
        // r10 is the read-only frame pointer.
        if reg == 10 || usize::from(reg) >= self.regs.len() {
            return Err(CannotEvaluate::Unsupported {
                pc,
                code: self.insns[pc].code,
            });
        }
        self.regs[usize::from(reg)] = value;
        Ok(())
    }

    fn alu(&mut self, pc: usize, insn: Insn) -> Result<(), CannotEvaluate> {
        let op = insn.code & 0xf0;
        // Moves and pointer offsets first: the only ALU that may touch pointers.
        if op == 0xb0 {
            let value = self.mov(pc, insn)?;
            return self.write(pc, insn.dst, value);
        }
        // `r ^= r` is 0 whatever r held: constant blinding writes `r0 = 0`
        // that way, into a register nothing wrote before.
        if op == 0xa0 && insn.code & SOURCE_X != 0 && insn.src == insn.dst {
            return self.write(pc, insn.dst, Value::Scalar(0));
        }
        let dst = self.read(pc, insn.dst)?;
        if let (Value::Context(_) | Value::Stack(_), 0x00 | 0x10) = (dst, op) {
            let moved = self.offset_pointer(pc, insn, dst)?;
            return self.write(pc, insn.dst, moved);
        }
        let Value::Scalar(a) = dst else {
            return Err(CannotEvaluate::PointerArithmetic { pc });
        };
        let result = self.scalar_alu(pc, insn, a)?;
        self.write(pc, insn.dst, Value::Scalar(result))
    }

    /// An ALU operand: a register or the immediate (sign-extended to 64 bits).
    fn operand(&self, pc: usize, insn: Insn) -> Result<Value, CannotEvaluate> {
        if insn.code & SOURCE_X != 0 {
            self.read(pc, insn.src)
        } else {
            Ok(Value::Scalar(insn.imm as i64 as u64))
        }
    }

    /// The value mov or movsx puts in dst; a pointer survives only a plain 64-bit mov.
    fn mov(&self, pc: usize, insn: Insn) -> Result<Value, CannotEvaluate> {
        let wide = insn.code & 0x07 == CLASS_ALU64;
        Ok(match (self.operand(pc, insn)?, wide, insn.off) {
            (Value::Scalar(v), true, 0) => Value::Scalar(v),
            (Value::Scalar(v), false, 0) => Value::Scalar(v & 0xffff_ffff),
            // movsx (cpu v4): sign-extend the low 8/16/32 bits.
            (Value::Scalar(v), _, bits @ (8 | 16 | 32)) if insn.code & SOURCE_X != 0 => {
                let extended = sign_extend(v, bits as u32);
                Value::Scalar(if wide {
                    extended
                } else {
                    extended & 0xffff_ffff
                })
            }
            (pointer, true, 0) => pointer,
            _ => return Err(CannotEvaluate::PointerArithmetic { pc }),
        })
    }

    /// A context or stack pointer moved by a 64-bit add or sub of a scalar.
    fn offset_pointer(
        &self,
        pc: usize,
        insn: Insn,
        pointer: Value,
    ) -> Result<Value, CannotEvaluate> {
        let Value::Scalar(delta) = self.operand(pc, insn)? else {
            return Err(CannotEvaluate::PointerArithmetic { pc });
        };
        if insn.code & 0x07 != CLASS_ALU64 {
            return Err(CannotEvaluate::PointerArithmetic { pc });
        }
        let delta = if insn.code & 0xf0 == 0x00 {
            delta as i64
        } else {
            (delta as i64).wrapping_neg()
        };
        Ok(match pointer {
            Value::Context(off) => Value::Context(off.wrapping_add(delta)),
            Value::Stack(off) => Value::Stack(off.wrapping_add(delta)),
            _ => unreachable!("alu() passes only pointers"),
        })
    }

    /// The operation itself on scalar `a`: byte swap, neg, or with an operand.
    fn scalar_alu(&self, pc: usize, insn: Insn, a: u64) -> Result<u64, CannotEvaluate> {
        let wide = insn.code & 0x07 == CLASS_ALU64;
        let op = insn.code & 0xf0;
        let unsupported = CannotEvaluate::Unsupported {
            pc,
            code: insn.code,
        };
        if op == 0xd0 {
            return byte_swap(insn, a).ok_or(unsupported);
        }
        let b = match op {
            0x80 => 0, // neg takes no operand
            _ => match self.operand(pc, insn)? {
                Value::Scalar(b) => b,
                _ => return Err(CannotEvaluate::PointerArithmetic { pc }),
            },
        };
        let signed = insn.off == 1; // sdiv/smod (cpu v4)
        let result = if wide {
            alu64(op, a, b, signed)
        } else {
            alu32(op, a as u32, b as u32, signed).map(u64::from)
        };
        result.ok_or(unsupported)
    }

    fn load(&mut self, pc: usize, insn: Insn) -> Result<(), CannotEvaluate> {
        let mode = insn.code & 0xe0;
        if mode != MODE_MEM && mode != MODE_MEMSX {
            return Err(CannotEvaluate::Unsupported {
                pc,
                code: insn.code,
            });
        }
        let width = access_width(insn.code);
        let bytes = self.memory(pc, self.read(pc, insn.src)?, insn.off, width)?;
        let mut raw = [0u8; 8];
        raw[..width].copy_from_slice(&bytes);
        let mut value = u64::from_le_bytes(raw);
        if mode == MODE_MEMSX {
            value = sign_extend(value, (width * 8) as u32);
        }
        self.write(pc, insn.dst, Value::Scalar(value))
    }

    fn store(&mut self, pc: usize, insn: Insn) -> Result<(), CannotEvaluate> {
        if insn.code & 0xe0 != MODE_MEM {
            return Err(CannotEvaluate::Unsupported {
                pc,
                code: insn.code,
            });
        }
        let value = if insn.code & 0x07 == CLASS_STX {
            self.scalar(pc, insn.src)?
        } else {
            insn.imm as i64 as u64
        };
        let width = access_width(insn.code);
        let Value::Stack(base) = self.read(pc, insn.dst)? else {
            // Writing into the context (or elsewhere) is no policy's business.
            return Err(CannotEvaluate::BadMemoryAccess { pc });
        };
        let start = stack_range(pc, base, insn.off, width)?;
        self.stack[start..start + width].copy_from_slice(&value.to_le_bytes()[..width]);
        self.stack_written[start..start + width].fill(true);
        Ok(())
    }

    /// The bytes `width` long at `pointer + off`, from the context or the
    /// (already written) stack.
    fn memory(
        &self,
        pc: usize,
        pointer: Value,
        off: i16,
        width: usize,
    ) -> Result<Vec<u8>, CannotEvaluate> {
        match pointer {
            Value::Context(base) => {
                let start = base
                    .checked_add(i64::from(off))
                    .ok_or(CannotEvaluate::BadMemoryAccess { pc })?;
                let aligned = start >= 0 && start % width as i64 == 0;
                let start =
                    usize::try_from(start).map_err(|_| CannotEvaluate::BadMemoryAccess { pc })?;
                if !aligned || start + width > CONTEXT_SIZE {
                    return Err(CannotEvaluate::BadMemoryAccess { pc });
                }
                Ok(self.ctx[start..start + width].to_vec())
            }
            Value::Stack(base) => {
                let start = stack_range(pc, base, off, width)?;
                if !self.stack_written[start..start + width].iter().all(|&w| w) {
                    return Err(CannotEvaluate::BadMemoryAccess { pc });
                }
                Ok(self.stack[start..start + width].to_vec())
            }
            Value::Scalar(_) => Err(CannotEvaluate::BadMemoryAccess { pc }),
            Value::Uninit => unreachable!("read() refuses uninitialized registers"),
        }
    }

    fn load_imm64(&mut self, pc: usize, insn: Insn) -> Result<(), CannotEvaluate> {
        if insn.code != (CLASS_LD | MODE_IMM | SIZE_DW) {
            // Legacy packet loads (ABS/IND) have no place in a device program.
            return Err(CannotEvaluate::Unsupported {
                pc,
                code: insn.code,
            });
        }
        if insn.src != 0 {
            return Err(CannotEvaluate::UsesMapOrAddress { pc, kind: insn.src });
        }
        let high = self
            .insns
            .get(pc + 1)
            .ok_or(CannotEvaluate::JumpOutOfRange { pc })?;
        let value = u64::from(insn.imm as u32) | (u64::from(high.imm as u32) << 32);
        self.write(pc, insn.dst, Value::Scalar(value))
    }

    fn jump(&mut self, pc: usize, insn: Insn) -> Result<AfterJump, CannotEvaluate> {
        let narrow = insn.code & 0x07 == CLASS_JMP32;
        match insn.code & 0xf0 {
            // ja; in the JMP32 class (gotol) the offset is in imm.
            0x00 => {
                return Ok(AfterJump::Skip(if narrow {
                    i64::from(insn.imm)
                } else {
                    i64::from(insn.off)
                }))
            }
            0x80 => {
                return Err(CannotEvaluate::CallsHelper {
                    pc,
                    helper: insn.imm,
                })
            }
            0x90 if !narrow => return Ok(AfterJump::Exit),
            _ => {}
        }
        let a = self.scalar(pc, insn.dst)?;
        let b = if insn.code & SOURCE_X != 0 {
            self.scalar(pc, insn.src)?
        } else {
            insn.imm as i64 as u64
        };
        let (a, b) = if narrow {
            (a & 0xffff_ffff, b & 0xffff_ffff)
        } else {
            (a, b)
        };
        let (sa, sb) = if narrow {
            (a as u32 as i32 as i64, b as u32 as i32 as i64)
        } else {
            (a as i64, b as i64)
        };
        let taken = match insn.code & 0xf0 {
            0x10 => a == b,
            0x20 => a > b,
            0x30 => a >= b,
            0x40 => a & b != 0,
            0x50 => a != b,
            0x60 => sa > sb,
            0x70 => sa >= sb,
            0xa0 => a < b,
            0xb0 => a <= b,
            0xc0 => sa < sb,
            0xd0 => sa <= sb,
            _ => {
                return Err(CannotEvaluate::Unsupported {
                    pc,
                    code: insn.code,
                })
            }
        };
        Ok(if taken {
            AfterJump::Skip(i64::from(insn.off))
        } else {
            AfterJump::Next
        })
    }
}

/// Where the program goes after a jump-class instruction.
enum AfterJump {
    Next,
    Skip(i64),
    Exit,
}

/// The instruction a jump of `off` from `pc` lands on.
fn jump_target(pc: usize, off: i64, len: usize) -> Result<usize, CannotEvaluate> {
    let next = pc as i64 + 1 + off;
    if next < 0 || next >= len as i64 {
        return Err(CannotEvaluate::JumpOutOfRange { pc });
    }
    Ok(next as usize)
}

fn stack_range(pc: usize, base: i64, off: i16, width: usize) -> Result<usize, CannotEvaluate> {
    let start = base
        .checked_add(i64::from(off))
        .ok_or(CannotEvaluate::BadMemoryAccess { pc })?;
    let start = usize::try_from(start).map_err(|_| CannotEvaluate::BadMemoryAccess { pc })?;
    if start + width > STACK_SIZE {
        return Err(CannotEvaluate::BadMemoryAccess { pc });
    }
    Ok(start)
}

fn access_width(code: u8) -> usize {
    match code & 0x18 {
        0x00 => 4,
        0x08 => 2,
        0x10 => 1,
        _ => 8,
    }
}

fn sign_extend(value: u64, bits: u32) -> u64 {
    let shift = 64 - bits;
    (((value << shift) as i64) >> shift) as u64
}

/// BPF_END: to little endian (a truncation here), to big endian, or an
/// unconditional swap (ALU64 class, cpu v4).
fn byte_swap(insn: Insn, value: u64) -> Option<u64> {
    let swap = insn.code & 0x07 == CLASS_ALU64 || insn.code & SOURCE_X != 0;
    Some(match (insn.imm, swap) {
        (16, false) => value & 0xffff,
        (32, false) => value & 0xffff_ffff,
        (64, false) => value,
        (16, true) => u64::from((value as u16).swap_bytes()),
        (32, true) => u64::from((value as u32).swap_bytes()),
        (64, true) => value.swap_bytes(),
        _ => return None,
    })
}

/// 64-bit ALU with the kernel's rules: division by zero gives 0, modulo by
/// zero leaves the dividend, shift counts are masked.
fn alu64(op: u8, a: u64, b: u64, signed: bool) -> Option<u64> {
    Some(match op {
        0x00 => a.wrapping_add(b),
        0x10 => a.wrapping_sub(b),
        0x20 => a.wrapping_mul(b),
        0x30 if b == 0 => 0,
        0x30 if signed => (a as i64).wrapping_div(b as i64) as u64,
        0x30 => a / b,
        0x40 => a | b,
        0x50 => a & b,
        0x60 => a.wrapping_shl((b & 63) as u32),
        0x70 => a.wrapping_shr((b & 63) as u32),
        0x80 => a.wrapping_neg(),
        0x90 if b == 0 => a,
        0x90 if signed => (a as i64).wrapping_rem(b as i64) as u64,
        0x90 => a % b,
        0xa0 => a ^ b,
        0xc0 => ((a as i64).wrapping_shr((b & 63) as u32)) as u64,
        _ => return None,
    })
}

/// 32-bit ALU: the 64-bit one on operands widened as the op reads them
/// (sign-extended for signed division and modulo and for the arithmetic
/// shift, else zero-extended), shift counts masked to 31, the result cut to
/// 32 bits.
fn alu32(op: u8, a: u32, b: u32, signed: bool) -> Option<u32> {
    let sign_extends = op == 0xc0 || (signed && matches!(op, 0x30 | 0x90));
    let widen = |v: u32| {
        if sign_extends {
            v as i32 as i64 as u64
        } else {
            u64::from(v)
        }
    };
    let b = if matches!(op, 0x60 | 0x70 | 0xc0) {
        b & 31
    } else {
        b
    };
    alu64(op, widen(a), widen(b), signed).map(|r| r as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_instruction_fields() {
        // r2 = *(u32 *)(r1 + 4): code 0x61, dst 2, src 1, off 4.
        let insn = Insn::from_bytes([0x61, 0x12, 4, 0, 0, 0, 0, 0]);
        assert_eq!(
            insn,
            Insn {
                code: 0x61,
                dst: 2,
                src: 1,
                off: 4,
                imm: 0
            }
        );
        // if r2 != -1 goto -3.
        let raw = [0x55, 0x02, 0xfd, 0xff, 0xff, 0xff, 0xff, 0xff];
        let insn = Insn::from_bytes(raw);
        assert_eq!((insn.off, insn.imm), (-3, -1));
        assert_eq!(insn.to_bytes(), raw);
    }

    // A tiny assembler for hand-built programs.
    fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn {
            code,
            dst,
            src,
            off,
            imm,
        }
    }
    fn ldx_w(dst: u8, src: u8, off: i16) -> Insn {
        insn(0x61, dst, src, off, 0)
    }
    fn alu32_k(op: u8, dst: u8, imm: i32) -> Insn {
        insn(CLASS_ALU | op, dst, 0, 0, imm)
    }
    fn alu64_k(op: u8, dst: u8, imm: i32) -> Insn {
        insn(CLASS_ALU64 | op, dst, 0, 0, imm)
    }
    fn alu64_x(op: u8, dst: u8, src: u8) -> Insn {
        insn(CLASS_ALU64 | SOURCE_X | op, dst, src, 0, 0)
    }
    fn jmp_k(op: u8, dst: u8, imm: i32, off: i16) -> Insn {
        insn(CLASS_JMP | op, dst, 0, off, imm)
    }
    fn mov64_k(dst: u8, imm: i32) -> Insn {
        alu64_k(0xb0, dst, imm)
    }
    fn exit() -> Insn {
        insn(CLASS_JMP | 0x90, 0, 0, 0, 0)
    }
    const JEQ: u8 = 0x10;
    const JNE: u8 = 0x50;
    const AND: u8 = 0x50;
    const RSH: u8 = 0x70;

    const RW: u16 = 2 | 4;

    /// The shape runc, LXC and systemd emit: unpack the context, then one
    /// block per allow rule ("c 195:* rwm", "c 1:3 rw"), default deny.
    fn allowlist() -> Vec<Insn> {
        vec![
            ldx_w(2, 1, 0),          // r2 = access_type
            alu32_k(AND, 2, 0xffff), // r2 = type
            ldx_w(3, 1, 0),          // r3 = access_type
            alu32_k(RSH, 3, 16),     // r3 = access
            ldx_w(4, 1, 4),          // r4 = major
            ldx_w(5, 1, 8),          // r5 = minor
            // rule 1: c 195:* rwm
            jmp_k(JNE, 2, 2, 3),
            jmp_k(JNE, 4, 195, 2),
            mov64_k(0, 1),
            exit(),
            // rule 2: c 1:3 rw
            jmp_k(JNE, 2, 2, 7),
            mov64_k(1, !6),                               // r1 = ~(r|w)
            insn(CLASS_ALU | SOURCE_X | AND, 1, 3, 0, 0), // r1 &= access
            jmp_k(JNE, 1, 0, 4),
            jmp_k(JNE, 4, 1, 3),
            jmp_k(JNE, 5, 3, 2),
            mov64_k(0, 1),
            exit(),
            // default: deny
            mov64_k(0, 0),
            exit(),
        ]
    }

    #[test]
    fn allowlist_program_allows_listed_devices_and_denies_the_rest() {
        let p = allowlist();
        assert_eq!(
            evaluate(&p, &DeviceQuery::char_device(195, 255, RW)),
            Ok(Outcome::Allow)
        );
        assert_eq!(
            evaluate(&p, &DeviceQuery::char_device(195, 0, 1)),
            Ok(Outcome::Allow)
        );
        assert_eq!(
            evaluate(&p, &DeviceQuery::char_device(511, 0, RW)),
            Ok(Outcome::Deny),
            "uvm not listed"
        );
        assert_eq!(
            evaluate(&p, &DeviceQuery::char_device(1, 3, RW)),
            Ok(Outcome::Allow)
        );
        assert_eq!(
            evaluate(&p, &DeviceQuery::char_device(1, 3, 1)),
            Ok(Outcome::Deny),
            "mknod of /dev/null not allowed"
        );
        assert_eq!(
            evaluate(
                &p,
                &DeviceQuery {
                    dev_type: 1,
                    major: 195,
                    minor: 0,
                    access: RW
                }
            ),
            Ok(Outcome::Deny),
            "block"
        );
    }

    /// What the kernel does to a program under net.core.bpf_jit_harden=2
    /// (bpf_jit_blind_constants): every ALU, mov and jump immediate is
    /// hidden behind the auxiliary register r11 as `r11 = imm ^ rnd;
    /// r11 ^= rnd`, `r = 0` becomes `r ^= r`, and jump offsets grow to match.
    fn blind(insns: &[Insn], rnd: i32) -> Vec<Insn> {
        const AX: u8 = 11;
        let rewrite = |i: &Insn| -> Vec<Insn> {
            let class = i.code & 0x07;
            let op = i.code & 0xf0;
            let k = i.code & SOURCE_X == 0;
            let alu = matches!(class, CLASS_ALU | CLASS_ALU64) && op != 0x80;
            let jump = class == CLASS_JMP && !matches!(op, 0x00 | 0x80 | 0x90);
            if !k || !(alu || jump) {
                return vec![*i];
            }
            if op == 0xb0 && i.imm == 0 {
                return vec![insn(class | SOURCE_X | 0xa0, i.dst, i.dst, 0, 0)];
            }
            let wide = if class == CLASS_ALU {
                CLASS_ALU
            } else {
                CLASS_ALU64
            };
            vec![
                insn(wide | 0xb0, AX, 0, 0, rnd ^ i.imm),
                insn(wide | 0xa0, AX, 0, 0, rnd),
                insn(i.code | SOURCE_X, i.dst, AX, i.off, 0),
            ]
        };
        let expanded: Vec<Vec<Insn>> = insns.iter().map(rewrite).collect();
        let mut at = vec![0usize];
        for block in &expanded {
            at.push(at.last().copied().unwrap_or(0) + block.len());
        }
        let mut out = Vec::with_capacity(at[insns.len()]);
        for (n, block) in expanded.into_iter().enumerate() {
            for mut i in block {
                let jump = i.code & 0x07 == CLASS_JMP && !matches!(i.code & 0xf0, 0x80 | 0x90);
                if jump {
                    let target = (n as i64 + 1 + i64::from(insns[n].off)) as usize;
                    i.off = (at[target] as i64 - (out.len() as i64 + 1)) as i16;
                }
                out.push(i);
            }
        }
        out
    }

    #[test]
    fn blinded_constants_evaluate_like_the_originals() {
        let plain = allowlist();
        let hardened = blind(&plain, 0x5a5a_1234);
        assert!(hardened.len() > plain.len(), "something was blinded");
        assert!(hardened.iter().any(|i| i.dst == 11 || i.src == 11));
        for (major, minor, access) in [
            (195, 0, RW),
            (511, 0, RW),
            (1, 3, RW),
            (1, 3, 1),
            (1, 5, RW),
        ] {
            let query = DeviceQuery::char_device(major, minor, access);
            assert_eq!(
                evaluate(&hardened, &query),
                evaluate(&plain, &query),
                "{query:?}"
            );
        }
    }

    #[test]
    fn alu_follows_kernel_semantics() {
        // Each case: program computing r0, expected r0 & 1 outcome via a compare.
        let check = |ops: Vec<Insn>, expect: u64| {
            let mut p = ops;
            p.push(insn(CLASS_LD | SIZE_DW, 1, 0, 0, expect as u32 as i32));
            p.push(insn(0, 0, 0, 0, (expect >> 32) as u32 as i32));
            p.push(insn(CLASS_JMP | SOURCE_X | JEQ, 0, 1, 2, 0));
            p.push(mov64_k(0, 0));
            p.push(exit());
            p.push(mov64_k(0, 1));
            p.push(exit());
            assert_eq!(
                evaluate(&p, &DeviceQuery::char_device(0, 0, 0)),
                Ok(Outcome::Allow),
                "{p:?}"
            );
        };
        check(vec![mov64_k(0, 7), alu64_k(0x30, 0, 0)], 0); // div by zero -> 0
        check(vec![mov64_k(0, 7), alu64_k(0x90, 0, 0)], 7); // mod by zero -> dividend
        check(vec![mov64_k(0, -1)], u64::MAX); // imm sign-extends in ALU64
        check(vec![alu32_k(0xb0, 0, -1)], 0xffff_ffff); // mov32 zero-extends
        check(vec![mov64_k(0, -8), alu64_k(0xc0, 0, 1)], (-4i64) as u64); // arsh
        check(vec![mov64_k(0, 1), alu64_k(0x60, 0, 65)], 2); // shift count masked
        check(
            vec![mov64_k(0, -7), insn(CLASS_ALU64 | 0x30, 0, 0, 1, 2)],
            (-3i64) as u64,
        ); // sdiv
        check(vec![mov64_k(0, 5), alu64_k(0x80, 0, 0)], (-5i64) as u64); // neg
                                                                         // 32-bit: results cut to 32 bits and zero-extended.
        check(vec![mov64_k(0, -8), alu32_k(0xc0, 0, 1)], 0xffff_fffc); // arsh32
        check(vec![mov64_k(0, -8), alu32_k(0x70, 0, 1)], 0x7fff_fffc); // rsh32
        check(vec![mov64_k(0, 1), alu32_k(0x60, 0, 33)], 2); // shift count masked to 31
        check(vec![mov64_k(0, -1), alu32_k(0x00, 0, 1)], 0); // add32 wraps
        check(
            vec![mov64_k(0, -7), insn(CLASS_ALU | 0x30, 0, 0, 1, 2)],
            0xffff_fffd,
        ); // sdiv32
        check(vec![mov64_k(0, -7), alu32_k(0x90, 0, 2)], 1); // mod32 of 0xffff_fff9
        check(
            vec![
                mov64_k(0, 0x1234),
                insn(CLASS_ALU | SOURCE_X | 0xd0, 0, 0, 0, 16),
            ],
            0x3412,
        ); // be16
        check(
            vec![
                mov64_k(2, 0x80),
                insn(CLASS_ALU64 | SOURCE_X | 0xb0, 0, 2, 8, 0),
            ],
            (-128i64) as u64,
        ); // movsx8
    }

    #[test]
    fn stack_round_trip_and_narrow_context_loads() {
        let p = vec![
            insn(0x69, 2, 1, 2, 0), // r2 = *(u16 *)(ctx + 2): access bits
            insn(CLASS_STX | MODE_MEM, 10, 2, -4, 0), // *(u32 *)(fp - 4) = r2
            ldx_w(3, 10, -4),       // r3 = *(u32 *)(fp - 4)
            jmp_k(JEQ, 3, i32::from(RW), 2),
            mov64_k(0, 0),
            exit(),
            mov64_k(0, 1),
            exit(),
        ];
        assert_eq!(
            evaluate(&p, &DeviceQuery::char_device(1, 1, RW)),
            Ok(Outcome::Allow)
        );
        assert_eq!(
            evaluate(&p, &DeviceQuery::char_device(1, 1, 2)),
            Ok(Outcome::Deny)
        );
    }

    #[test]
    fn refuses_what_it_cannot_evaluate() {
        let q = DeviceQuery::char_device(1, 1, 2);
        assert_eq!(evaluate(&[], &q), Err(CannotEvaluate::NoInstructions));
        assert_eq!(
            evaluate(&[insn(CLASS_JMP | 0x80, 0, 0, 0, 1), exit()], &q),
            Err(CannotEvaluate::CallsHelper { pc: 0, helper: 1 })
        );
        assert_eq!(
            evaluate(
                &[
                    insn(CLASS_LD | SIZE_DW, 1, 1, 0, 3),
                    insn(0, 0, 0, 0, 0),
                    exit()
                ],
                &q
            ),
            Err(CannotEvaluate::UsesMapOrAddress { pc: 0, kind: 1 })
        );
        assert_eq!(
            evaluate(&[exit()], &q),
            Err(CannotEvaluate::Uninitialized { pc: 0, reg: 0 })
        );
        assert_eq!(
            evaluate(&[ldx_w(0, 1, 12), exit()], &q),
            Err(CannotEvaluate::BadMemoryAccess { pc: 0 })
        );
        assert_eq!(
            evaluate(&[ldx_w(0, 1, 2), exit()], &q),
            Err(CannotEvaluate::BadMemoryAccess { pc: 0 }),
            "misaligned"
        );
        assert_eq!(
            evaluate(&[ldx_w(0, 10, -4), exit()], &q),
            Err(CannotEvaluate::BadMemoryAccess { pc: 0 }),
            "unwritten stack"
        );
        assert_eq!(
            evaluate(
                &[insn(CLASS_ST | MODE_MEM, 1, 0, 0, 1), mov64_k(0, 1), exit()],
                &q
            ),
            Err(CannotEvaluate::BadMemoryAccess { pc: 0 }),
            "writes to the context"
        );
        assert_eq!(
            evaluate(&[alu64_k(0x20, 1, 2), exit()], &q),
            Err(CannotEvaluate::PointerArithmetic { pc: 0 })
        );
        assert_eq!(
            evaluate(&[alu64_x(0x00, 0, 1), exit()], &q),
            Err(CannotEvaluate::Uninitialized { pc: 0, reg: 0 })
        );
        assert_eq!(
            evaluate(&[jmp_k(0x00, 0, 0, 5), exit()], &q),
            Err(CannotEvaluate::JumpOutOfRange { pc: 0 })
        );
        assert_eq!(
            evaluate(&[mov64_k(0, 1)], &q),
            Err(CannotEvaluate::JumpOutOfRange { pc: 1 }),
            "falls off the end"
        );
        assert_eq!(
            evaluate(&[jmp_k(0x00, 0, 0, -1)], &q),
            Err(CannotEvaluate::StepLimit),
            "endless loop"
        );
        assert_eq!(
            evaluate(&[insn(0xc3, 10, 1, 0, 0), exit()], &q),
            Err(CannotEvaluate::Unsupported { pc: 0, code: 0xc3 }),
            "atomics"
        );
        assert_eq!(
            evaluate(&[mov64_k(10, 0), exit()], &q),
            Err(CannotEvaluate::Unsupported { pc: 0, code: 0xb7 }),
            "r10 is read-only"
        );
    }

    #[test]
    fn only_the_low_bit_of_r0_decides() {
        let q = DeviceQuery::char_device(1, 1, 2);
        assert_eq!(evaluate(&[mov64_k(0, 3), exit()], &q), Ok(Outcome::Allow));
        assert_eq!(evaluate(&[mov64_k(0, 2), exit()], &q), Ok(Outcome::Deny));
    }
}
