//! Which container a cgroup belongs to, from its path: no runtime socket
//! needed. Names come from the runtimes' own files when readable.
//!
//! A path is a claim anyone with a delegated subtree can make: a user can
//! create `user@1000.service/docker-<victim's id>.scope`. So a runtime's
//! pattern counts only where that runtime could have made the cgroup: in
//! a directory owned by root (not below one handed to another owner), and
//! with the id format the runtime uses.

use std::{fs, os::unix::fs::MetadataExt, path::PathBuf};

use crate::{
    host::mountinfo::cgroup2_mount,
    model::container::{Container, Runtime},
};

/// Where runtimes keep what names their containers; a root other than "/"
/// lets tests use a fake tree.
#[derive(Debug, Clone)]
pub struct NameSources {
    pub pve_lxc_dir: PathBuf,
    pub docker_containers_dir: PathBuf,
    /// containers/storage's list of rootful podman's containers and their names.
    pub podman_containers_file: PathBuf,
    /// The cgroup2 mount, whose directories' owners tell a runtime's
    /// cgroups from a delegated user's; None checks no owner.
    pub cgroup2_mount: Option<PathBuf>,
}

impl Default for NameSources {
    fn default() -> Self {
        Self {
            pve_lxc_dir: "/etc/pve/lxc".into(),
            docker_containers_dir: "/var/lib/docker/containers".into(),
            podman_containers_file:
                "/var/lib/containers/storage/overlay-containers/containers.json".into(),
            cgroup2_mount: cgroup2_mount().ok().flatten(),
        }
    }
}

/// Identifies the container of a cgroup path (relative to the cgroup2
/// mount). The innermost container wins (docker inside an LXC container is
/// a docker container); a systemd unit counts only outside any container
/// (a service inside an LXC container belongs to that container).
pub fn identify(cgroup: &str, names: &NameSources) -> Container {
    let components: Vec<&str> = cgroup.split('/').filter(|c| !c.is_empty()).collect();
    let trusted = root_made_depth(names, &components);
    let mut container = None;
    let mut unit = None;
    for (depth, component) in components.iter().enumerate().take(trusted) {
        let prefix = format!("/{}", components[..=depth].join("/"));
        let parent = depth.checked_sub(1).map(|d| components[d]);
        match match_component(component, parent, &components[..depth]) {
            Some(hit) if hit.0 == Runtime::Systemd => unit = unit.or(Some((hit, prefix))),
            Some(hit) => container = Some((hit, prefix)),
            None => {}
        }
    }
    match container.or(unit) {
        Some(((runtime, id, pod_uid), cgroup)) => {
            let name = lookup_name(runtime, &id, names);
            Container {
                runtime,
                id,
                name,
                pod_uid,
                cgroup,
            }
        }
        None => Container {
            runtime: Runtime::Cgroup,
            id: if cgroup.is_empty() {
                "/".into()
            } else {
                cgroup.into()
            },
            name: None,
            pod_uid: None,
            cgroup: cgroup.into(),
        },
    }
}

/// How many leading components of the path root made: a component counts
/// when the directory it sits in is owned by root. Below a directory owned
/// by anyone else (a delegated subtree), its owner could have made any
/// name. A directory already gone is no evidence either way.
fn root_made_depth(names: &NameSources, components: &[&str]) -> usize {
    let Some(mount) = &names.cgroup2_mount else {
        return components.len();
    };
    let mut dir = mount.clone();
    for (depth, component) in components.iter().enumerate() {
        if fs::metadata(&dir).is_ok_and(|m| m.uid() != 0) {
            return depth;
        }
        dir.push(component);
    }
    components.len()
}

type Hit = (Runtime, String, Option<String>);

