//! Which container a cgroup belongs to, from its path: no runtime socket
//! needed. Names come from the runtimes' own files when readable.
//!
//! A path is a claim anyone with a delegated subtree can make: a user can
//! create `user@1000.service/docker-<victim's id>.scope`. So a runtime's
//! pattern counts only where that runtime could have made the cgroup: in
//! a directory owned by root (not below one handed to another owner), and
//! with the id format the runtime uses.

use std::{fs, os::unix::fs::MetadataExt};

use crate::{
    model::container::{Container, Runtime},
    runtime::{self, is_full_container_id, NameSources, PathStep, ROOMS},
};

/// Identifies the container of a cgroup path (relative to the cgroup2
/// mount). The innermost container wins (docker inside an LXC container is
/// a docker container); a systemd unit counts only outside any container
/// (a service inside an LXC container belongs to that container).
pub fn identify(cgroup: &str, names: &NameSources) -> Container {
    identify_made_by(cgroup, names, None)
}

/// The same, knowing who made the cgroup itself (the kernel's note of a
/// cgroup made since start): a cgroup a user made is that user's claim,
/// also once it and the directories it sat in are gone. A user could only
/// make it inside a directory handed to them, so above it a directory
/// already gone is no longer taken for root's.
pub fn identify_made_by(cgroup: &str, names: &NameSources, creator_uid: Option<u32>) -> Container {
    let components: Vec<&str> = cgroup.split('/').filter(|c| !c.is_empty()).collect();
    let made_by_user = creator_uid.is_some_and(|uid| uid != 0);
    let mut trusted = root_made_depth(names, &components, made_by_user);
    if made_by_user {
        trusted = trusted.min(components.len().saturating_sub(1));
    }
    let mut container = None;
    let mut unit = None;
    for (depth, component) in components.iter().enumerate().take(trusted) {
        let step = PathStep {
            component,
            ancestors: &components[..depth],
        };
        let Some((room, id)) = ROOMS
            .iter()
            .find_map(|room| room.recognise(&step).map(|id| (*room, id)))
        else {
            continue;
        };
        let prefix = format!("/{}", components[..=depth].join("/"));
        if room.is_host_unit() {
            unit = unit.or(Some((room, id, None, prefix)));
        } else {
            container = Some((room, id, pod_uid(step.ancestors), prefix));
        }
    }
    match container.or(unit) {
        Some((room, id, pod_uid, cgroup)) => {
            // A pod's names count only for the pod its path names.
            let pod = room
                .pod_names(&id, names)
                .filter(|p| pod_uid.as_ref().is_none_or(|uid| *uid == p.pod_uid));
            match pod {
                Some(pod) => Container {
                    runtime: room.runtime(),
                    name: Some(pod.container),
                    id,
                    pod_uid: Some(pod.pod_uid),
                    namespace: Some(pod.namespace),
                    pod: Some(pod.pod),
                    cgroup,
                },
                None => Container {
                    runtime: room.runtime(),
                    name: room.name(&id, names),
                    id,
                    pod_uid,
                    namespace: None,
                    pod: None,
                    cgroup,
                },
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
            namespace: None,
            pod: None,
            cgroup: cgroup.into(),
        },
    }
}

/// How many leading components of the path root made: a component counts
/// when the directory it sits in is owned by root. Below a directory owned
/// by anyone else (a delegated subtree), its owner could have made any
/// name. A directory already gone is no evidence either way, unless
/// `gone_is_untrusted`.
fn root_made_depth(names: &NameSources, components: &[&str], gone_is_untrusted: bool) -> usize {
    let Some(mount) = &names.cgroup2_mount else {
        return components.len();
    };
    let mut dir = mount.clone();
    for (depth, component) in components.iter().enumerate() {
        let untrusted = match fs::metadata(&dir) {
            Ok(meta) => meta.uid() != 0,
            Err(_) => gone_is_untrusted,
        };
        if untrusted {
            return depth;
        }
        dir.push(component);
    }
    components.len()
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

/// Does `query` (what a user typed for --container) name this container?
/// A CT id, a name, a full or short (>= 4 characters) container id.
pub fn matches(container: &Container, query: &str) -> bool {
    if !runtime::of(container.runtime).is_container() || query.is_empty() {
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
                containerd_k8s_bundles_dir: "/none".into(),
                crio_containers_dir: "/none".into(),
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
            containerd_k8s_bundles_dir: "/none".into(),
            crio_containers_dir: "/none".into(),
            cgroup2_mount: None,
        };

        let ct = identify("/lxc/200/ns", &names);
        assert_eq!(ct.name.as_deref(), Some("cuda-box"));
        assert_eq!(runtime::label(&ct), "ct 200 (cuda-box)");
        let d = identify(&format!("/system.slice/docker-{DOCKER_ID}.scope"), &names);
        assert_eq!(d.name.as_deref(), Some("trainer"));
        assert_eq!(runtime::label(&d), "docker 3f2a9c1b0d4e (trainer)");
        // crun's program and processes sit in the scope's `container` child.
        let p = identify(
            &format!("/machine.slice/libpod-{DOCKER_ID}.scope/container"),
            &names,
        );
        assert_eq!(p.runtime, Runtime::Podman);
        assert_eq!(p.name.as_deref(), Some("notebook"));
    }

    #[test]
    fn a_kubernetes_container_is_named_by_its_pod_from_the_runtimes_bundle() {
        if !nix::unistd::geteuid().is_root() {
            eprintln!("skipping: bundles count only when root's, and only root makes one");
            return;
        }
        let root = tempfile::tempdir().unwrap();
        let bundles = root.path().join("k8s.io");
        fs::create_dir_all(bundles.join(DOCKER_ID)).unwrap();
        let annotations = |uid: &str| {
            serde_json::json!({"annotations": {
                "io.kubernetes.cri.sandbox-namespace": "ml-team",
                "io.kubernetes.cri.sandbox-name": "train-0",
                "io.kubernetes.cri.sandbox-uid": uid,
                "io.kubernetes.cri.container-name": "trainer",
            }})
            .to_string()
        };
        let config = bundles.join(DOCKER_ID).join("config.json");
        fs::write(&config, annotations("6b1e2a3c-4d5e-6f70-8192-a3b4c5d6e7f8")).unwrap();
        let names = NameSources {
            pve_lxc_dir: "/none".into(),
            docker_containers_dir: "/none".into(),
            podman_containers_file: "/none".into(),
            containerd_k8s_bundles_dir: bundles,
            crio_containers_dir: "/none".into(),
            cgroup2_mount: None,
        };
        let path = format!("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6b1e2a3c_4d5e_6f70_8192_a3b4c5d6e7f8.slice/cri-containerd-{DOCKER_ID}.scope");
        let c = identify(&path, &names);
        assert_eq!(c.namespace.as_deref(), Some("ml-team"));
        assert_eq!(c.pod.as_deref(), Some("train-0"));
        assert_eq!(c.name.as_deref(), Some("trainer"));
        assert_eq!(
            runtime::label(&c),
            "pod ml-team/train-0 (container trainer)"
        );
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["namespace"], "ml-team");
        assert_eq!(json["pod"], "train-0");
        assert_eq!(json["pod_uid"], "6b1e2a3c-4d5e-6f70-8192-a3b4c5d6e7f8");
        // A bundle that names another pod than the path's is not believed.
        fs::write(&config, annotations("00000000-4d5e-6f70-8192-a3b4c5d6e7f8")).unwrap();
        let c = identify(&path, &names);
        assert_eq!((c.pod, c.namespace, c.name), (None, None, None));
        assert_eq!(
            c.pod_uid.as_deref(),
            Some("6b1e2a3c-4d5e-6f70-8192-a3b4c5d6e7f8")
        );
    }

    #[test]
    fn container_queries_accept_what_users_type() {
        let ct = Container {
            runtime: Runtime::Lxc,
            id: "200".into(),
            name: Some("cuda-box".into()),
            pod_uid: None,
            namespace: None,
            pod: None,
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
            containerd_k8s_bundles_dir: "/none".into(),
            crio_containers_dir: "/none".into(),
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

    #[test]
    fn a_cgroup_a_user_made_is_not_a_runtimes_claim() {
        // A cgroup2 tree of root's, as systemd makes it (the tests run as root).
        let tree = tempfile::tempdir().expect("temp dir");
        std::fs::create_dir_all(tree.path().join("user.slice/user@1000.service")).expect("mkdir");
        let names = NameSources {
            cgroup2_mount: Some(tree.path().to_path_buf()),
            ..NameSources::default()
        };
        let path = format!("/user.slice/user@1000.service/docker-{DOCKER_ID}.scope");
        let by_root = identify_made_by(&path, &names, Some(0));
        assert_eq!(by_root.runtime, Runtime::Docker);
        let by_user = identify_made_by(&path, &names, Some(1000));
        assert_eq!(by_user.runtime, Runtime::Systemd);
        assert_eq!(by_user.id, "user@1000.service");
        assert_eq!(identify_made_by(&path, &names, None), by_root);
        // Deeper, below a directory of the tenant's already gone: taken for
        // root's without a creator, the tenant's claim with one.
        let deeper = format!("/user.slice/user@1000.service/gone/docker-{DOCKER_ID}.scope/x");
        assert_eq!(
            identify_made_by(&deeper, &names, None).runtime,
            Runtime::Docker
        );
        let by_user = identify_made_by(&deeper, &names, Some(1000));
        assert_eq!(by_user.runtime, Runtime::Systemd);
        assert_eq!(by_user.id, "user@1000.service");
    }
}
