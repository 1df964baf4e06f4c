//! One device access with everything gpu-trace worked out about it: the
//! record every later layer reads and renders.

use std::{path::PathBuf, rc::Rc, time::SystemTime};

use crate::model::{
    access::DeviceAccess,
    allocation::GpuAllocation,
    container::Container,
    denied_by::DeniedBy,
    diagnosis::Diagnosis,
    gpu::{GpuIdentity, MigCapability},
    nic::RdmaNic,
    node::NvidiaNode,
    rendered::Rendered,
    vendor::{Role, Vendor},
};

#[derive(Debug, Clone)]
pub struct Record {
    pub access: DeviceAccess,
    pub time: SystemTime,
    /// How many identical accesses this record stands for (folding, see
    /// fold.rs) and when the first and last of them happened.
    pub count: u64,
    pub first_seen: SystemTime,
    pub last_seen: SystemTime,
    /// Relative to the cgroup2 mount; None when the cgroup is gone and was never seen.
    pub cgroup: Option<PathBuf>,
    pub container: Rc<Rendered<Container>>,
    /// Driver that owns the major per /proc/devices; None when no driver does.
    pub driver: Option<String>,
    /// Node name: "nvidia-uvm", "nvidiactl", "nvidia0", ...
    pub device: Option<String>,
    /// Which NVIDIA node this is, from its driver or, failing that, its path.
    pub node: Option<NvidiaNode>,
    /// The GPU a GPU node (or a MIG capability node of one GPU) stands for,
    /// from the driver's /proc/driver/nvidia/gpus.
    pub gpu: Option<Rc<Rendered<GpuIdentity>>>,
    /// For an RDMA node: the NIC it belongs to.
    pub nic: Option<Rc<Rendered<RdmaNic>>>,
    /// What a MIG capability node stands for (/proc/driver/nvidia-caps).
    pub mig: Option<Rc<Rendered<MigCapability>>>,
    /// For a GPU denied to a Kubernetes container: whether the kubelet
    /// allocated it to the container (its PodResources API).
    pub allocation: Option<Rc<Rendered<GpuAllocation>>>,
    /// Whose accelerator and what the node is for, when known.
    pub vendor: Option<Vendor>,
    pub role: Option<Role>,
    /// Filled in by the attribution stage for denials: the policy that refused it.
    pub denied_by: Option<Rc<Rendered<DeniedBy>>>,
    /// Filled in by the diagnosis stage for problems.
    pub diagnosis: Option<Rc<Diagnosis>>,
    /// What this record stands for once folding and budgets are applied.
    pub kind: RecordKind,
}

/// A written record is one access, a window's repeats of one, or the
/// problems of one cgroup (or of many) that exceeded the record budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordKind {
    Event,
    Repeats,
    /// `count` problems in `cgroups` cgroups, shown by the last of them.
    Summary {
        cgroups: u64,
    },
}

impl RecordKind {
    pub fn name(self) -> &'static str {
        match self {
            RecordKind::Event => "event",
            RecordKind::Repeats => "repeats",
            RecordKind::Summary { .. } => "summary",
        }
    }
}