fn match_component(component: &str, parent: Option<&str>, ancestors: &[&str]) -> Option<Hit> {
    let hit = |runtime, id: &str| Some((runtime, id.to_string(), pod_uid(ancestors)));
    // LXC 4+: lxc.payload.NAME (lxc.monitor.NAME is LXC's own monitor, not the container).
    if let Some(name) = component.strip_prefix("lxc.payload.") {
        return hit(Runtime::Lxc, name);
    }
    // LXC before 4 and Proxmox: lxc/NAME (lxc/200 on Proxmox).
    if parent == Some("lxc") && ancestors.len() == 1 {
        return hit(Runtime::Lxc, component);
    }
    // The monitors (crio-conmon-ID.scope, libpod-conmon-ID.scope) fail
    // the id format and are not containers.
    let scope_id = |prefix: &str| {
        component
            .strip_prefix(prefix)
            .and_then(|r| r.strip_suffix(".scope"))
            .filter(|id| is_full_container_id(id))
    };
    if let Some(id) = scope_id("docker-") {
        return hit(Runtime::Docker, id);
    }
    if parent == Some("docker") && is_full_container_id(component) {
        return hit(Runtime::Docker, component);
    }
    if let Some(id) = scope_id("cri-containerd-") {
        return hit(Runtime::Containerd, id);
    }
    if let Some(id) = scope_id("crio-") {
        return hit(Runtime::Crio, id);
    }
    if let Some(id) = scope_id("libpod-") {
        return hit(Runtime::Podman, id);
    }
    // cgroupfs-driver Kubernetes: kubepods/burstable/pod<UID>/<ID>.
    if parent.is_some_and(|p| p.starts_with("pod"))
        && ancestors.iter().any(|a| a.starts_with("kubepods"))
        && is_full_container_id(component)
    {
        return hit(Runtime::Containerd, component);
    }
    if let Some(unit) = component.strip_suffix(".service") {
        return Some((Runtime::Systemd, format!("{unit}.service"), None));
    }
    None
}

