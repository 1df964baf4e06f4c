//! Which GPU a node stands for, by the names a person knows: its UUID and
//! PCI bus id, and for a MIG capability node, its instance.

use serde::Serialize;

/// One GPU, by the names a person and the device plugin know it by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GpuIdentity {
    pub uuid: String,
    pub pci_bus_id: String,
    /// The N of /dev/nvidiaN.
    pub minor: u32,
}

/// What a MIG capability node stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MigCapability {
    /// "config" and "monitor" are the host-wide capabilities; the others
    /// belong to one GPU (its minor), and to one of its GPU instances, and
    /// perhaps to one compute instance of that.
    pub capability: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gi: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci: Option<u32>,
}
