//! What refused an access: a device program, a v1 devices.list, or "cannot tell".

use serde::Serialize;

/// What refused an access, as far as gpu-trace can show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum DeniedBy {
    /// This cgroup_device program.
    Program {
        id: u32,
        name: String,
        tag: String,
        attached_at: String,
        /// When it was loaded (RFC 3339), i.e. when its rules were written.
        loaded_at: String,
        /// The same on the kernel's boot-time clock (ns).
        #[serde(skip)]
        loaded_boot_ns: u64,
    },
    /// cgroup v1's devices controller of this (v1) cgroup.
    DevicesList { cgroup: String, note: String },
    /// The evaluator could not say; never a guess.
    Unknown { note: String },
}

impl DeniedBy {
    pub fn describe(&self) -> String {
        match self {
            DeniedBy::Program {
                id,
                name,
                attached_at,
                ..
            } if name.is_empty() => format!("prog {id} at {attached_at}"),
            DeniedBy::Program {
                id,
                name,
                attached_at,
                ..
            } => format!("prog {id} ({name}) at {attached_at}"),
            DeniedBy::DevicesList { cgroup, note } => {
                format!("devices.list of v1 cgroup {cgroup} ({note})")
            }
            DeniedBy::Unknown { note } => note.clone(),
        }
    }
}
