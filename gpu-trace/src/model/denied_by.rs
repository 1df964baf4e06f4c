//! What refused an access: a device program, a v1 devices.list, or "cannot tell".

use serde::Serialize;

use crate::model::policy_writer::PolicyWriter;

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
        /// Who loaded and attached it, and on what evidence.
        writer: Option<PolicyWriter>,
        /// Other programs in force that allow the same access: stacked
        /// policies, of which every one must allow.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        allowed_by: Vec<AllowingProgram>,
    },
    /// cgroup v1's devices controller of this (v1) cgroup.
    DevicesList {
        cgroup: String,
        note: String,
        /// How the cgroup was found.
        found_by: V1CgroupFoundBy,
    },
    /// The evaluator could not say; never a guess.
    Unknown { note: String },
}

/// How a v1 devices cgroup was found for an access.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum V1CgroupFoundBy {
    /// The cgroup the kernel programs read from the task at the sighting:
    /// the process's own, even once it has exited.
    Sighting,
    /// The process's /proc/PID/cgroup when its event was read (the kernel
    /// recorded none: no BTF chain, or a record held back in the kernel).
    ProcPid,
}

/// A program in force that allows what another denies.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AllowingProgram {
    pub id: u32,
    pub name: String,
    pub attached_at: String,
}

impl DeniedBy {
    /// When it is a program: when it was loaded.
    pub fn loaded_at(&self) -> Option<&str> {
        match self {
            DeniedBy::Program { loaded_at, .. } => Some(loaded_at),
            _ => None,
        }
    }

    /// "prog 920 (sd_devices) at /system.slice/x.scope, written by systemd"
    pub fn describe(&self) -> String {
        match self {
            DeniedBy::Program {
                writer: Some(writer),
                ..
            } if writer.manager != crate::model::policy_writer::Manager::Unknown => {
                format!("{}, written by {}", self.what(), writer.manager.label())
            }
            _ => self.what(),
        }
    }

    fn what(&self) -> String {
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
            DeniedBy::DevicesList { cgroup, note, .. } => {
                format!("devices.list of v1 cgroup {cgroup} ({note})")
            }
            DeniedBy::Unknown { note } => note.clone(),
        }
    }
}
