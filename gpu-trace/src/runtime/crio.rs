//! CRI-O, as Kubernetes runs it: `crio-<ID>.scope` (its monitor,
//! `crio-conmon-<ID>.scope`, fails the id format).

use crate::{
    model::container::{Container, Runtime},
    runtime::{
        kubernetes_names::{self, PodNames},
        oci_engine::kubernetes_allow,
        ContainerRuntime, DeviceToAllow, Engine, NameSources, PathStep,
    },
};

pub struct Crio;

impl ContainerRuntime for Crio {
    fn runtime(&self) -> Runtime {
        Runtime::Crio
    }

    fn recognise(&self, step: &PathStep) -> Option<String> {
        step.scope_id("crio-").map(str::to_string)
    }

    fn engine(&self) -> Option<Engine> {
        Some(Engine::Kubernetes)
    }

    /// CRI-O's annotations in the container's bundle.
    fn pod_names(&self, id: &str, sources: &NameSources) -> Option<PodNames> {
        let config = sources
            .crio_containers_dir
            .join(id)
            .join("userdata/config.json");
        kubernetes_names::from_bundle(&config, &kubernetes_names::CRIO)
    }

    fn allow_device(&self, _: &Container, device: &DeviceToAllow) -> Vec<String> {
        kubernetes_allow(device)
    }
}
