//! CRI-O, as Kubernetes runs it: `crio-<ID>.scope` (its monitor,
//! `crio-conmon-<ID>.scope`, fails the id format).

use crate::{
    model::container::{Container, Runtime},
    runtime::{oci_engine::kubernetes_allow, ContainerRuntime, DeviceToAllow, Engine, PathStep},
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

    fn allow_device(&self, _: &Container, device: &DeviceToAllow) -> Vec<String> {
        kubernetes_allow(device)
    }
}
