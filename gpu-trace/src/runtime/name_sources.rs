//! Where runtimes keep what names their containers.

use std::path::PathBuf;

use crate::host::mountinfo::cgroup2_mount;

/// A root other than "/" lets tests use a fake tree.
#[derive(Debug, Clone)]
pub struct NameSources {
    pub pve_lxc_dir: PathBuf,
    pub docker_containers_dir: PathBuf,
    /// containers/storage's list of rootful podman's containers and their names.
    pub podman_containers_file: PathBuf,
    /// containerd's task bundles in the CRI's namespace (k8s.io): ID/config.json.
    pub containerd_k8s_bundles_dir: PathBuf,
    /// CRI-O's containers: ID/userdata/config.json.
    pub crio_containers_dir: PathBuf,
    /// The cgroup2 mount, whose directories' owners tell a runtime's
    /// cgroups from a delegated user's; None checks no owner.
    pub cgroup2_mount: Option<PathBuf>,
}

impl NameSources {
    /// No runtime's files and no owner checks: for accesses made up in
    /// unit tests, identified by their paths alone.
    #[cfg(test)]
    pub fn nowhere() -> Self {
        Self {
            pve_lxc_dir: "/none".into(),
            docker_containers_dir: "/none".into(),
            podman_containers_file: "/none".into(),
            containerd_k8s_bundles_dir: "/none".into(),
            crio_containers_dir: "/none".into(),
            cgroup2_mount: None,
        }
    }
}

impl Default for NameSources {
    fn default() -> Self {
        Self {
            pve_lxc_dir: "/etc/pve/lxc".into(),
            docker_containers_dir: "/var/lib/docker/containers".into(),
            podman_containers_file:
                "/var/lib/containers/storage/overlay-containers/containers.json".into(),
            containerd_k8s_bundles_dir: "/run/containerd/io.containerd.runtime.v2.task/k8s.io"
                .into(),
            crio_containers_dir: "/run/containers/storage/overlay-containers".into(),
            cgroup2_mount: cgroup2_mount().ok().flatten(),
        }
    }
}
