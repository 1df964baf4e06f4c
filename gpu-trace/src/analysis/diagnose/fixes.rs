//! How to allow a device, in the words of the container's runtime.

use crate::{
    analysis::diagnose::phrasing::{CONTAINER, NODE_PATH},
    model::container::{Container, Runtime},
    text::shell_word::{command_word, plain_or, prose},
};

/// How to allow char major `major` (and see `node_path`) in this runtime.
/// `driver`: the driver's name in /proc/devices today, for rules by name
/// (NVIDIA's frontend is "nvidia" since driver 550, "nvidia-frontend" before).
pub fn allow_device(
    container: &Container,
    node_path: &str,
    major: u32,
    driver: &str,
) -> Vec<String> {
    // Config files take no shell quoting: a path outside the safe set
    // becomes a placeholder there (and the fix says so).
    let config_path = plain_or(node_path, NODE_PATH);
    let in_container = config_path.trim_start_matches('/');
    let device_word = command_word(node_path, NODE_PATH);
    match container.runtime {
        Runtime::Lxc => {
            let proxmox =
                !container.id.is_empty() && container.id.chars().all(|c| c.is_ascii_digit());
            let config = if proxmox {
                format!("/etc/pve/lxc/{}.conf", container.id)
            } else {
                format!("/var/lib/lxc/{}/config", container.id)
            };
            let restart = if proxmox {
                format!("pct reboot {}", container.id)
            } else {
                format!("lxc-stop -n {0} && lxc-start -n {0}", command_word(&container.id, CONTAINER))
            };
            let mut fix = vec![
                format!("add to {}: `lxc.cgroup2.devices.allow: c {major}:* rwm`", command_word(&config, "the container's config")),
                format!("and, if the node is not in the container yet: `lxc.mount.entry: {config_path} {in_container} none bind,optional,create=file`"),
            ];
            if proxmox {
                fix.push(format!("(on Proxmox VE 8.1 or later, `devN: {config_path}` passes the node through instead)"));
            }
            fix.push(format!("then restart the container: `{restart}`"));
            fix
        }
        Runtime::Docker => vec![format!(
            "recreate the container with `--device {device_word}` (or `--device-cgroup-rule='c {major}:* rmw'`); with the NVIDIA Container Toolkit, `--gpus all` adds every node"
        )],
        Runtime::Podman => vec![format!("recreate the container with `--device {device_word}` (or, with CDI specs, `--device nvidia.com/gpu=all`)")],
        Runtime::Containerd | Runtime::Crio => vec![
            "request GPUs through the NVIDIA device plugin (resources: nvidia.com/gpu) or CDI specs (`nvidia-ctk cdi generate`) rather than hand-written device rules".to_string(),
            format!("the node must be allowed as c {major}:* rw in the container's device rules"),
        ],
        Runtime::Systemd => vec![format!(
            "in {}: `DeviceAllow=char-{} rw` (follows the driver's major; `systemctl edit {}`)",
            prose(&container.id),
            plain_or(driver, "DRIVER"),
            command_word(&container.id, CONTAINER)
        )],
        Runtime::Cgroup => vec![format!(
            "allow c {major}:* rwm in the device policy attached to {} or an ancestor (`bpftool cgroup tree` lists it), i.e. in whatever manages that cgroup",
            prose(&container.cgroup)
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        analysis::diagnose::testing::HOSTILE,
        cgroup::identity::{identify, NameSources},
        scenario::pasted::assert_paste_safe,
    };

    #[test]
    fn fixes_speak_each_runtime() {
        let fix = |cgroup: &str| {
            allow_device(
                &identify(cgroup, &NameSources::default()),
                "/dev/nvidia-uvm",
                509,
                "nvidia-uvm",
            )
            .join(" ")
        };
        assert!(fix("/system.slice/ollama.service").contains("DeviceAllow=char-nvidia-uvm rw"));
        assert!(
            fix("/docker/3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8")
                .contains("--device /dev/nvidia-uvm")
        );
        assert!(fix("/kubepods/besteffort/pod6b1e2a3c-4d5e-6f70-8192-a3b4c5d6e7f8/3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8").contains("nvidia.com/gpu"));
        assert!(fix("/machine.slice/libpod-3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8.scope").contains("--device /dev/nvidia-uvm"));
        assert!(fix("/user.slice").contains("bpftool cgroup tree"));
    }

    #[test]
    fn hostile_unit_names_reach_commands_as_literal_words() {
        for name in HOSTILE {
            let unit = allow_device(
                &identify(
                    &format!("/system.slice/{name}.service"),
                    &NameSources::default(),
                ),
                "/dev/nvidia-uvm",
                509,
                "nvidia-uvm",
            );
            assert_paste_safe(&unit.join("; "), name);
        }
    }
}
