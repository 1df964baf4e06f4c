//! Where attribution reads policies from: the kernel and /proc on a live
//! host, recorded programs in unit tests. The seam keeps attribution's
//! decisions testable without root.

use std::{fs::File, io, path::PathBuf};

use gpu_trace_policy::DevicesList;

use crate::{
    host::proc_pid::devices_list_of,
    kernel::{
        bpf_sys::device_programs,
        programs_in_force::{CgroupPolicy, ProgramCache},
    },
};

/// The device policies in force, as attribution needs them.
pub trait PolicySource {
    /// The ids of the programs in force on `cgroup` (relative to the cgroup2
    /// mount), observers included: cheap, to tell whether they changed.
    fn program_ids(&mut self, cgroup: &std::path::Path) -> anyhow::Result<Vec<u32>>;
    /// The ids of the programs attached at `cgroup` itself.
    fn own_program_ids(&mut self, cgroup: &std::path::Path) -> anyhow::Result<Vec<u32>>;
    /// The policy in force on `cgroup` made of `effective`, the ids
    /// `program_ids` just gave, in the kernel's order.
    fn policy(
        &mut self,
        cgroup: &std::path::Path,
        effective: &[u32],
    ) -> anyhow::Result<CgroupPolicy>;
    /// Process `pid`'s v1 devices.list; None without a v1 devices controller.
    fn devices_list(&mut self, pid: u32) -> io::Result<Option<DevicesList>>;
}

/// The live host: bpf(2) queries under the cgroup2 mount, /proc for v1.
pub struct LiveHost {
    mount: PathBuf,
    programs: ProgramCache,
}

impl LiveHost {
    pub fn new(mount: impl Into<PathBuf>) -> Self {
        Self {
            mount: mount.into(),
            programs: ProgramCache::default(),
        }
    }
}

impl LiveHost {
    fn query(&self, cgroup: &std::path::Path, effective: bool) -> anyhow::Result<Vec<u32>> {
        let dir = self.mount.join(cgroup.strip_prefix("/").unwrap_or(cgroup));
        Ok(device_programs(File::open(&dir)?, effective)?.program_ids)
    }
}

impl PolicySource for LiveHost {
    fn program_ids(&mut self, cgroup: &std::path::Path) -> anyhow::Result<Vec<u32>> {
        self.query(cgroup, true)
    }

    fn own_program_ids(&mut self, cgroup: &std::path::Path) -> anyhow::Result<Vec<u32>> {
        self.query(cgroup, false)
    }

    fn policy(
        &mut self,
        cgroup: &std::path::Path,
        effective: &[u32],
    ) -> anyhow::Result<CgroupPolicy> {
        CgroupPolicy::of_programs(&self.mount, cgroup, effective, &mut self.programs)
    }

    fn devices_list(&mut self, pid: u32) -> io::Result<Option<DevicesList>> {
        devices_list_of(pid)
    }
}
