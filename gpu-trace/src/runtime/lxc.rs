//! LXC, and Proxmox VE's containers (LXC with numeric ids and configs in
//! /etc/pve/lxc).

use std::fs;

use crate::{
    model::{
        container::{Container, Runtime},
        vendor::{DRM_MAJOR, DRM_RENDER_MINOR},
    },
    runtime::{ContainerRuntime, DeviceToAllow, NameSources, PathStep, CONTAINER, NODE_PATH},
    text::shell_word::{command_word, plain_or},
};

pub struct Lxc;

/// Proxmox names its containers by number.
fn is_proxmox_id(id: &str) -> bool {
    !id.is_empty() && id.chars().all(|c| c.is_ascii_digit())
}

impl ContainerRuntime for Lxc {
    fn runtime(&self) -> Runtime {
        Runtime::Lxc
    }

    fn recognise(&self, step: &PathStep) -> Option<String> {
        // LXC 4+: lxc.payload.NAME (lxc.monitor.NAME is LXC's own monitor,
        // not the container).
        if let Some(name) = step.component.strip_prefix("lxc.payload.") {
            return Some(name.to_string());
        }
        // LXC before 4 and Proxmox: lxc/NAME (lxc/200 on Proxmox).
        (step.ancestors == ["lxc"]).then(|| step.component.to_string())
    }

    fn name(&self, id: &str, sources: &NameSources) -> Option<String> {
        if !is_proxmox_id(id) {
            return Some(id.to_string());
        }
        let config = fs::read_to_string(sources.pve_lxc_dir.join(format!("{id}.conf"))).ok()?;
        proxmox_hostname(&config)
    }

    fn label(&self, id: &str) -> String {
        if is_proxmox_id(id) {
            format!("ct {id}")
        } else {
            format!("lxc {id}")
        }
    }

    fn allow_device(&self, container: &Container, device: &DeviceToAllow) -> Vec<String> {
        // Config files take no shell quoting: a path outside the safe set
        // becomes a placeholder there (and the fix says so).
        let config_path = plain_or(device.path, NODE_PATH);
        let in_container = config_path.trim_start_matches('/');
        let id = &container.id;
        let proxmox = is_proxmox_id(id);
        let (config, restart) = if proxmox {
            (
                format!("/etc/pve/lxc/{id}.conf"),
                format!("pct reboot {id}"),
            )
        } else {
            (
                format!("/var/lib/lxc/{id}/config"),
                format!(
                    "lxc-stop -n {0} && lxc-start -n {0}",
                    command_word(id, CONTAINER)
                ),
            )
        };
        let mut fix = vec![
            format!("add to {}: `lxc.cgroup2.devices.allow: {} rwm`", command_word(&config, "the container's config"), device.rule()),
            format!("and, if the node is not in the container yet: `lxc.mount.entry: {config_path} {in_container} none bind,optional,create=file`"),
        ];
        if proxmox {
            fix.push(format!("(on Proxmox VE 8.1 or later, `devN: {config_path}` passes the node through instead)"));
        }
        fix.push(format!("then restart the container: `{restart}`"));
        fix
    }

    fn allow_rocm(&self, container: &Container, kfd: &DeviceToAllow) -> Vec<String> {
        let mut fix = self.allow_device(container, kfd);
        fix.insert(
            fix.len().saturating_sub(1),
            format!(
                "and the render node of each GPU it should use, renderD{DRM_RENDER_MINOR} where that is one (`ls -l /dev/dri/by-path` names each by its PCI address): `lxc.cgroup2.devices.allow: c {DRM_MAJOR}:{DRM_RENDER_MINOR} rwm` with `lxc.mount.entry: /dev/dri/renderD{DRM_RENDER_MINOR} dev/dri/renderD{DRM_RENDER_MINOR} none bind,optional,create=file` (all of major {DRM_MAJOR} would be every GPU)"
            ),
        );
        fix
    }
}

/// "hostname: NAME" from a Proxmox CT config (the part before any [snapshot]).
fn proxmox_hostname(config: &str) -> Option<String> {
    config
        .lines()
        .take_while(|line| !line.starts_with('['))
        .find_map(|line| line.strip_prefix("hostname:"))
        .map(|name| name.trim().to_string())
}
