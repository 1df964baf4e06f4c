//! What a cause may read: `Facts` about one access, which is also the
//! cache key, and the `Context` whose change empties the cache.

use std::rc::Rc;

use crate::{
    analysis::diagnose::host::Host,
    cgroup::first_process::FirstProcess,
    host::proc_devices::CharMajors,
    model::{
        access::Verdict, allocation::GpuAllocation, container::Container, denied_by::DeniedBy,
        node::NvidiaNode, record::Record, rendered::Rendered, vendor::Role,
    },
};

/// Everything a cause reads about one access. It is the cache key as it
/// stands: a cause that needs another input adds a field here, and two
/// accesses that differ in it are diagnosed apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct Facts {
    pub cgroup_id: u64,
    pub verdict: Verdict,
    pub major: u32,
    pub minor: u32,
    pub uid: u32,
    /// The open's path and result, when an open call was traced.
    pub path: Option<Vec<u8>>,
    pub ret: Option<i32>,
    /// The process, for the causes that read its own view of the host (its
    /// groups, its security module); None for the rest, so that a retry
    /// loop spread over many processes is diagnosed once.
    pub process: Option<SightedProcess>,
    /// By value: an unresolved cgroup gets a new one with each record.
    pub container: ByValue<Rendered<Container>>,
    /// Enrichment: the major's driver today, the node's name and kind.
    pub driver: Option<String>,
    pub device: Option<String>,
    pub node: Option<NvidiaNode>,
    pub role: Option<Role>,
    /// The policy attribution found, as it cached it.
    pub culprit: Option<Same<Rendered<DeniedBy>>>,
    /// The cgroup's first process, when a program denied it.
    pub started: Option<FirstProcess>,
    /// The culprit unit's DeviceAllow= list, by content.
    pub device_allow: Option<Rc<[String]>>,
    /// For a pod's denied GPU: whether the kubelet allocated it.
    pub allocation: Option<ByValue<Rendered<GpuAllocation>>>,
}

impl Facts {
    pub fn of(
        record: &Record,
        started: Option<FirstProcess>,
        device_allow: Option<&Rc<[String]>>,
    ) -> Self {
        let a = &record.access;
        let open = a.open.as_ref();
        let ret = open.and_then(|o| o.ret);
        let reads_process = match a.verdict {
            Verdict::FailedBeforeDeviceCheck => ret == Some(-libc::EACCES),
            Verdict::DeniedAfterDeviceCheck => true,
            _ => false,
        };
        Self {
            cgroup_id: a.cgroup_id,
            verdict: a.verdict,
            major: a.major,
            minor: a.minor,
            uid: a.uid,
            path: open.map(|o| o.path.clone()),
            ret,
            process: reads_process.then_some(SightedProcess {
                pid: a.pid,
                at_boot_ns: a.boot_ns,
            }),
            container: ByValue(Rc::clone(&record.container)),
            driver: record.driver.clone(),
            device: record.device.clone(),
            node: record.node,
            role: record.role,
            culprit: record.denied_by.clone().map(Same),
            started,
            device_allow: device_allow.cloned(),
            allocation: record.allocation.clone().map(ByValue),
        }
    }

    /// The open's errno, when it failed.
    pub fn errno(&self) -> Option<i32> {
        self.ret.filter(|&ret| ret < 0).map(|ret| -ret)
    }

    /// Refused by a BPF device policy (or by one not yet told apart).
    pub fn denied_by_policy(&self) -> bool {
        matches!(
            self.verdict,
            Verdict::DeniedByBpfPolicy | Verdict::DeniedLayerUnknown
        )
    }

    pub fn container(&self) -> &Container {
        &self.container.0
    }

    pub fn culprit(&self) -> Option<&DeniedBy> {
        self.culprit.as_ref().map(|c| &**c.0)
    }
}

/// A process as sighted: what it reads of /proc/PID later is its own only
/// while that pid still names a process started no later than this.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct SightedProcess {
    pub pid: u32,
    pub at_boot_ns: u64,
}

/// What a cause may read besides the facts; the diagnoser empties its
/// cache whenever any of it changes.
pub(super) struct Context<'a> {
    /// /proc/devices, as of the generation the cache was filled against.
    pub majors: &'a CharMajors,
    /// This cgroup opened this device earlier in the trace.
    pub opened_before: bool,
    /// This cgroup was seen opening NVIDIA's frontend (major 195).
    pub frontend_allowed: bool,
    /// Everything else read from the host, on each new diagnosis.
    pub host: &'a Host,
}

/// A shared value compared and hashed by what it holds (by its allocation
/// first, which is the common case and costs nothing).
#[derive(Debug)]
pub(super) struct ByValue<T>(pub Rc<T>);

impl<T> Clone for ByValue<T> {
    fn clone(&self) -> Self {
        Self(Rc::clone(&self.0))
    }
}

impl<T: std::ops::Deref<Target = U>, U: PartialEq> PartialEq for ByValue<T> {
    fn eq(&self, other: &Self) -> bool {
        Rc::ptr_eq(&self.0, &other.0) || **self.0 == **other.0
    }
}

impl<T: std::ops::Deref<Target = U>, U: Eq> Eq for ByValue<T> {}

impl<T: std::ops::Deref<Target = U>, U: std::hash::Hash> std::hash::Hash for ByValue<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (**self.0).hash(state)
    }
}

/// A shared value compared and hashed by its allocation: the caches that
/// hand it out give the same one for the same answer, and holding it keeps
/// its address from naming another while cached.
#[derive(Debug)]
pub(super) struct Same<T>(pub Rc<T>);

impl<T> Clone for Same<T> {
    fn clone(&self) -> Self {
        Self(Rc::clone(&self.0))
    }
}

impl<T> PartialEq for Same<T> {
    fn eq(&self, other: &Self) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}

impl<T> Eq for Same<T> {}

impl<T> std::hash::Hash for Same<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Rc::as_ptr(&self.0), state)
    }
}
