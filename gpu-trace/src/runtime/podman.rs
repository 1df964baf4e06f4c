//! podman: `libpod-<ID>.scope` (crun's program and processes in its
//! `container` child); names in containers/storage's containers.json.

use std::fs;

use crate::{
    model::container::{Container, Runtime},
    runtime::{ContainerRuntime, DeviceToAllow, Engine, NameSources, PathStep, NODE_PATH},
    text::shell_word::command_word,
};

pub struct Podman;

impl ContainerRuntime for Podman {
    fn runtime(&self) -> Runtime {
        Runtime::Podman
    }

    /// The monitor (libpod-conmon-ID.scope) fails the id format.
    fn recognise(&self, step: &PathStep) -> Option<String> {
        step.scope_id("libpod-").map(str::to_string)
    }

    fn name(&self, id: &str, sources: &NameSources) -> Option<String> {
        let list = fs::read_to_string(&sources.podman_containers_file).ok()?;
        podman_name(&list, id)
    }

    fn engine(&self) -> Option<Engine> {
        Some(Engine::CommandLine)
    }

    fn allow_device(&self, _: &Container, device: &DeviceToAllow) -> Vec<String> {
        vec![format!(
            "recreate the container with `--device {}` (or, with CDI specs, `--device nvidia.com/gpu=N` for each GPU it should have)",
            command_word(device.path, NODE_PATH)
        )]
    }
}

/// The first of "names" of container `id` in containers/storage's
/// containers.json (an array of {"id", "names", ...}).
fn podman_name(list: &str, id: &str) -> Option<String> {
    let containers: Vec<serde_json::Value> = serde_json::from_str(list).ok()?;
    let container = containers.iter().find(|c| c["id"] == id)?;
    Some(container["names"].get(0)?.as_str()?.to_string())
}
