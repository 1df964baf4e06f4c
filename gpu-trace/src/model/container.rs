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

/// `--pod NAMESPACE/POD`: a pod as Kubernetes names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodQuery {
    pub namespace: String,
    pub pod: String,
}

impl PodQuery {
    /// For clap: `NAMESPACE/POD`, both parts non-empty.
    pub fn parse(text: &str) -> Result<Self, String> {
        let (namespace, pod) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not NAMESPACE/POD"))?;
        if namespace.is_empty() || pod.is_empty() || pod.contains('/') {
            return Err(format!("{text:?} is not NAMESPACE/POD"));
        }
        Ok(Self {
            namespace: namespace.to_string(),
            pod: pod.to_string(),
        })
    }
}

impl PodQuery {
    /// Whether `container` is one of this pod's, as its runtime named it.
    pub fn holds(&self, container: &Container) -> bool {
        container.namespace.as_deref() == Some(&self.namespace)
            && container.pod.as_deref() == Some(&self.pod)
    }
}

impl std::fmt::Display for PodQuery {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.pod)
    }
}
