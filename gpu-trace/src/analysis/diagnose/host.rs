//! The host reads a diagnosis makes besides /proc/devices: one seam, so
//! that the unit tests put their own answers in and none goes around it.

use std::{cell::RefCell, path::PathBuf, rc::Rc, time::Instant};

use crate::{
    analysis::cdi_check::{stale_entries, StaleCdiEntry},
    host::{
        cdi_specs::{read_spec_nodes, CDI_DIRS_ENV, DEFAULT_CDI_DIRS},
        in_root::mode_and_group_in,
        nvidia_runtime_config::no_cgroups_config,
        proc_devices::{nvidia_uvm_loaded, CharMajors},
        proc_pid::groups_of,
        security_modules::{security_module_of, SecurityModule},
    },
};

/// How long a reading of the CDI specs is used: specs change rarely, and a
/// flood of new diagnoses must not re-read them each time.
const CDI_REREAD_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// Each read is made on a new diagnosis only (diagnoses are cached).
#[derive(Debug)]
pub(super) struct Host {
    /// NVIDIA's runtime configuration, when it says `no-cgroups = true`.
    pub no_cgroups_config: fn() -> Option<PathBuf>,
    /// The node's mode and group as process `pid` sees the path, and the
    /// process's groups; None when it is gone.
    pub node_group: fn(u32, &[u8]) -> Option<NodeGroup>,
    /// The security module confining process `pid`.
    pub security_module: fn(u32) -> Option<SecurityModule>,
    /// CDI spec entries that no longer match the host.
    pub stale_cdi: fn(&CharMajors) -> Vec<StaleCdiEntry>,
    /// Whether the nvidia_uvm module is loaded.
    pub uvm_loaded: fn() -> bool,
    /// The stale CDI entries as last read, and when.
    cdi_reading: RefCell<Option<(Instant, Rc<[StaleCdiEntry]>)>>,
}

impl Default for Host {
    fn default() -> Self {
        Self {
            no_cgroups_config,
            node_group: node_group_now,
            security_module: security_module_of,
            stale_cdi: stale_cdi_now,
            uvm_loaded: nvidia_uvm_loaded,
            cdi_reading: RefCell::new(None),
        }
    }
}

impl Host {
    /// The stale CDI entries, read at most every CDI_REREAD_AFTER.
    pub fn stale_cdi_entries(&self, majors: &CharMajors) -> Rc<[StaleCdiEntry]> {
        let mut cached = self.cdi_reading.borrow_mut();
        match &*cached {
            Some((read_at, entries)) if read_at.elapsed() < CDI_REREAD_AFTER => Rc::clone(entries),
            _ => {
                let entries: Rc<[StaleCdiEntry]> = (self.stale_cdi)(majors).into();
                *cached = Some((Instant::now(), Rc::clone(&entries)));
                entries
            }
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NodeGroup {
    pub mode: u32,
    pub gid: u32,
    pub process_groups: Vec<u32>,
}

fn node_group_now(pid: u32, path: &[u8]) -> Option<NodeGroup> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let (mode, gid) = mode_and_group_in(&root, path)?;
    Some(NodeGroup {
        mode,
        gid,
        process_groups: groups_of(pid)?,
    })
}

/// Specs in GPU_TRACE_CDI_DIRS (colon-separated) or the default directories.
fn stale_cdi_now(majors: &CharMajors) -> Vec<StaleCdiEntry> {
    let dirs: Vec<PathBuf> = match std::env::var_os(CDI_DIRS_ENV) {
        Some(dirs) => std::env::split_paths(&dirs).collect(),
        None => DEFAULT_CDI_DIRS.iter().map(PathBuf::from).collect(),
    };
    stale_entries(&read_spec_nodes(&dirs).0, majors)
}
