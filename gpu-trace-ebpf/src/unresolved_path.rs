//! A failed open that never reached a device check (a missing node, a
//! file mode refusal) is known by its path alone: without it in the fold's
//! key, a program failing at /dev/nvidia-uvm and then at
//! /dev/nvidia-uvm-tools would have the second counted as a repeat of the
//! first, and its name never told. The path is read in chunks (nine reads
//! of 31 bytes cover the 255 an event keeps) and digested into the device
//! fields of the key. Only such failures of GPU paths pay for it, repeats
//! included: the path is all that names them.

use gpu_trace_common::{DeviceFields, UnresolvedPath, PATH_HEAD_LEN, PATH_LEN};

use crate::open_calls::path_chunk;

/// Chunks that cover an event's PATH_LEN - 1 bytes: each read takes
/// PATH_HEAD_LEN - 1 bytes of the path and a NUL.
const CHUNKS: usize = (PATH_LEN - 1).div_ceil(PATH_HEAD_LEN - 1);

/// The stand-in device of the path at `path_ptr`.
#[inline(never)]
pub fn device_of(path_ptr: u64) -> DeviceFields {
    let mut digest = UnresolvedPath::START;
    let mut offset = 0u64;
    let mut i = 0;
    while i < CHUNKS {
        let (chunk, read) = path_chunk(path_ptr + offset);
        if read <= 0 {
            break;
        }
        digest = digest.with_chunk(&chunk);
        // Shorter than a whole chunk: the NUL came before its end.
        if read < PATH_HEAD_LEN as i64 {
            break;
        }
        offset += (PATH_HEAD_LEN - 1) as u64;
        i += 1;
    }
    DeviceFields::of_unresolved_path(digest.0)
}
