//! CRI-O, as Kubernetes runs it: `crio-<ID>.scope` (its monitor,
//! `crio-conmon-<ID>.scope`, fails the id format).

use crate::{
    model::container::{Container, Runtime},
    runtime::{
        containerd::{kubernetes_allow, ROCM_PLUGIN},
        oci_engine, ContainerRuntime, DeviceToAllow, PathStep,
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
