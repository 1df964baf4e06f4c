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

/// Where the drivers' own tools or udev put a node of the devices next to
/// the GPU, by its driver and numbers; None where its name is not derived
/// from them (a VFIO group is named after its IOMMU group, not its minor).
pub fn neighbour_dev_path(driver: &str, major: u32, minor: u32) -> Option<String> {
    /// The verbs nodes' fixed major and first minor; past 32 nodes a
    /// dynamic major carries the rest from minor 0.
    const IB_MAJOR: u32 = 231;
    const UVERBS_FIRST_MINOR: u32 = 192;
    const UVERBS_FIXED: u32 = 32;
    Some(match driver {
        "infiniband_verbs" if major == IB_MAJOR => {
            format!(
                "/dev/infiniband/uverbs{}",
                minor.checked_sub(UVERBS_FIRST_MINOR)?
            )
        }
        "infiniband_verbs" => format!("/dev/infiniband/uverbs{}", UVERBS_FIXED + minor),
        "infiniband_mad" if major == IB_MAJOR && minor < 64 => {
            format!("/dev/infiniband/umad{minor}")
        }
        "infiniband_mad" if major == IB_MAJOR && minor < 128 => {
            format!("/dev/infiniband/issm{}", minor - 64)
        }
        "nvidia-caps-imex-channels" => format!("/dev/nvidia-caps-imex-channels/channel{minor}"),
        "gdrdrv" if minor == 0 => "/dev/gdrdrv".to_string(),
        "nvidia-fs" => format!("/dev/nvidia-fs{minor}"),
        _ => return None,
    })
}

/// Drivers with a dynamic major that accelerators' compute stacks open:
/// AMD's kfd (ROCm) and Habana's legacy driver.
pub const DYNAMIC_ACCELERATOR_DRIVERS: [&str; 2] = ["kfd", "habanalabs"];

