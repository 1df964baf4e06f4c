//! containerd, as Kubernetes runs it: `cri-containerd-<ID>.scope` under
//! the systemd cgroup driver, `kubepods/<QOS>/pod<UID>/<ID>` under cgroupfs.

use crate::{
    model::container::{Container, Runtime},
    runtime::{
        is_full_container_id,
        kubernetes_names::{self, PodNames},
        oci_engine::kubernetes_allow,
        ContainerRuntime, DeviceToAllow, Engine, NameSources, PathStep,
    },
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

    fn engine(&self) -> Option<Engine> {
        Some(Engine::Kubernetes)
    }

    /// The CRI plugin's annotations in the task's bundle (namespace k8s.io).
    fn pod_names(&self, id: &str, sources: &NameSources) -> Option<PodNames> {
        let config = sources
            .containerd_k8s_bundles_dir
            .join(id)
            .join("config.json");
        kubernetes_names::from_bundle(&config, &kubernetes_names::CONTAINERD)
    }

    fn allow_device(&self, _: &Container, device: &DeviceToAllow) -> Vec<String> {
        kubernetes_allow(device)
    }
}
