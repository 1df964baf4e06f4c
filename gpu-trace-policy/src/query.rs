//! One device access as a cgroup device program is asked about it, and the
//! "rwm" letters cgroup device rules write its access in.

use gpu_trace_common::{ACCESS_MKNOD, ACCESS_READ, ACCESS_WRITE, DEV_TYPE_CHAR};

/// The access bits in the order device rules spell them ("rwm").
pub const ACCESS_LETTERS: [(u16, char); 3] =
    [(ACCESS_READ, 'r'), (ACCESS_WRITE, 'w'), (ACCESS_MKNOD, 'm')];

/// "rw", "m", ... for `access` bits, in the order of cgroup device rules.
pub fn access_letters(access: u16) -> String {
    ACCESS_LETTERS
        .iter()
        .filter(|(bit, _)| access & bit != 0)
        .map(|(_, letter)| *letter)
        .collect()
}

/// The access bits of rule letters ("rwm" -> 7); None on any other letter.
pub fn access_bits(letters: &str) -> Option<u16> {
    letters.chars().try_fold(0u16, |bits, c| {
        let (bit, _) = ACCESS_LETTERS.iter().find(|(_, letter)| *letter == c)?;
        Some(bits | bit)
    })
}

/// Size of `bpf_cgroup_dev_ctx`, the context a device program reads.
pub(crate) const CONTEXT_SIZE: usize = 12;

/// What the program was asked about: the `bpf_cgroup_dev_ctx` it would see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceQuery {
    /// 1 block, 2 char (`BPF_DEVCG_DEV_*`).
    pub dev_type: u16,
    pub major: u32,
    pub minor: u32,
    /// `BPF_DEVCG_ACC_*` bits: 1 mknod, 2 read, 4 write.
    pub access: u16,
}

impl DeviceQuery {
    /// An access to a char device, the kind every GPU node is.
    pub fn char_device(major: u32, minor: u32, access: u16) -> Self {
        Self {
            dev_type: DEV_TYPE_CHAR,
            major,
            minor,
            access,
        }
    }

    pub(crate) fn context(&self) -> [u8; CONTEXT_SIZE] {
        let access_type = (u32::from(self.access) << 16) | u32::from(self.dev_type);
        let mut ctx = [0u8; CONTEXT_SIZE];
        ctx[0..4].copy_from_slice(&access_type.to_le_bytes());
        ctx[4..8].copy_from_slice(&self.major.to_le_bytes());
        ctx[8..12].copy_from_slice(&self.minor.to_le_bytes());
        ctx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn letters_and_bits_round_trip() {
        assert_eq!(access_letters(7), "rwm");
        assert_eq!(access_letters(ACCESS_WRITE | ACCESS_MKNOD), "wm");
        assert_eq!(access_bits("rwm"), Some(7));
        assert_eq!(access_bits("mr"), Some(3));
        assert_eq!(access_bits("rwx"), None);
    }
}
