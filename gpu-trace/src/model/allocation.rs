//! Whether a denied GPU was one the Kubernetes container was given.

use serde::Serialize;

/// The kubelet's answer for one denied GPU: the container's own, or one it
/// probed (NVML and DCGM open every GPU node they can see).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize)]
pub struct GpuAllocation {
    /// The denied GPU's UUID (the record's `gpu` shows it).
    #[serde(skip)]
    pub gpu: String,
    pub allocated: bool,
    /// The GPUs the kubelet lists for the container (the device plugin's
    /// UUIDs), in its order.
    pub container_gpus: Vec<String>,
}
