//! The kernel's note of every cgroup2 directory made since start, by id:
//! names a cgroup removed before its events were read.

use std::os::unix::ffi::OsStrExt;

use aya::maps::{HashMap, MapData};
use gpu_trace_common::CgroupPath;

use crate::model::cgroup_note::CgroupNote;

/// Paths of the cgroup2 directories made since the tracer started, by id.
pub struct CgroupsMade(pub(super) HashMap<MapData, u64, CgroupPath>);

impl CgroupsMade {
    /// The note of cgroup `id`, if it was made since start.
    pub fn note(&self, id: u64) -> Option<CgroupNote> {
        let entry = self.0.get(&id, 0).ok()?;
        // Empty: the kernel could not read it. Filling the slot: cut short.
        // Either would be taken for another cgroup's path; who made it
        // still counts.
        let path = entry
            .path
            .iter()
            .position(|&b| b == 0)
            .filter(|&end| end > 0 && end + 1 < entry.path.len())
            .map(|end| std::path::PathBuf::from(std::ffi::OsStr::from_bytes(&entry.path[..end])));
        Some(CgroupNote {
            path,
            // Left at u32::MAX when the program stopped before writing it.
            creator_uid: Some(entry.creator_uid).filter(|&uid| uid != u32::MAX),
        })
    }
}
