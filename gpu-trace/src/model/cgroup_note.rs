//! The kernel's note of a cgroup2 directory made since gpu-trace started.

use std::path::PathBuf;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupNote {
    /// Relative to the cgroup2 mount, starting with '/'; None when the
    /// kernel could not read it whole.
    pub path: Option<PathBuf>,
    /// The uid of the task that made it (its owner, as mkdir makes one),
    /// when the kernel could say.
    pub creator_uid: Option<u32>,
}