/// The ids Docker, containerd, CRI-O and podman give: 64 lowercase hex digits.
fn is_full_container_id(text: &str) -> bool {
    text.len() == 64
        && text
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The pod UID of Kubernetes paths: kubepods-burstable-pod<UID>.slice (systemd
/// driver, dashes for underscores) or pod<UID> (cgroupfs driver).
fn pod_uid(ancestors: &[&str]) -> Option<String> {
    ancestors.iter().rev().find_map(|a| {
        let uid = a
            .strip_suffix(".slice")
            .map_or(*a, |s| s.rsplit_once("-pod").map_or(s, |(_, uid)| uid));
        let uid = uid.strip_prefix("pod").unwrap_or(uid);
        (a.contains("pod")
            && uid.len() >= 32
            && uid
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == '_' || c == '-'))
        .then(|| uid.replace('_', "-"))
    })
}

fn lookup_name(runtime: Runtime, id: &str, names: &NameSources) -> Option<String> {
    match runtime {
        Runtime::Lxc if id.chars().all(|c| c.is_ascii_digit()) => {
            let config = fs::read_to_string(names.pve_lxc_dir.join(format!("{id}.conf"))).ok()?;
            proxmox_hostname(&config)
        }
        Runtime::Lxc => Some(id.to_string()),
        Runtime::Docker => {
            let config =
                fs::read_to_string(names.docker_containers_dir.join(id).join("config.v2.json"))
                    .ok()?;
            docker_name(&config)
        }
        Runtime::Podman => {
            let list = fs::read_to_string(&names.podman_containers_file).ok()?;
            podman_name(&list, id)
        }
        Runtime::Systemd => Some(unescape_unit(id)),
        _ => None,
    }
}

/// The first of "names" of container `id` in containers/storage's
/// containers.json (an array of {"id", "names", ...}).
fn podman_name(list: &str, id: &str) -> Option<String> {
    let containers: Vec<serde_json::Value> = serde_json::from_str(list).ok()?;
    let container = containers.iter().find(|c| c["id"] == id)?;
    Some(container["names"].get(0)?.as_str()?.to_string())
}

/// "hostname: NAME" from a Proxmox CT config (the part before any [snapshot]).
fn proxmox_hostname(config: &str) -> Option<String> {
    config
        .lines()
        .take_while(|line| !line.starts_with('['))
        .find_map(|line| line.strip_prefix("hostname:"))
        .map(|name| name.trim().to_string())
}

/// "Name" from Docker's config.v2.json ("/web" -> "web").
fn docker_name(config: &str) -> Option<String> {
    let value: serde_json::Value = serde_json::from_str(config).ok()?;
    let name = value.get("Name")?.as_str()?;
    Some(name.trim_start_matches('/').to_string())
}

/// systemd's unit-name escaping: "\x2d" -> "-".
pub fn unescape_unit(name: &str) -> String {
    let mut out = Vec::with_capacity(name.len());
    let bytes = name.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let escaped = bytes
            .get(i..i + 4)
            .filter(|b| b[0] == b'\\' && b[1] == b'x');
        match escaped
            .and_then(|b| std::str::from_utf8(&b[2..4]).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Does `query` (what a user typed for --container) name this container?
/// A CT id, a name, a full or short (>= 4 characters) container id.
pub fn matches(container: &Container, query: &str) -> bool {
    if container.runtime == Runtime::Cgroup || query.is_empty() {
        return false;
    }
    container.id == query
        || container.name.as_deref() == Some(query)
        || (query.len() >= 4
            && is_full_container_id(&container.id)
            && container.id.starts_with(query))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::container::{Container, Runtime};

    const DOCKER_ID: &str = "3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";

    fn id_of(path: &str) -> Container {
        identify(
            path,
            &NameSources {
                pve_lxc_dir: "/nonexistent".into(),
                docker_containers_dir: "/nonexistent".into(),
                podman_containers_file: "/nonexistent".into(),
                cgroup2_mount: None,
            },
        )
    }

    #[test]
    fn identifies_real_world_cgroup_paths() {
        let table: &[(&str, Runtime, &str, &str)] = &[
            ("/lxc/200", Runtime::Lxc, "200", "/lxc/200"),
            ("/lxc/200/ns/init.scope", Runtime::Lxc, "200", "/lxc/200"),
            ("/lxc.payload.gpu-box", Runtime::Lxc, "gpu-box", "/lxc.payload.gpu-box"),
            ("/lxc.payload.gpu-box/system.slice/cron.service", Runtime::Lxc, "gpu-box", "/lxc.payload.gpu-box"),
            (&format!("/system.slice/docker-{DOCKER_ID}.scope"), Runtime::Docker, DOCKER_ID, ""),
            (&format!("/docker/{DOCKER_ID}"), Runtime::Docker, DOCKER_ID, ""),
            (
                &format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6b1e2a3c_4d5e_6f70_8192_a3b4c5d6e7f8.slice/cri-containerd-{DOCKER_ID}.scope"),
                Runtime::Containerd,
                DOCKER_ID,
                "",
            ),
            (&format!("/kubepods/besteffort/pod6b1e2a3c-4d5e-6f70-8192-a3b4c5d6e7f8/{DOCKER_ID}"), Runtime::Containerd, DOCKER_ID, ""),
            (&format!("/kubepods.slice/kubepods-pod6b1e2a3c_4d5e_6f70_8192_a3b4c5d6e7f8.slice/crio-{DOCKER_ID}.scope"), Runtime::Crio, DOCKER_ID, ""),
            (&format!("/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-{DOCKER_ID}.scope"), Runtime::Podman, DOCKER_ID, ""),
            (&format!("/machine.slice/libpod-{DOCKER_ID}.scope/container"), Runtime::Podman, DOCKER_ID, ""),
            ("/system.slice/ollama.service", Runtime::Systemd, "ollama.service", "/system.slice/ollama.service"),
            ("/system.slice/jupyter\\x2dlab.service", Runtime::Systemd, "jupyter\\x2dlab.service", ""),
            // Docker nested in an LXC container: the innermost runtime wins.
            (&format!("/lxc/101/ns/system.slice/docker-{DOCKER_ID}.scope"), Runtime::Docker, DOCKER_ID, ""),
            ("/user.slice/user-1000.slice/session-3.scope", Runtime::Cgroup, "/user.slice/user-1000.slice/session-3.scope", ""),
            ("/", Runtime::Cgroup, "/", ""),
        ];
        for (path, runtime, id, cgroup) in table {
            let c = id_of(path);
            assert_eq!((c.runtime, c.id.as_str()), (*runtime, *id), "{path}");
            if !cgroup.is_empty() {
                assert_eq!(c.cgroup, *cgroup, "{path}");
            }
        }
    }

    #[test]
    fn kubernetes_paths_carry_the_pod_uid() {
        let c = id_of(&format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6b1e2a3c_4d5e_6f70_8192_a3b4c5d6e7f8.slice/cri-containerd-{DOCKER_ID}.scope"));
        assert_eq!(
            c.pod_uid.as_deref(),
            Some("6b1e2a3c-4d5e-6f70-8192-a3b4c5d6e7f8")
        );
        let c = id_of(&format!(
            "/kubepods/besteffort/pod6b1e2a3c-4d5e-6f70-8192-a3b4c5d6e7f8/{DOCKER_ID}"
        ));
        assert_eq!(
            c.pod_uid.as_deref(),
            Some("6b1e2a3c-4d5e-6f70-8192-a3b4c5d6e7f8")
        );
    }

    #[test]
    fn unit_names_are_unescaped() {
        assert_eq!(
            unescape_unit("jupyter\\x2dlab.service"),
            "jupyter-lab.service"
        );
        assert_eq!(
            unescape_unit("a\\x2"),
            "a\\x2",
            "a cut escape stays as it is"
        );
        assert_eq!(
            id_of("/system.slice/jupyter\\x2dlab.service")
                .name
                .as_deref(),
            Some("jupyter-lab.service")
        );
    }

    #[test]
    fn names_come_from_proxmox_docker_and_podman_files() {
        let root = tempfile::tempdir().expect("temp dir");
        let pve = root.path().join("pve");
        let docker = root.path().join("docker");
        fs::create_dir_all(&pve).unwrap();
        fs::create_dir_all(docker.join(DOCKER_ID)).unwrap();
        fs::write(
            pve.join("200.conf"),
            "arch: amd64\nhostname: cuda-box\n[snap1]\nhostname: old\n",
        )
        .unwrap();
        fs::write(
            docker.join(DOCKER_ID).join("config.v2.json"),
            r#"{"ID":"x","Name":"/trainer"}"#,
        )
        .unwrap();
        let podman = root.path().join("containers.json");
        fs::write(
            &podman,
            format!(r#"[{{"id":"{}","names":["other"]}},{{"id":"{DOCKER_ID}","names":["notebook"],"image":"x"}}]"#, "0".repeat(64)),
        )
        .unwrap();
        let names = NameSources {
            pve_lxc_dir: pve,
            docker_containers_dir: docker,
            podman_containers_file: podman,
            cgroup2_mount: None,
        };

        let ct = identify("/lxc/200/ns", &names);
        assert_eq!(ct.name.as_deref(), Some("cuda-box"));
        assert_eq!(ct.label(), "ct 200 (cuda-box)");
        let d = identify(&format!("/system.slice/docker-{DOCKER_ID}.scope"), &names);
        assert_eq!(d.name.as_deref(), Some("trainer"));
        assert_eq!(d.label(), "docker 3f2a9c1b0d4e (trainer)");
        // crun's program and processes sit in the scope's `container` child.
        let p = identify(
            &format!("/machine.slice/libpod-{DOCKER_ID}.scope/container"),
            &names,
        );
        assert_eq!(p.runtime, Runtime::Podman);
        assert_eq!(p.name.as_deref(), Some("notebook"));
    }

    #[test]
    fn container_queries_accept_what_users_type() {
        let ct = Container {
            runtime: Runtime::Lxc,
            id: "200".into(),
            name: Some("cuda-box".into()),
            pod_uid: None,
            cgroup: "/lxc/200".into(),
        };
        assert!(matches(&ct, "200") && matches(&ct, "cuda-box"));
        assert!(!matches(&ct, "20"));
        let d = id_of(&format!("/docker/{DOCKER_ID}"));
        assert!(matches(&d, "3f2a9c") && matches(&d, DOCKER_ID));
        assert!(!matches(&d, "3f2"), "too short to be unambiguous");
        assert!(
            !matches(&id_of("/user.slice"), "/user.slice"),
            "plain cgroups are not containers"
        );
    }

    #[test]
    fn ids_must_have_the_runtimes_format() {
        for path in [
            "/system.slice/docker-abc.scope",
            "/system.slice/docker-$(id).scope",
            &format!("/system.slice/docker-{}.scope", DOCKER_ID.to_uppercase()),
            &format!("/docker/{}", &DOCKER_ID[..12]),
            &format!("/machine.slice/libpod-conmon-{DOCKER_ID}.scope"),
        ] {
            assert_eq!(id_of(path).runtime, Runtime::Cgroup, "{path}");
        }
    }

    #[test]
    fn runtime_names_inside_a_delegated_subtree_are_plain_cgroups() {
        let mount = tempfile::tempdir().expect("temp dir");
        let delegated = mount
            .path()
            .join("user.slice/user-1000.slice/user@1000.service");
        let fake = format!("docker-{DOCKER_ID}.scope");
        fs::create_dir_all(delegated.join(&fake)).expect("make tree");
        fs::create_dir_all(mount.path().join("system.slice").join(&fake)).expect("make tree");
        // systemd delegates by handing the unit's directory to the user.
        std::os::unix::fs::chown(&delegated, Some(1000), Some(1000)).expect("chown");
        let names = NameSources {
            pve_lxc_dir: "/nonexistent".into(),
            docker_containers_dir: "/nonexistent".into(),
            podman_containers_file: "/nonexistent".into(),
            cgroup2_mount: Some(mount.path().to_path_buf()),
        };
        let attacker = identify(
            &format!("/user.slice/user-1000.slice/user@1000.service/{fake}"),
            &names,
        );
        assert_eq!(
            (attacker.runtime, attacker.id.as_str()),
            (Runtime::Systemd, "user@1000.service"),
            "the delegated unit, not the victim's container"
        );
        assert!(!matches(&attacker, &DOCKER_ID[..12]));
        let victim = identify(&format!("/system.slice/{fake}"), &names);
        assert_eq!(
            (victim.runtime, victim.id.as_str()),
            (Runtime::Docker, DOCKER_ID)
        );
    }
}
