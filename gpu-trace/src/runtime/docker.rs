//! Docker: `docker-<ID>.scope` under the systemd cgroup driver,
//! `docker/<ID>` under cgroupfs; names in its containers' config.v2.json.

use std::fs;

use crate::{
    model::container::{Container, Runtime},
    runtime::{
        is_full_container_id, ContainerRuntime, DeviceToAllow, Engine, NameSources, PathStep,
        NODE_PATH,
    },
    text::shell_word::command_word,
};

pub struct Docker;

impl ContainerRuntime for Docker {
    fn runtime(&self) -> Runtime {
        Runtime::Docker
    }

    fn recognise(&self, step: &PathStep) -> Option<String> {
        let id = step.scope_id("docker-").or_else(|| {
            (step.parent() == Some("docker") && is_full_container_id(step.component))
                .then_some(step.component)
        })?;
        Some(id.to_string())
    }

    fn name(&self, id: &str, sources: &NameSources) -> Option<String> {
        let config = fs::read_to_string(
            sources
                .docker_containers_dir
                .join(id)
                .join("config.v2.json"),
        )
        .ok()?;
        docker_name(&config)
    }

    fn engine(&self) -> Option<Engine> {
        Some(Engine::CommandLine)
    }

    fn allow_device(&self, _: &Container, device: &DeviceToAllow) -> Vec<String> {
        let toolkit = if device.gpu_node {
            "; with the NVIDIA Container Toolkit, `--gpus` naming the GPUs it should have adds their nodes"
        } else {
            ""
        };
        vec![format!(
            "recreate the container with `--device {}` (or `--device-cgroup-rule='{} rmw'`){toolkit}",
            command_word(device.path, NODE_PATH),
            device.rule()
        )]
    }
}

/// "Name" from Docker's config.v2.json ("/web" -> "web").
fn docker_name(config: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(config).ok()?;
    let name = value.get("Name")?.as_str()?;
    Some(name.trim_start_matches('/').to_string())
}
