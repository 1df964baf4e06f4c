//! containerd, as Kubernetes runs it: `cri-containerd-<ID>.scope` under
//! the systemd cgroup driver, `kubepods/<QOS>/pod<UID>/<ID>` under cgroupfs.

use crate::{
    model::container::{Container, Runtime},
    runtime::{is_full_container_id, oci_engine, ContainerRuntime, DeviceToAllow, PathStep},
};

pub struct Containerd;

impl ContainerRuntime for Containerd {
    fn runtime(&self) -> Runtime {
        Runtime::Containerd
    }

    fn recognise(&self, step: &PathStep) -> Option<String> {
        let cgroupfs_pod = step.parent().is_some_and(|p| p.starts_with("pod"))
            && step.ancestors.iter().any(|a| a.starts_with("kubepods"))
            && is_full_container_id(step.component);
        let id = step
            .scope_id("cri-containerd-")
            .or(cgroupfs_pod.then_some(step.component))?;
        Some(id.to_string())
    }

    fn label(&self, id: &str) -> String {
        oci_engine::label(self.runtime(), id)
    }

    fn oci_engine(&self) -> bool {
        true
    }

    fn allow_device(&self, _: &Container, device: &DeviceToAllow) -> Vec<String> {
        kubernetes_allow(device)
    }

    fn keep_rules(&self, _: &Container, _: &DeviceToAllow) -> Vec<String> {
        oci_engine::keep_rules()
    }

    fn allow_rocm(&self, _: &Container, _: &DeviceToAllow) -> Vec<String> {
        vec![ROCM_PLUGIN.to_string()]
    }
}

/// Under Kubernetes, devices come from device plugins or CDI, not from
/// rules written by hand (containerd and CRI-O alike).
pub(super) fn kubernetes_allow(device: &DeviceToAllow) -> Vec<String> {
    vec![
        "request GPUs through the NVIDIA device plugin (resources: nvidia.com/gpu) or CDI specs (`nvidia-ctk cdi generate`) rather than hand-written device rules".to_string(),
        format!("the node must be allowed as c {}:* rw in the container's device rules", device.major),
    ]
}

pub(super) const ROCM_PLUGIN: &str = "request GPUs through AMD's ROCm device plugin (resources: amd.com/gpu), which passes /dev/kfd and the render nodes";