/// The devices next to the GPU that a multi-GPU job opens, by the name
/// their driver registers in /proc/devices, with their role and, where the
/// driver is one vendor's, that vendor. Device policies deny them as they
/// deny a GPU, and often nothing says so: NCCL falls back to sockets.
pub const NEIGHBOUR_DRIVERS: [(&str, Role, Option<Vendor>); 6] = [
    // /dev/infiniband/uverbsN (231:192+, more on a dynamic major) and
    // umadN/issmN (231:0-127): the RDMA NIC's verbs and management.
    ("infiniband_verbs", Role::Rdma, None),
    ("infiniband_mad", Role::Rdma, None),
    // /dev/nvidia-caps-imex-channels/channelN: multi-node NVLink memory.
    (
        "nvidia-caps-imex-channels",
        Role::Imex,
        Some(Vendor::Nvidia),
    ),
    // GPUDirect RDMA copies (gdrcopy) and GPUDirect Storage.
    ("gdrdrv", Role::Gpudirect, Some(Vendor::Nvidia)),
    ("nvidia-fs", Role::Gpudirect, Some(Vendor::Nvidia)),
    // /dev/vfio/N: an IOMMU group passed through to a VM or a user driver.
    ("vfio", Role::Vfio, None),
];

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
            // 0x15b3: Mellanox, NVIDIA's networking (ConnectX, BlueField).
            0x10de | 0x15b3 => Vendor::Nvidia,
            0x1002 | 0x1022 => Vendor::Amd,
            0x8086 => Vendor::Intel,
            0x1da3 => Vendor::Habana,
            _ => return None,
        })
    }

    /// From the kernel driver bound to the device (sysfs `device/driver`).
    pub fn from_kernel_driver(driver: &str) -> Option<Self> {
        Some(match driver {
            "nvidia" | "nvidia-drm" | "nouveau" | "mlx5_core" | "mlx4_core" => Vendor::Nvidia,
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
    /// RDMA verbs and management nodes (NCCL, UCX, MPI over InfiniBand/RoCE).
    Rdma,
    /// NVIDIA IMEX channels (memory shared across nodes over NVLink).
    Imex,
    /// GPUDirect RDMA (gdrdrv) and GPUDirect Storage (nvidia-fs).
    Gpudirect,
    /// VFIO groups (a device passed through).
    Vfio,
    /// NVSwitch management nodes (NVIDIA's Fabric Manager on HGX and DGX).
    Nvswitch,
}

impl Role {
    const ALL: [Role; 11] = [
        Role::Compute,
        Role::Render,
        Role::Display,
        Role::Control,
        Role::Uvm,
        Role::Caps,
        Role::Rdma,
        Role::Imex,
        Role::Gpudirect,
        Role::Vfio,
        Role::Nvswitch,
    ];

    /// From its name, as `--role` takes it.
    pub fn parse(name: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|r| r.name() == name)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|r| r.name()).collect();
                format!("unknown role {name:?}: {}", names.join(", "))
            })
    }

    /// RDMA, IMEX, GPUDirect, VFIO and NVSwitch nodes: not a GPU's own.
    pub fn is_next_to_the_gpu(self) -> bool {
        matches!(
            self,
            Role::Rdma | Role::Imex | Role::Gpudirect | Role::Vfio | Role::Nvswitch
        )
    }

    /// As JSON names it.
    pub fn name(self) -> &'static str {
        match self {
            Role::Compute => "compute",
            Role::Render => "render",
            Role::Display => "display",
            Role::Control => "control",
            Role::Uvm => "uvm",
            Role::Caps => "caps",
            Role::Rdma => "rdma",
            Role::Imex => "imex",
            Role::Gpudirect => "gpudirect",
            Role::Vfio => "vfio",
            Role::Nvswitch => "nvswitch",
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
            NvidiaNode::Ctl | NvidiaNode::Nvlink => Role::Control,
            NvidiaNode::NvswitchCtl | NvidiaNode::Nvswitch(_) => Role::Nvswitch,
            NvidiaNode::Modeset => Role::Display,
            NvidiaNode::Gpu(_) => Role::Compute,
            NvidiaNode::Uvm | NvidiaNode::UvmTools => Role::Uvm,
            NvidiaNode::Cap(_) => Role::Caps,
        };
        return (Some(Vendor::Nvidia), Some(role));
    }
    let neighbour = driver.and_then(|d| NEIGHBOUR_DRIVERS.iter().find(|(name, ..)| *name == d));
    if let Some(&(_, role, vendor)) = neighbour {
        // An RDMA NIC's vendor is its PCI device's (Soft-RoCE has none).
        let vendor =
            vendor.or_else(|| (role == Role::Rdma).then(|| vendor_from(facts())).flatten());
        return (vendor, Some(role));
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

    #[test]
    fn the_devices_next_to_the_gpu_have_their_usual_paths() {
        let path = |driver, major, minor| neighbour_dev_path(driver, major, minor);
        assert_eq!(
            path("infiniband_verbs", 231, 193).as_deref(),
            Some("/dev/infiniband/uverbs1")
        );
        assert_eq!(path("infiniband_verbs", 231, 5), None);
        assert_eq!(
            path("infiniband_verbs", 505, 0).as_deref(),
            Some("/dev/infiniband/uverbs32")
        );
        assert_eq!(
            path("infiniband_mad", 231, 1).as_deref(),
            Some("/dev/infiniband/umad1")
        );
        assert_eq!(
            path("infiniband_mad", 231, 65).as_deref(),
            Some("/dev/infiniband/issm1")
        );
        assert_eq!(
            path("nvidia-caps-imex-channels", 505, 7).as_deref(),
            Some("/dev/nvidia-caps-imex-channels/channel7")
        );
        assert_eq!(path("gdrdrv", 505, 0).as_deref(), Some("/dev/gdrdrv"));
        assert_eq!(
            path("nvidia-fs", 505, 3).as_deref(),
            Some("/dev/nvidia-fs3")
        );
        assert_eq!(path("vfio", 505, 3), None);
    }

    #[test]
    fn the_devices_next_to_the_gpu_get_their_role_and_vendor() {
        let connectx = sysfs(Some(0x15b3), "mlx5_core");
        assert_eq!(
            vendor_and_role(Some("infiniband_verbs"), 231, 192, None, connectx),
            (Some(Vendor::Nvidia), Some(Role::Rdma))
        );
        // Soft-RoCE: no PCI device behind it.
        assert_eq!(
            vendor_and_role(Some("infiniband_verbs"), 231, 192, None, none),
            (None, Some(Role::Rdma))
        );
        assert_eq!(
            vendor_and_role(Some("infiniband_mad"), 231, 0, None, none),
            (None, Some(Role::Rdma))
        );
        for (driver, role) in [
            ("nvidia-caps-imex-channels", Role::Imex),
            ("gdrdrv", Role::Gpudirect),
            ("nvidia-fs", Role::Gpudirect),
        ] {
            assert_eq!(
                vendor_and_role(Some(driver), 500, 0, None, none),
                (Some(Vendor::Nvidia), Some(role)),
                "{driver}"
            );
        }
        assert_eq!(
            vendor_and_role(Some("vfio"), 500, 3, None, none),
            (None, Some(Role::Vfio))
        );
    }
}
