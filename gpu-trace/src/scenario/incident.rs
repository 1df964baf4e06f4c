//! The incident itself: a scratch cgroup whose device policy denies a
//! stand-in for nvidia-uvm's dynamic major and allows NVIDIA's 195, and
//! the nodes to open. `selftest`, the kernel tests and the bench set it up
//! alike.

use std::path::{Path, PathBuf};

use gpu_trace_common::{ACCESS_MKNOD, ACCESS_READ, ACCESS_WRITE};

use crate::{
    model::node::NVIDIA_FRONTEND_MAJOR,
    scenario::{
        interrupt::Made, run_probe, DeviceNodes, OpenMode, ProbeOp, ProbeOutcome, ScratchCgroup,
        ScratchPolicy,
    },
};

/// The denied node, and two its policy allows.
pub const UVM_NODE: &str = "nvidia-uvm";
pub const GPU_NODE: &str = "nvidia0";
pub const CTL_NODE: &str = "nvidiactl";

pub struct Incident {
    // Declared in drop order: the policy detaches before the cgroup goes.
    pub policy: ScratchPolicy,
    pub nodes: DeviceNodes,
    pub cgroup: ScratchCgroup,
    /// The stand-in for the uvm major, which the policy denies (rwm).
    pub uvm_major: u32,
}

impl Incident {
    /// Makes `<cgroup2 mount>/<name>` (unique: add a pid) with the policy,
    /// and the nodes in a directory of their own. `made` hears of the
    /// cgroup and the directory as soon as each exists (selftest has them
    /// removed on an interrupt).
    pub fn set_up(
        cgroup2_mount: &Path,
        name: &str,
        uvm_major: u32,
        made: impl Fn(Made),
    ) -> anyhow::Result<Self> {
        let cgroup = ScratchCgroup::create(cgroup2_mount, name)?;
        made(Made::Cgroup(cgroup.path().to_path_buf()));
        let policy = ScratchPolicy::attach(
            &cgroup,
            &[(uvm_major, ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD)],
        )?;
        let nodes = DeviceNodes::create(&[
            (UVM_NODE, uvm_major, 0),
            (GPU_NODE, NVIDIA_FRONTEND_MAJOR, 0),
            (CTL_NODE, NVIDIA_FRONTEND_MAJOR, 255),
        ])?;
        made(Made::Dir(nodes.dir().to_path_buf()));
        Ok(Self {
            policy,
            nodes,
            cgroup,
            uvm_major,
        })
    }

    pub fn node(&self, name: &str) -> PathBuf {
        self.nodes.path(name)
    }

    /// Opening `node` read-write, as a probe does it.
    pub fn open_rw(&self, node: &str) -> ProbeOp {
        ProbeOp::Open {
            path: self.node(node),
            mode: OpenMode::ReadWrite,
        }
    }

    /// A child in the cgroup (run by `probe`, gpu-trace's own binary) opens
    /// `nodes` read-write, in order.
    pub fn open_in_cgroup(&self, probe: &Path, nodes: &[&str]) -> anyhow::Result<ProbeOutcome> {
        let ops: Vec<ProbeOp> = nodes.iter().map(|node| self.open_rw(node)).collect();
        run_probe(probe, &[&self.cgroup], &ops)
    }
}
