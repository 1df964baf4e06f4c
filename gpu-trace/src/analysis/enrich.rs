//! Typed events -> records a person can read: wall time, cgroup path,
//! container, driver and node names.

use std::{
    path::PathBuf,
    rc::Rc,
    time::{Duration, Instant},
};

use rustc_hash::FxHashMap;

use crate::{
    cgroup::{
        first_process::{first_process_in, FirstProcess},
        identity::identify_made_by,
        resolver::CgroupResolver,
    },
    host::{
        clock::BootClock,
        nvidia_gpus::NvidiaGpus,
        proc_devices::CharMajors,
        sysfs_devices::{device_facts, rdma_nic},
    },
    model::{
        access::DeviceAccess,
        container::Container,
        gpu::{GpuIdentity, MigCapability},
        nic::RdmaNic,
        node::{major_owner, node_name, NvidiaNode},
        record::{Record, RecordKind},
        rendered::Rendered,
        vendor::{vendor_and_role, DeviceFacts, Role, Vendor},
    },
    runtime::NameSources,
};

pub struct Enricher {
    cgroups: CgroupResolver,
    containers: FxHashMap<u64, Rc<Rendered<Container>>>,
    names: NameSources,
    majors: CharMajors,
    majors_read_at: Instant,
    /// Bumped whenever `majors` changes, so that caches built on it know.
    majors_generation: u64,
    clock: BootClock,
    /// The first process of each cgroup a program denied something in,
    /// asked for on such denials only (it reads every process's start).
    started: FxHashMap<u64, Option<FirstProcess>>,
    /// sysfs facts of DRM and accel nodes, by device number.
    device_facts: FxHashMap<(u32, u32), DeviceFacts>,
    /// RDMA nodes' NICs, bounded as device_facts is.
    nics: FxHashMap<(u32, u32), Option<Rc<Rendered<RdmaNic>>>>,
    /// The NVIDIA driver's GPUs and MIG capabilities, and when last read.
    gpus: NvidiaGpus,
    gpus_read_at: Option<Instant>,
}

/// Device numbers whose sysfs facts are kept; a tenant can open many minors.
const DEVICE_FACTS_LIMIT: usize = 4096;

/// Identities kept; past it the table starts afresh (cgroups come and go,
/// and a tenant can make as many as it likes).
const CONTAINERS_LIMIT: usize = 16_384;

/// How stale the /proc/devices snapshot may be when an unknown major shows up.
const MAJORS_REFRESH: Duration = Duration::from_millis(500);

/// How stale the driver's list of GPUs may be when an unknown minor shows up.
const GPUS_REFRESH: Duration = Duration::from_secs(5);

type GpuOfNode = (
    Option<Rc<Rendered<GpuIdentity>>>,
    Option<Rc<Rendered<MigCapability>>>,
);

impl Enricher {
    pub fn new(cgroups: CgroupResolver, majors: CharMajors) -> Self {
        Self {
            cgroups,
            containers: FxHashMap::default(),
            names: NameSources::default(),
            majors,
            majors_read_at: Instant::now(),
            majors_generation: 0,
            clock: BootClock::now(),
            started: FxHashMap::default(),
            device_facts: FxHashMap::default(),
            nics: FxHashMap::default(),
            gpus: NvidiaGpus::default(),
            gpus_read_at: None,
        }
    }

    /// The GPU and MIG capability a GPU or capability node stands for; the
    /// driver's files are read again when a minor is not in them, at most
    /// every GPUS_REFRESH (GPUs come with the driver, MIG instances are
    /// made and destroyed while it runs).
    fn gpu_of(&mut self, node: Option<NvidiaNode>) -> GpuOfNode {
        let known = |gpus: &NvidiaGpus| match node {
            Some(NvidiaNode::Gpu(minor)) => gpus.gpu(minor).is_some(),
            Some(NvidiaNode::Cap(minor)) => gpus.capability(minor).is_some(),
            _ => true,
        };
        if !known(&self.gpus)
            && self
                .gpus_read_at
                .is_none_or(|at| at.elapsed() > GPUS_REFRESH)
        {
            self.gpus = NvidiaGpus::read();
            self.gpus_read_at = Some(Instant::now());
        }
        match node {
            Some(NvidiaNode::Gpu(minor)) => (self.gpus.gpu(minor).cloned(), None),
            Some(NvidiaNode::Cap(minor)) => {
                let mig = self.gpus.capability(minor).cloned();
                let gpu = mig
                    .as_ref()
                    .and_then(|m| m.gpu)
                    .and_then(|gpu| self.gpus.gpu(gpu).cloned());
                (gpu, mig)
            }
            _ => (None, None),
        }
    }

    /// The NIC of an RDMA node, from sysfs once per node.
    fn nic_of(&mut self, major: u32, minor: u32) -> Option<Rc<Rendered<RdmaNic>>> {
        if self.nics.len() >= DEVICE_FACTS_LIMIT {
            self.nics.clear();
        }
        self.nics
            .entry((major, minor))
            .or_insert_with(|| rdma_nic(major, minor).map(|nic| Rc::new(Rendered::new(nic))))
            .clone()
    }

    /// From the event loop's tick: lets a cgroup walk asked for by a miss
    /// start or land off the path that drains events. When one lands, the
    /// identities of cgroups it did not find are dropped; true then.
    pub fn maintain(&mut self) -> bool {
        if !self.cgroups.maintain() {
            return false;
        }
        let cgroups = &self.cgroups;
        self.containers.retain(|id, _| cgroups.knows(*id));
        self.containers.shrink_to_fit();
        self.started.retain(|id, _| cgroups.knows(*id));
        self.started.shrink_to_fit();
        true
    }

