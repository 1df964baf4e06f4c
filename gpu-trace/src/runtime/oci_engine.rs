//! What the engines that drive an OCI runtime share (Docker, containerd,
//! CRI-O, podman): their id format, how prose shows the id, what keeps a
//! running container's device rules, and how devices reach a container.

use crate::{model::container::Runtime, runtime::DeviceToAllow};

/// How devices reach an engine's containers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    /// Started by hand (`docker run`, `podman run`): devices are flags.
    CommandLine,
    /// Started by Kubernetes through CRI: devices come from device plugins
    /// or CDI, not from rules written by hand.
    Kubernetes,
}

impl Engine {
    /// What updates a running container's resources, which through the
    /// systemd cgroup driver sets its scope's properties.
    pub fn resource_update(self) -> &'static str {
        match self {
            Engine::CommandLine => "the engine's update of the container's resources (`docker update`, `podman update`) through runc or crun",
            Engine::Kubernetes => "the CRI's UpdateContainerResources (the kubelet's CPU manager, an in-place resize) through the runtime's shim and runc",
        }
    }

    /// How to give a container ROCm's compute node and render nodes.
    pub fn rocm(self) -> &'static str {
        match self {
            Engine::CommandLine => "recreate the container with `--device /dev/kfd` and the render node of each GPU it should use, `--device /dev/dri/renderD128` where that is one (`ls -l /dev/dri/by-path` names each by its PCI address; ROCm opens both, and all of /dev/dri would be every GPU), and `--group-add video --group-add render` where the nodes are not world-accessible",
            Engine::Kubernetes => "request GPUs through AMD's ROCm device plugin (resources: amd.com/gpu), which passes /dev/kfd and the render nodes",
        }
    }
}

/// Under Kubernetes: the device plugin or CDI (containerd and CRI-O alike).
pub(super) fn kubernetes_allow(device: &DeviceToAllow) -> Vec<String> {
    let request = match device.allocated_gpu {
        // Requested and allocated already: what failed is how the node
        // reached the container.
        Some(uuid) if device.gpu_node => format!(
            "the kubelet allocated GPU {uuid} to this container, yet its device rules do not allow the node, which most likely reached it without a device spec (mounted, the legacy hook's way); have the device plugin pass device specs: NVIDIA's `PASS_DEVICE_SPECS=true`, or CDI (`deviceListStrategy: cdi-cri`)"
        ),
        _ if device.gpu_node => "request GPUs through the NVIDIA device plugin (resources: nvidia.com/gpu) or CDI specs (`nvidia-ctk cdi generate`) rather than hand-written device rules".to_string(),
        _ => "request the device through the device plugin or CDI spec that hands it out (an RDMA device plugin for a NIC's verbs nodes, NVIDIA's for IMEX channels, a VFIO one for passthrough) rather than hand-written device rules".to_string(),
    };
    vec![
        request,
        format!(
            "the node must be allowed as {} rw in the container's device rules",
            device.rule()
        ),
    ]
}

/// The ids Docker, containerd, CRI-O and podman give: 64 lowercase hex digits.
pub fn is_full_container_id(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// "docker 3f2a9c1b0d4e": the first 12 characters of the id, as
/// `docker ps` shows it.
pub(super) fn label(runtime: Runtime, id: &str) -> String {
    format!("{} {}", runtime.label(), id.get(..12).unwrap_or(id))
}

/// Devices passed as device specs survive systemd's reload; rules added
/// by hand do not.
pub(super) fn keep_rules(engine: Engine) -> Vec<String> {
    if engine == Engine::Kubernetes {
        return keep_pod_rules();
    }
    vec![
        "give the container its GPUs as devices (`--gpus` naming them, `--device`, or CDI specs) so reloads keep them".to_string(),
        "or create the /dev/char symlinks systemd needs to keep the rules: `nvidia-ctk system create-dev-char-symlinks --create-all`".to_string(),
        "or let the engine manage cgroups itself: the cgroupfs driver (dockerd `\"exec-opts\": [\"native.cgroupdriver=cgroupfs\"]`, containerd `SystemdCgroup = false`), whose rules systemd never re-applies".to_string(),
        "restarting the container helps only until the next `systemctl daemon-reload`".to_string(),
    ]
}

/// A pod's rules are rewritten by the kubelet's UpdateContainerResources
/// (CPU manager, in-place resize) as well as by a reload: the device plugin
/// must pass the devices, never a hand edit the next update undoes.
fn keep_pod_rules() -> Vec<String> {
    vec![
        "have the device plugin pass the GPUs as device specs so that an update of the pod's resources keeps them: NVIDIA's with `PASS_DEVICE_SPECS=true`, or CDI (`deviceListStrategy: cdi-cri`)".to_string(),
        "or create the /dev/char symlinks systemd needs to keep the rules: `nvidia-ctk system create-dev-char-symlinks --create-all`".to_string(),
        "or the cgroupfs driver for the kubelet and containerd (`cgroupDriver: cgroupfs`, containerd `SystemdCgroup = false`), whose rules systemd never re-applies".to_string(),
        "recreating the pod helps only until the next UpdateContainerResources (the CPU manager, an in-place resize) or `systemctl daemon-reload`".to_string(),
    ]
}
