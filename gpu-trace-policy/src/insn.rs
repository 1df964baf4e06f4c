//! The kernel's 8-byte BPF instruction encoding, both ways.

/// One BPF instruction as the kernel stores it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

impl Insn {
    /// An instruction from its fields, as a program made at run time is.
    pub const fn new(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Self {
        Self {
            code,
            dst,
            src,
            off,
            imm,
        }
    }

    pub fn from_bytes(raw: [u8; 8]) -> Self {
        Self {
            code: raw[0],
            dst: raw[1] & 0x0f,
            src: raw[1] >> 4,
            off: i16::from_le_bytes([raw[2], raw[3]]),
            imm: i32::from_le_bytes([raw[4], raw[5], raw[6], raw[7]]),
        }
    }

    pub fn to_bytes(self) -> [u8; 8] {
        let mut raw = [0u8; 8];
        raw[0] = self.code;
        raw[1] = (self.src << 4) | (self.dst & 0x0f);
        raw[2..4].copy_from_slice(&self.off.to_le_bytes());
        raw[4..8].copy_from_slice(&self.imm.to_le_bytes());
        raw
    }
}