    /// The earliest-started process still in the record's cgroup (not
    /// below it: no walk on the event thread), read once per cgroup: a later first process only makes the
    /// cgroup look younger, so a kept answer never makes a rewrite up.
    pub fn cgroup_started(&mut self, record: &Record) -> Option<FirstProcess> {
        let id = record.access.cgroup_id;
        if let Some(known) = self.started.get(&id) {
            return *known;
        }
        let dir = self.cgroups.mount().join(
            record
                .cgroup
                .as_ref()?
                .strip_prefix("/")
                .unwrap_or(record.cgroup.as_ref()?),
        );
        let first = first_process_in(&dir);
        if self.started.len() >= CONTAINERS_LIMIT {
            self.started.clear();
        }
        self.started.insert(id, first);
        first
    }

    /// The path of cgroup `id`, where it can be named.
    pub fn cgroup_path(&mut self, id: u64) -> Option<PathBuf> {
        self.cgroups.resolve(id).map(PathBuf::from)
    }

    /// Whether cgroup `id` still exists, as far as the last walk knows.
    pub fn knows_cgroup(&self, id: u64) -> bool {
        self.cgroups.knows(id)
    }

    pub fn majors(&self) -> &CharMajors {
        &self.majors
    }

    pub fn majors_generation(&self) -> u64 {
        self.majors_generation
    }

    /// Re-reads /proc/devices; returns true when it changed.
    pub fn refresh_majors(&mut self) -> bool {
        match CharMajors::read() {
            Ok(now) => self.adopt_majors(now),
            Err(_) => {
                self.majors_read_at = Instant::now();
                false
            }
        }
    }

    /// Takes `now` as /proc/devices read just now (by a caller that needed
    /// it too); returns true when it changed.
    pub fn adopt_majors(&mut self, now: CharMajors) -> bool {
        self.majors_read_at = Instant::now();
        if now == self.majors {
            return false;
        }
        self.majors = now;
        self.majors_generation += 1;
        true
    }

    pub fn enrich(&mut self, access: DeviceAccess) -> Record {
        let char_device = access.device_seen && !access.block_device;
        if char_device
            && !self.majors.is_registered(access.major)
            && self.majors_read_at.elapsed() > MAJORS_REFRESH
        {
            self.refresh_majors();
        }
        let driver = char_device
            .then(|| self.majors.driver(access.major).map(str::to_string))
            .flatten();
        let from_path = || {
            access
                .open
                .as_ref()
                .and_then(|o| NvidiaNode::from_path(&o.path))
        };
        let node = match major_owner(driver.as_deref(), access.major).filter(|_| char_device) {
            Some(owner) => NvidiaNode::from_device(owner, access.minor),
            None => from_path(),
        };
        let device = match node {
            Some(node) => Some(node.name()),
            None if char_device => node_name(driver.as_deref(), access.major, access.minor),
            None => None,
        };
        let (vendor, role) = if char_device {
            let facts = &mut self.device_facts;
            let (major, minor) = (access.major, access.minor);
            vendor_and_role(driver.as_deref(), major, minor, node, || {
                if facts.len() >= DEVICE_FACTS_LIMIT {
                    facts.clear();
                }
                facts
                    .entry((major, minor))
                    .or_insert_with(|| device_facts(major, minor))
                    .clone()
            })
        } else {
            // Failed before any device check: the path says what it was.
            vendor_of_path(&access, node)
        };
        let (gpu, mig) = self.gpu_of(node);
        let nic = (role == Some(Role::Rdma))
            .then(|| self.nic_of(access.major, access.minor))
            .flatten();
        let cgroup = self.cgroups.resolve(access.cgroup_id).map(PathBuf::from);
        let container = self.container(access.cgroup_id, cgroup.as_ref());
        let time = self.clock.wall_time(access.boot_ns);
        Record {
            vendor,
            role,
            time,
            count: 1,
            first_seen: time,
            last_seen: time,
            cgroup,
            container,
            driver,
            device,
            node,
            gpu,
            nic,
            mig,
            allocation: None,
            denied_by: None,
            diagnosis: None,
            kind: RecordKind::Event,
            access,
        }
    }

    /// Identity per cgroup id, cached: names come from files on disk.
    fn container(&mut self, cgroup_id: u64, cgroup: Option<&PathBuf>) -> Rc<Rendered<Container>> {
        if let Some(known) = self.containers.get(&cgroup_id) {
            return known.clone();
        }
        let path = cgroup.map_or_else(
            || format!("(gone, id {cgroup_id})"),
            |p| p.to_string_lossy().into_owned(),
        );
        let creator = self.cgroups.creator_uid(cgroup_id);
        let container = Rc::new(Rendered::new(identify_made_by(&path, &self.names, creator)));
        if cgroup.is_some() {
            if self.containers.len() >= CONTAINERS_LIMIT {
                self.containers.clear();
            }
            self.containers.insert(cgroup_id, container.clone());
        }
        container
    }
}

/// Vendor and role of a node that failed to open before any device check
/// (missing, refused by its file mode), from its path.
fn vendor_of_path(
    access: &DeviceAccess,
    node: Option<NvidiaNode>,
) -> (Option<Vendor>, Option<Role>) {
    let path = access.open.as_ref().map_or(&[][..], |o| o.path.as_slice());
    if node.is_some() {
        return vendor_and_role(None, 0, 0, node, DeviceFacts::default);
    }
    if path.ends_with(b"/kfd") {
        return (Some(Vendor::Amd), Some(Role::Compute));
    }
    (None, None)
}
