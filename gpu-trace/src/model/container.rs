//! The container an access came from, as the cgroup path names it.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Runtime {
    Lxc,
    Docker,
    Containerd,
    Crio,
    Podman,
    Systemd,
    /// A cgroup no runtime pattern matched.
    Cgroup,
}

impl Runtime {
    pub fn label(self) -> &'static str {
        match self {
            Runtime::Lxc => "lxc",
            Runtime::Docker => "docker",
            Runtime::Containerd => "containerd",
            Runtime::Crio => "cri-o",
            Runtime::Podman => "podman",
            Runtime::Systemd => "systemd",
            Runtime::Cgroup => "cgroup",
        }
    }
}

/// Read back from watch's logs by `summary`, so serialized and read alike.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Container {
    pub runtime: Runtime,
    /// LXC name or Proxmox CT id, container id, unit name, or the cgroup path.
    pub id: String,
    /// Human name when known: Proxmox hostname, Docker name, unescaped
    /// unit, a Kubernetes container's name in its pod.
    pub name: Option<String>,
    /// Kubernetes pod UID, when the path carries one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// A Kubernetes container's namespace and pod name, from the runtime's
    /// own record of it (its OCI bundle's annotations).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<String>,
    /// The cgroup (relative to the cgroup2 mount) where the container starts.
    pub cgroup: String,
}
