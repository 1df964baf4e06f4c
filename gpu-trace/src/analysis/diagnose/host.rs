//! The host reads a diagnosis makes besides /proc/devices: one seam, so
//! that the unit tests put their own answers in and none goes around it.

use std::{
    path::PathBuf,
    sync::{Arc, Mutex, OnceLock},
    thread,
    time::Duration,
};

use super::facts::SightedProcess;
use crate::{
    analysis::cdi_check::{stale_entries, StaleCdiEntry},
    host::{
        cdi_specs::{read_spec_nodes, SpecNode, CDI_DIRS_ENV, DEFAULT_CDI_DIRS},
        in_root::mode_and_group_in,
        nvidia_runtime_config::no_cgroups_config,
        proc_devices::{nvidia_uvm_loaded, CharMajors},
        proc_pid::{groups_of, is_the_sighted_process, read_of_the_sighted},
        security_modules::{security_module_of, SecurityModule},
    },
};

/// How often the CDI specs are read again, on a thread of their own:
/// specs change rarely, and no diagnosis waits for a reading.
const CDI_REREAD_EVERY: Duration = Duration::from_secs(5);

/// Each read is made on a new diagnosis only (diagnoses are cached).
#[derive(Debug)]
pub(super) struct Host {
    /// NVIDIA's runtime configuration, when it says `no-cgroups = true`.
    pub no_cgroups_config: fn() -> Option<PathBuf>,
    /// The node's mode and group as the sighted process sees the path, and
    /// the process's groups; None when it is gone (or its pid another's).
    pub node_group: fn(SightedProcess, &[u8]) -> Option<NodeGroup>,
    /// Whether the sighted process is still there under its pid.
    pub still_there: fn(SightedProcess) -> bool,
    /// The security module confining the sighted process.
    pub security_module: fn(SightedProcess) -> Option<SecurityModule>,
    /// CDI spec entries that no longer match the host.
    pub stale_cdi: fn(&CharMajors) -> Vec<StaleCdiEntry>,
    /// Whether the nvidia_uvm module is loaded.
    pub uvm_loaded: fn() -> bool,
}

impl Default for Host {
    fn default() -> Self {
        Self {
            no_cgroups_config,
            node_group: node_group_now,
            still_there: |p| is_the_sighted_process(p.pid, p.at_boot_ns),
            security_module: |p| read_of_the_sighted(p.pid, p.at_boot_ns, security_module_of),
            stale_cdi: stale_cdi_now,
            uvm_loaded: nvidia_uvm_loaded,
        }
    }
}

/// Reads the CDI specs once now (as watch, run and selftest start, before
/// their first event), and from then on in the background.
pub fn read_cdi_specs_in_background() {
    spec_nodes();
}

impl Host {
    /// The CDI spec entries that no longer match the host's majors.
    pub fn stale_cdi_entries(&self, majors: &CharMajors) -> Vec<StaleCdiEntry> {
        (self.stale_cdi)(majors)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct NodeGroup {
    pub mode: u32,
    pub gid: u32,
    pub process_groups: Vec<u32>,
}

fn node_group_now(process: SightedProcess, path: &[u8]) -> Option<NodeGroup> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
    read_of_the_sighted(process.pid, process.at_boot_ns, |pid| {
        let root = PathBuf::from(format!("/proc/{pid}/root"));
        let (mode, gid) = mode_and_group_in(&root, path)?;
        Some(NodeGroup {
            mode,
            gid,
            process_groups: groups_of(pid)?,
        })
    })
}

/// Stale entries of the specs as last read.
fn stale_cdi_now(majors: &CharMajors) -> Vec<StaleCdiEntry> {
    stale_entries(&spec_nodes(), majors)
}

/// The device nodes of the specs in GPU_TRACE_CDI_DIRS (colon-separated) or
/// the default directories, as last read. The first call reads them; a
/// thread then reads them again every CDI_REREAD_EVERY.
fn spec_nodes() -> Arc<[SpecNode]> {
    static LATEST: OnceLock<Arc<Mutex<Arc<[SpecNode]>>>> = OnceLock::new();
    let latest = LATEST.get_or_init(|| {
        let dirs: Vec<PathBuf> = match std::env::var_os(CDI_DIRS_ENV) {
            Some(dirs) => std::env::split_paths(&dirs).collect(),
            None => DEFAULT_CDI_DIRS.iter().map(PathBuf::from).collect(),
        };
        let latest = Arc::new(Mutex::new(read_spec_nodes(&dirs).0.into()));
        let shared = Arc::clone(&latest);
        // Without the thread, the first reading stands.
        let _ = thread::Builder::new()
            .name("cdi-specs".into())
            .spawn(move || loop {
                thread::sleep(CDI_REREAD_EVERY);
                let nodes: Arc<[SpecNode]> = read_spec_nodes(&dirs).0.into();
                *shared.lock().unwrap_or_else(|e| e.into_inner()) = nodes;
            });
        latest
    });
    Arc::clone(&latest.lock().unwrap_or_else(|e| e.into_inner()))
}
