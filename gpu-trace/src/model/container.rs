//! The container an access came from, as the cgroup path names it.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Container {
    pub runtime: Runtime,
    /// LXC name or Proxmox CT id, container id, unit name, or the cgroup path.
    pub id: String,
    /// Human name when known: Proxmox hostname, Docker name, unescaped unit.
    pub name: Option<String>,
    /// Kubernetes pod UID, when the path carries one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<String>,
    /// The cgroup (relative to the cgroup2 mount) where the container starts.
    pub cgroup: String,
}

impl Container {
    /// "ct 200 (lxc)", "docker 3f2a9c1b0d4e (web)", ...
    pub fn label(&self) -> String {
        let id = match self.runtime {
            Runtime::Lxc if self.id.chars().all(|c| c.is_ascii_digit()) => {
                format!("ct {}", self.id)
            }
            Runtime::Docker | Runtime::Containerd | Runtime::Crio | Runtime::Podman => {
                format!("{} {}", self.runtime.label(), short_id(&self.id))
            }
            Runtime::Cgroup => return format!("cgroup {}", self.id),
            _ => format!("{} {}", self.runtime.label(), self.id),
        };
        match &self.name {
            Some(name) if *name != self.id => format!("{id} ({name})"),
            _ => id,
        }
    }
}

/// The first 12 characters of a container id, as `docker ps` shows it.
pub fn short_id(id: &str) -> &str {
    id.get(..12).unwrap_or(id)
}
