//! What `run` and `check` are pointed at: a cgroup given by its path, by a
//! process in it, or by the container it belongs to.

use std::{
    fs,
    path::{Path, PathBuf},
};

use anyhow::{bail, Context};

use crate::{
    cgroup::{
        identity::{identify, matches},
        resolver::CgroupResolver,
    },
    model::container::{Container, PodQuery},
    runtime::NameSources,
};

/// `--cgroup PATH`: a directory under the cgroup2 mount, given with or
/// without the mount ("/lxc/200").
pub fn cgroup_dir(mount: &Path, path: &Path) -> anyhow::Result<PathBuf> {
    let full = if path.starts_with(mount) {
        path.to_path_buf()
    } else {
        mount.join(path.strip_prefix("/").unwrap_or(path))
    };
    if !full.join("cgroup.procs").exists() {
        bail!(
            "{} is not a cgroup under the cgroup2 mount {}",
            path.display(),
            mount.display()
        );
    }
    Ok(full)
}

/// `--container NAME-OR-ID` and/or `--pod NAMESPACE/POD`: the cgroup
/// where that container's processes live. Ambiguous or unknown names are
/// errors that list what was found.
pub fn container_dir(
    mount: &Path,
    cgroups: &mut CgroupResolver,
    query: Option<&str>,
    pod: Option<&PodQuery>,
) -> anyhow::Result<PathBuf> {
    let names = NameSources::default();
    let paths = cgroups.all();
    let containers = paths.iter().map(|p| identify(&p.to_string_lossy(), &names));
    let one = the_one(containers, query, pod, mount)?;
    Ok(where_processes_live(
        &mount.join(one.trim_start_matches('/')),
    ))
}

/// The top cgroup of the one container that `query` (a name or id) and
/// `pod` both name.
fn the_one(
    containers: impl Iterator<Item = Container>,
    query: Option<&str>,
    pod: Option<&PodQuery>,
    mount: &Path,
) -> anyhow::Result<String> {
    let mut found: Vec<String> = containers
        .filter(|c| query.is_none_or(|q| matches(c, q)) && pod.is_none_or(|p| p.holds(c)))
        .map(|c| c.cgroup)
        .collect();
    found.sort();
    found.dedup();
    let asked = match (query, pod) {
        (Some(q), Some(p)) => format!("{q:?} in pod {p}"),
        (Some(q), None) => format!("{q:?}"),
        (None, Some(p)) => format!("pod {p}"),
        (None, None) => bail!("no container asked for"),
    };
    match found.as_slice() {
        [] => bail!(
            "no running container matches {asked} (looked for LXC names and CT ids, container ids and names, and pods their runtime names, under {})",
            mount.display()
        ),
        [one] => Ok(one.clone()),
        many => bail!(
            "{asked} matches several containers: {}; give more of the id, or --container with the pod",
            many.join(", ")
        ),
    }
}

/// A container's processes may sit in a child of its top cgroup (cgroup v2
/// puts processes only in leaves once controllers are enabled below): the
/// first directory that holds any, the top one if none does.
pub fn where_processes_live(top: &Path) -> PathBuf {
    let mut pending = vec![top.to_path_buf()];
    while let Some(dir) = pending.pop() {
        if first_pid_in(&dir).is_some() {
            return dir;
        }
        if let Ok(entries) = fs::read_dir(&dir) {
            let mut children: Vec<PathBuf> = entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect();
            children.sort();
            pending.extend(children.into_iter().rev());
        }
    }
    top.to_path_buf()
}

pub fn first_pid_in(dir: &Path) -> Option<u32> {
    fs::read_to_string(dir.join("cgroup.procs"))
        .ok()?
        .lines()
        .next()?
        .trim()
        .parse()
        .ok()
}

/// `--pid PID`: its cgroup2 path ("0::/lxc/200/ns" in /proc/PID/cgroup).
pub fn cgroup_of_pid(pid: u32) -> anyhow::Result<PathBuf> {
    let path = format!("/proc/{pid}/cgroup");
    let text = fs::read_to_string(&path)
        .with_context(|| format!("reading {path} (is pid {pid} running?)"))?;
    unified_path_in(&text)
        .map(PathBuf::from)
        .with_context(|| format!("{path} names no cgroup2 path"))
}

