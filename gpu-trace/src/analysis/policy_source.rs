//! Where attribution reads policies from: the kernel and /proc on a live
//! host, recorded programs in unit tests. The seam keeps attribution's
//! decisions testable without root.

use std::{fs::File, io, path::PathBuf};

use gpu_trace_policy::DevicesList;

use crate::{
    host::{
        cgroup_handle::{ById, CgroupHandles},
        mountinfo::v1_controller_mount_in,
        proc_pid::{devices_list_of, read_of_the_sighted},
    },
    kernel::{
        bpf_sys::device_programs,
        programs_in_force::{CgroupPolicy, ProgramCache},
    },
    model::denied_by::V1CgroupFoundBy,
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
    /// Whether `cgroup` is still there.
    fn cgroup_exists(&mut self, cgroup: &std::path::Path) -> bool;
    /// The policy of `cgroup`, since removed, made of `sighted`: the
    /// programs the kernel recorded in force at the sighting, each read by
    /// id while it lives (a program outlives its cgroup for a moment).
    fn policy_at_sighting(
        &mut self,
        cgroup: &std::path::Path,
        sighted: &[u32],
    ) -> anyhow::Result<CgroupPolicy>;
    /// Reads the programs `sighted` at once, before anything slower: if
    /// their cgroup is being removed, they are freed moments later, and
    /// `policy_at_sighting` needs what was read of them.
    fn read_sighted_now(&mut self, _sighted: &[u32]) {}
    /// The v1 devices.list of the cgroup the kernel recorded at the
    /// sighting (`captured`, its kernfs id), else of process `pid`'s while
    /// that pid still names the process sighted at `sighted_boot_ns`.
    fn devices_list(&mut self, pid: u32, sighted_boot_ns: u64, captured: Option<u64>) -> V1List;
}

/// What the v1 devices.list of an access's process was found to be.
pub enum V1List {
    Found(DevicesList, V1CgroupFoundBy),
    /// No v1 devices controller on this host.
    NoController,
    /// The cgroup recorded at the sighting is gone, and so is the process.
    CgroupGone,
    /// Nothing was recorded at the sighting, and the process is gone (or
    /// its pid is another's now).
    ProcessGone,
}

/// The live host: bpf(2) queries under the cgroup2 mount, /proc for v1.
pub struct LiveHost {
    mount: PathBuf,
    programs: ProgramCache,
    /// The v1 devices hierarchy's cgroups by id, once opened (None inside:
    /// no such hierarchy, or the kernel will not open them for us).
    v1_handles: Option<Option<(PathBuf, CgroupHandles)>>,
}

impl LiveHost {
    pub fn new(mount: impl Into<PathBuf>) -> Self {
        Self {
            mount: mount.into(),
            programs: ProgramCache::default(),
            v1_handles: None,
        }
    }

    /// The devices.list of v1 devices cgroup `id`; None when it cannot be
    /// opened by id here, Some(Err) when it is gone.
    fn v1_list_by_id(&mut self, id: u64) -> Option<io::Result<DevicesList>> {
        let (mount, handles) = self
            .v1_handles
            .get_or_insert_with(|| {
                let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
                let mount = v1_controller_mount_in(&mountinfo, "devices")?;
                let handles = CgroupHandles::open(&mount).ok()?;
                Some((mount, handles))
            })
            .as_ref()?;
        let cgroup = match handles.path_of(id) {
            ById::Path(cgroup) => cgroup,
            ById::Gone => return Some(Err(io::ErrorKind::NotFound.into())),
            ById::Unnamed => return None,
        };
        let dir = mount.join(cgroup.strip_prefix("/").unwrap_or(&cgroup));
        Some(
            std::fs::read_to_string(dir.join("devices.list")).map(|text| DevicesList {
                cgroup: cgroup.to_string_lossy().into_owned(),
                lines: text.lines().map(str::to_string).collect(),
            }),
        )
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

    fn cgroup_exists(&mut self, cgroup: &std::path::Path) -> bool {
        self.mount
            .join(cgroup.strip_prefix("/").unwrap_or(cgroup))
            .is_dir()
    }

    fn policy_at_sighting(
        &mut self,
        cgroup: &std::path::Path,
        sighted: &[u32],
    ) -> anyhow::Result<CgroupPolicy> {
        CgroupPolicy::of_sighted_programs(&self.mount, cgroup, sighted, &mut self.programs)
    }

    fn read_sighted_now(&mut self, sighted: &[u32]) {
        self.programs.read_ahead(sighted);
    }

    fn devices_list(&mut self, pid: u32, sighted_boot_ns: u64, captured: Option<u64>) -> V1List {
        let by_id = captured.and_then(|id| self.v1_list_by_id(id));
        let cgroup_gone = match by_id {
            Some(Ok(list)) => return V1List::Found(list, V1CgroupFoundBy::Sighting),
            Some(Err(_)) => true,
            None => false,
        };
        // A pid reused since the sighting would lend another process's cgroup.
        match read_of_the_sighted(pid, sighted_boot_ns, |pid| devices_list_of(pid).ok()) {
            Some(Some(list)) => V1List::Found(list, V1CgroupFoundBy::ProcPid),
            Some(None) => V1List::NoController,
            None if cgroup_gone => V1List::CgroupGone,
            None => V1List::ProcessGone,
        }
    }
}
