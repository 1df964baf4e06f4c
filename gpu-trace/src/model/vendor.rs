//! Which accelerator vendor a device node belongs to, and what the node is
//! for: NVIDIA's nodes, AMD's kfd, DRM card and render nodes (major 226)
//! and the kernel's accel nodes (major 261, Habana Gaudi, Intel NPUs).

use serde::Serialize;

use crate::model::node::NvidiaNode;

/// DRM's fixed char major: /dev/dri/card* (minors below 128) and
/// /dev/dri/renderD* (128 and up).
pub const DRM_MAJOR: u32 = 226;
/// The accel subsystem's fixed char major: /dev/accel/accel*.
pub const ACCEL_MAJOR: u32 = 261;
/// First minor of DRM's render nodes.
pub const DRM_RENDER_MINOR: u32 = 128;

/// Drivers with a dynamic major that accelerators' compute stacks open:
/// AMD's kfd (ROCm) and Habana's legacy driver.
pub const DYNAMIC_ACCELERATOR_DRIVERS: [&str; 2] = ["kfd", "habanalabs"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Vendor {
    Nvidia,
    Amd,
    Intel,
    Habana,
}

impl Vendor {
    pub fn name(self) -> &'static str {
        match self {
            Vendor::Nvidia => "nvidia",
            Vendor::Amd => "amd",
            Vendor::Intel => "intel",
            Vendor::Habana => "habana",
        }
    }

    /// From its name, as `--vendor` takes it.
    pub fn parse(name: &str) -> Result<Self, String> {
        [Vendor::Nvidia, Vendor::Amd, Vendor::Intel, Vendor::Habana]
            .into_iter()
            .find(|v| v.name() == name)
            .ok_or_else(|| format!("unknown vendor {name:?}: nvidia, amd, intel or habana"))
    }

    /// From a PCI vendor id (sysfs `device/vendor`).
    pub fn from_pci_id(id: u16) -> Option<Self> {
        Some(match id {
            0x10de => Vendor::Nvidia,
            0x1002 | 0x1022 => Vendor::Amd,
            0x8086 => Vendor::Intel,
            0x1da3 => Vendor::Habana,
            _ => return None,
        })
    }

    /// From the kernel driver bound to the device (sysfs `device/driver`).
    pub fn from_kernel_driver(driver: &str) -> Option<Self> {
        Some(match driver {
            "nvidia" | "nvidia-drm" | "nouveau" => Vendor::Nvidia,
            "amdgpu" | "radeon" => Vendor::Amd,
            "i915" | "xe" | "intel_vpu" => Vendor::Intel,
            "habanalabs" => Vendor::Habana,
            _ => return None,
        })
    }
}

/// What a node is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    Compute,
    Render,
    Display,
    Control,
    Uvm,
    Caps,
}

impl Role {
    /// As JSON names it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Compute => "compute",
            Role::Render => "render",
            Role::Display => "display",
            Role::Control => "control",
            Role::Uvm => "uvm",
            Role::Caps => "caps",
        }
    }
}

impl Serialize for Role {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

/// The sysfs facts of a node (`/sys/dev/char/MAJ:MIN/device`), when there.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceFacts {
    pub pci_vendor: Option<u16>,
    pub kernel_driver: Option<String>,
}

/// Vendor and role of a char device, from the driver /proc/devices names
/// for its major, the NVIDIA node it is, and (for DRM and accel nodes,
/// which every vendor shares) what sysfs says of the device.
pub fn vendor_and_role(
    driver: Option<&str>,
    major: u32,
    minor: u32,
    node: Option<NvidiaNode>,
    facts: impl FnOnce() -> DeviceFacts,
) -> (Option<Vendor>, Option<Role>) {
    if let Some(node) = node {
        let role = match node {
            NvidiaNode::Ctl
            | NvidiaNode::NvswitchCtl
            | NvidiaNode::Nvswitch(_)
            | NvidiaNode::Nvlink => Role::Control,
            NvidiaNode::Modeset => Role::Display,
            NvidiaNode::Gpu(_) => Role::Compute,
            NvidiaNode::Uvm | NvidiaNode::UvmTools => Role::Uvm,
            NvidiaNode::Cap(_) => Role::Caps,
        };
        return (Some(Vendor::Nvidia), Some(role));
    }
    match (driver, major) {
        (Some("kfd"), _) => (Some(Vendor::Amd), Some(Role::Compute)),
        (Some("habanalabs"), _) => (Some(Vendor::Habana), Some(Role::Compute)),
        (_, DRM_MAJOR) => {
            let role = if minor >= DRM_RENDER_MINOR {
                Role::Render
            } else {
                Role::Display
            };
            (vendor_from(facts()), Some(role))
        }
        (_, ACCEL_MAJOR) => (vendor_from(facts()), Some(Role::Compute)),
        _ => (None, None),
    }
}

fn vendor_from(facts: DeviceFacts) -> Option<Vendor> {
    facts.pci_vendor.and_then(Vendor::from_pci_id).or_else(|| {
        facts
            .kernel_driver
            .as_deref()
            .and_then(Vendor::from_kernel_driver)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn none() -> DeviceFacts {
        DeviceFacts::default()
    }

    /// What sysfs says of a GPU's node: its PCI vendor id, when it has one,
    /// and the kernel driver bound to it.
    fn sysfs(pci_vendor: Option<u16>, driver: &str) -> impl FnOnce() -> DeviceFacts {
        let facts = DeviceFacts {
            pci_vendor,
            kernel_driver: Some(driver.into()),
        };
        move || facts
    }

    #[test]
    fn nodes_get_their_vendor_and_role() {
        assert_eq!(
            vendor_and_role(Some("nvidia-uvm"), 510, 0, Some(NvidiaNode::Uvm), none),
            (Some(Vendor::Nvidia), Some(Role::Uvm))
        );
        assert_eq!(
            vendor_and_role(Some("kfd"), 511, 0, None, none),
            (Some(Vendor::Amd), Some(Role::Compute))
        );
        let amd = sysfs(Some(0x1002), "amdgpu");
        assert_eq!(
            vendor_and_role(Some("drm"), DRM_MAJOR, 128, None, amd),
            (Some(Vendor::Amd), Some(Role::Render))
        );
        let intel = sysfs(None, "i915");
        assert_eq!(
            vendor_and_role(Some("drm"), DRM_MAJOR, 0, None, intel),
            (Some(Vendor::Intel), Some(Role::Display))
        );
        let gaudi = sysfs(Some(0x1da3), "habanalabs");
        assert_eq!(
            vendor_and_role(Some("accel"), ACCEL_MAJOR, 0, None, gaudi),
            (Some(Vendor::Habana), Some(Role::Compute))
        );
        // A render node sysfs says nothing of: the role, no vendor.
        assert_eq!(
            vendor_and_role(Some("drm"), DRM_MAJOR, 129, None, none),
            (None, Some(Role::Render))
        );
        assert_eq!(vendor_and_role(Some("mem"), 1, 3, None, none), (None, None));
    }
}
