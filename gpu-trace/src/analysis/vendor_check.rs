//! What each accelerator vendor's compute stack needs to open, and whether
//! the target may: ROCm (kfd and a render node), Level Zero / oneAPI (an
//! Intel render or accel node), Gaudi (an accel node). NVIDIA's CUDA set is
//! access_check's views. Asked about, or for the vendors present on the host.

use std::path::{Path, PathBuf};

use gpu_trace_common::{ACCESS_READ, ACCESS_WRITE};
use gpu_trace_policy::{DeviceQuery, DevicesList};
use serde::Serialize;

use crate::{
    analysis::access_check::decide,
    host::{in_root::char_devices_in, proc_devices::CharMajors, sysfs_devices::device_facts},
    kernel::programs_in_force::CgroupPolicy,
    model::vendor::{vendor_and_role, Role, Vendor, ACCEL_MAJOR, DRM_MAJOR},
};

/// One vendor's node set in the target's view.
#[derive(Debug, Serialize)]
pub struct VendorSet {
    pub vendor: Vendor,
    /// The compute stack the set is for: "ROCm", "Level Zero", "Gaudi".
    pub stack: &'static str,
    pub nodes: Vec<VendorNode>,
    /// What the stack needs and the view lacks or may not open.
    pub missing: Vec<String>,
    pub usable: bool,
}

#[derive(Debug, Serialize)]
pub struct VendorNode {
    pub path: PathBuf,
    /// The driver of its major, per /proc/devices.
    pub driver: Option<String>,
    pub role: Role,
    pub major: u32,
    pub minor: u32,
    /// "allowed" (rw), "denied" or "unknown".
    pub verdict: &'static str,
    pub decided_by: String,
}

/// The sets of the non-NVIDIA vendors in `asked`, or, when none is asked,
/// of those present: kfd or Habana's driver in /proc/devices, or an
/// Intel, AMD or Habana DRM or accel node in `root`'s /dev.
pub fn vendor_sets(
    root: &Path,
    policy: &CgroupPolicy,
    v1: Option<&DevicesList>,
    majors: &CharMajors,
    asked: &[Vendor],
) -> Vec<VendorSet> {
    let mut found: Vec<(PathBuf, u64)> = char_devices_in(root, "dev");
    found.extend(char_devices_in(root, "dev/dri"));
    found.extend(char_devices_in(root, "dev/accel"));
    let nodes: Vec<(Option<Vendor>, VendorNode)> = found
        .into_iter()
        .filter_map(|(path, rdev)| {
            let (major, minor) = (libc::major(rdev), libc::minor(rdev));
            let driver = majors.driver(major);
            if driver != Some("kfd")
                && driver != Some("habanalabs")
                && major != DRM_MAJOR
                && major != ACCEL_MAJOR
            {
                return None;
            }
            let (vendor, role) =
                vendor_and_role(driver, major, minor, None, || device_facts(major, minor));
            let (decision, decided_by) = decide(
                policy,
                v1,
                &DeviceQuery::char_device(major, minor, ACCESS_READ | ACCESS_WRITE),
            );
            let verdict = decision.name();
            Some((
                vendor,
                VendorNode {
                    path,
                    driver: driver.map(str::to_string),
                    role: role?,
                    major,
                    minor,
                    verdict,
                    decided_by,
                },
            ))
        })
        .collect();
    let present = |vendor: Vendor| {
        let by_driver = match vendor {
            Vendor::Amd => majors.has_driver("kfd"),
            Vendor::Habana => majors.has_driver("habanalabs"),
            _ => false,
        };
        by_driver || nodes.iter().any(|(v, _)| *v == Some(vendor))
    };
    [Vendor::Amd, Vendor::Intel, Vendor::Habana]
        .into_iter()
        .filter(|&v| {
            if asked.is_empty() {
                present(v)
            } else {
                asked.contains(&v)
            }
        })
        .map(|vendor| set_of(vendor, &nodes))
        .collect()
}

/// What a stack needs: one node of each kind, which the target may open.
type Need = (&'static str, fn(&VendorNode) -> bool);

fn is_kfd(node: &VendorNode) -> bool {
    node.driver.as_deref() == Some("kfd")
}

fn is_render(node: &VendorNode) -> bool {
    node.role == Role::Render
}

fn is_accel(node: &VendorNode) -> bool {
    node.major == ACCEL_MAJOR
}

fn set_of(vendor: Vendor, all: &[(Option<Vendor>, VendorNode)]) -> VendorSet {
    const RENDER: Need = ("a render node (/dev/dri/renderD*)", is_render);
    let (stack, needs): (&str, &[Need]) = match vendor {
        Vendor::Amd => ("ROCm", &[("/dev/kfd", is_kfd), RENDER]),
        Vendor::Intel => ("Level Zero", &[RENDER]),
        Vendor::Habana => ("Gaudi", &[("an accel node (/dev/accel/accel*)", is_accel)]),
        Vendor::Nvidia => ("CUDA", &[]),
    };
    // Nodes whose vendor sysfs does not tell may be anyone's.
    let nodes: Vec<&VendorNode> = all
        .iter()
        .filter(|(v, _)| v.is_none_or(|v| v == vendor))
        .map(|(_, node)| node)
        .collect();
    let mut missing = Vec::new();
    for (what, wanted) in needs {
        let candidates: Vec<&&VendorNode> = nodes.iter().filter(|n| wanted(n)).collect();
        match candidates.first() {
            None => missing.push(format!("{what} is missing")),
            Some(first) if !candidates.iter().any(|n| n.verdict == "allowed") => {
                missing.push(format!(
                    "{}: {} ({})",
                    first.path.display(),
                    first.verdict,
                    first.decided_by
                ))
            }
            Some(_) => {}
        }
    }
    VendorSet {
        vendor,
        stack,
        usable: missing.is_empty(),
        missing,
        nodes: nodes
            .into_iter()
            .map(|n| VendorNode {
                path: n.path.clone(),
                driver: n.driver.clone(),
                role: n.role,
                major: n.major,
                minor: n.minor,
                verdict: n.verdict,
                decided_by: n.decided_by.clone(),
            })
            .collect(),
    }
}