fn unified_path_in(membership: &str) -> Option<&str> {
    membership.lines().find_map(|line| line.strip_prefix("0::"))
}

/// `check`'s target: the cgroup directory and, when known, a process in
/// it. A path, a pid or a container, else gpu-trace's own cgroup.
pub fn check_target(
    mount: &Path,
    cgroups: &mut CgroupResolver,
    cgroup: Option<&Path>,
    pid: Option<u32>,
    container: Option<&str>,
    pod: Option<&PodQuery>,
) -> anyhow::Result<(PathBuf, Option<u32>)> {
    Ok(match (cgroup, pid, container.is_some() || pod.is_some()) {
        (Some(path), _, _) => (cgroup_dir(mount, path)?, None),
        (None, Some(pid), _) => (
            mount.join(
                cgroup_of_pid(pid)?
                    .strip_prefix("/")
                    .unwrap_or(Path::new("")),
            ),
            Some(pid),
        ),
        (None, None, true) => {
            let dir = container_dir(mount, cgroups, container, pod)?;
            let pid = first_pid_in(&dir);
            (dir, pid)
        }
        (None, None, false) => {
            let me = std::process::id();
            (
                mount.join(
                    cgroup_of_pid(me)?
                        .strip_prefix("/")
                        .unwrap_or(Path::new("")),
                ),
                Some(me),
            )
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_and_a_name_pick_one_container_or_say_why_not() {
        let container = |pod: &str, name: &str, id: char| Container {
            runtime: crate::model::container::Runtime::Containerd,
            id: id.to_string().repeat(64),
            name: Some(name.into()),
            pod_uid: None,
            namespace: Some("ml".into()),
            pod: Some(pod.into()),
            cgroup: format!("/kubepods/{id}"),
        };
        let all = || {
            vec![
                container("train-0", "trainer", 'a'),
                container("train-0", "sidecar", 'b'),
                container("train-1", "trainer", 'c'),
            ]
            .into_iter()
        };
        let mount = Path::new("/sys/fs/cgroup");
        let pod = PodQuery::parse("ml/train-1").unwrap();
        assert_eq!(
            the_one(all(), None, Some(&pod), mount).unwrap(),
            "/kubepods/c"
        );
        let two = PodQuery::parse("ml/train-0").unwrap();
        let many = the_one(all(), None, Some(&two), mount)
            .unwrap_err()
            .to_string();
        assert!(
            many.contains("pod ml/train-0 matches several containers: /kubepods/a, /kubepods/b"),
            "{many}"
        );
        assert_eq!(
            the_one(all(), Some("sidecar"), Some(&two), mount).unwrap(),
            "/kubepods/b"
        );
        let none =
            the_one(all(), None, Some(&PodQuery::parse("ml/x").unwrap()), mount).unwrap_err();
        assert!(
            none.to_string()
                .starts_with("no running container matches pod ml/x"),
            "{none}"
        );
    }

    #[test]
    fn reads_the_unified_line_of_proc_pid_cgroup() {
        assert_eq!(
            unified_path_in("5:devices:/\n0::/lxc.payload.box\n"),
            Some("/lxc.payload.box")
        );
        assert_eq!(unified_path_in("5:devices:/\n"), None);
    }

    #[test]
    fn finds_where_processes_live_below_a_top_cgroup() {
        let root = tempfile::tempdir().expect("temp dir");
        fs::create_dir_all(root.path().join("ns/init.scope")).unwrap();
        fs::write(root.path().join("cgroup.procs"), "").unwrap();
        fs::write(root.path().join("ns/cgroup.procs"), "").unwrap();
        fs::write(root.path().join("ns/init.scope/cgroup.procs"), "4242\n").unwrap();
        assert_eq!(
            where_processes_live(root.path()),
            root.path().join("ns/init.scope")
        );
        assert_eq!(first_pid_in(&root.path().join("ns/init.scope")), Some(4242));
    }
}
