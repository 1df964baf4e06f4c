//! The devices next to the GPU in the target's view (RDMA verbs and
//! management nodes, IMEX channels, GPUDirect, VFIO groups, NVSwitch
//! nodes), and whether
//! the target may open each. Listed beside the GPU's nodes, never judged
//! for `usable`: a container may rightly have none of them, so a denial
//! here is a prediction to read, not a problem.

use std::path::{Path, PathBuf};

use gpu_trace_common::{ACCESS_READ, ACCESS_WRITE};
use gpu_trace_policy::{DeviceQuery, DevicesList};
use serde::Serialize;

use crate::{
    analysis::access_check::decide,
    host::{
        in_root::char_devices_in,
        proc_devices::CharMajors,
        sysfs_devices::{device_facts, rdma_nic},
    },
    kernel::programs_in_force::CgroupPolicy,
    model::{
        nic::RdmaNic,
        node::NvidiaNode,
        vendor::{vendor_and_role, Role, Vendor},
    },
};

/// Where their nodes are: gdrdrv and nvidia-fsN in /dev itself.
const DIRS: [&str; 4] = [
    "dev",
    "dev/infiniband",
    "dev/nvidia-caps-imex-channels",
    "dev/vfio",
];

#[derive(Debug, Serialize)]
pub struct NeighbourNode {
    pub path: PathBuf,
    pub driver: String,
    pub vendor: Option<Vendor>,
    pub role: Role,
    pub major: u32,
    pub minor: u32,
    /// "allowed" (rw), "denied" or "unknown".
    pub verdict: &'static str,
    pub decided_by: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nic: Option<RdmaNic>,
}

/// Every such node in `root`'s /dev, by their drivers' names in
/// /proc/devices, with the target's verdict.
pub fn neighbour_nodes(
    root: &Path,
    policy: &CgroupPolicy,
    v1: Option<&DevicesList>,
    majors: &CharMajors,
) -> Vec<NeighbourNode> {
    let mut nodes: Vec<NeighbourNode> = DIRS
        .iter()
        .flat_map(|dir| char_devices_in(root, dir))
        .filter_map(|(path, rdev)| {
            let (major, minor) = (libc::major(rdev), libc::minor(rdev));
            let driver = majors.driver(major)?;
            // NVIDIA's own node for NVSwitch's, whose role its driver's name
            // alone does not give.
            let node = NvidiaNode::from_device(driver, minor);
            let (vendor, role) = vendor_and_role(Some(driver), major, minor, node, || {
                device_facts(major, minor)
            });
            let role = role.filter(|r| r.is_next_to_the_gpu())?;
            let (decision, decided_by) = decide(
                policy,
                v1,
                &DeviceQuery::char_device(major, minor, ACCESS_READ | ACCESS_WRITE),
            );
            Some(NeighbourNode {
                path,
                driver: driver.to_string(),
                vendor,
                role,
                major,
                minor,
                verdict: decision.name(),
                decided_by,
                nic: (role == Role::Rdma)
                    .then(|| rdma_nic(major, minor))
                    .flatten(),
            })
        })
        .collect();
    // By path: the order a directory lists its entries in is no order.
    nodes.sort_by(|a, b| a.path.cmp(&b.path));
    nodes
}
