//! What a cgroup may open, decided as the kernel would: its BPF device
//! programs first, then cgroup v1's devices.list; and the NVIDIA nodes one
//! mount namespace sees, each with that decision. `check` reports it.

use std::{
    fs,
    os::unix::fs::{FileTypeExt, MetadataExt},
    path::{Path, PathBuf},
};

use gpu_trace_common::{ACCESS_READ, ACCESS_WRITE};
use gpu_trace_policy::{Answer, DeviceQuery, DevicesList, V1Answer, ACCESS_LETTERS};
use serde::Serialize;

use crate::{
    analysis::gpu_allocation::allocation_of,
    host::{
        in_root::char_devices_in, nvidia_gpus::NvidiaGpus, pod_resources::ContainerAllocation,
        proc_devices::CharMajors,
    },
    kernel::programs_in_force::CgroupPolicy,
    model::node::NvidiaNode,
    text::shell_word::prose,
};

/// Nodes that should exist on a host with the driver and nvidia_uvm loaded.
const EXPECTED: [&str; 4] = [
    "nvidiactl",
    "nvidia-uvm",
    "nvidia-uvm-tools",
    "nvidia-modeset",
];

/// The nodes as one mount namespace sees them.
#[derive(Debug, Serialize)]
pub struct View {
    /// "host" or "target".
    pub name: &'static str,
    pub dev_dir: PathBuf,
    pub nodes: Vec<NodeRow>,
    pub missing: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct NodeRow {
    #[serde(skip)]
    pub node: NvidiaNode,
    pub path: PathBuf,
    pub kind: String,
    pub major: u32,
    pub minor: u32,
    /// The allowed subset of "rwm", '-' for what is denied, '?' unknown.
    pub access: String,
    /// "allowed" (rw), "denied" or "unknown".
    pub verdict: &'static str,
    pub decided_by: String,
    /// Set when the major is not the driver's today.
    pub stale: Option<String>,
    /// For a GPU node of a Kubernetes container: the GPU's UUID, and
    /// whether the kubelet allocated it to the container.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allocated: Option<bool>,
}

pub fn same_root(root: &Path) -> bool {
    let ids = |p: &Path| fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
    ids(root).is_some() && ids(root) == ids(Path::new("/"))
}

/// What a CUDA program opens: nvidiactl, nvidia-uvm and a GPU node.
pub fn is_needed(node: NvidiaNode) -> bool {
    matches!(node, NvidiaNode::Ctl | NvidiaNode::Uvm | NvidiaNode::Gpu(_))
}

/// nvidiactl, nvidia-uvm and at least one nvidiaN: there, current, allowed.
pub fn cuda_usable(view: &View) -> bool {
    let good: Vec<NvidiaNode> = view
        .nodes
        .iter()
        .filter(|r| r.verdict == "allowed" && r.stale.is_none())
        .map(|r| r.node)
        .collect();
    good.contains(&NvidiaNode::Ctl)
        && good.contains(&NvidiaNode::Uvm)
        && good.iter().any(|n| matches!(n, NvidiaNode::Gpu(_)))
}

/// The NVIDIA nodes in /dev under `root` (resolved inside that root, see
/// in_root.rs) and what the policy says about each.
pub fn view(
    name: &'static str,
    root: &Path,
    policy: &CgroupPolicy,
    v1: Option<&DevicesList>,
    majors: &CharMajors,
) -> View {
    let mut found = char_devices_in(root, "dev");
    found.extend(char_devices_in(root, "dev/nvidia-caps"));
    let mut nodes: Vec<NodeRow> = found
        .into_iter()
        .filter_map(|(path, rdev)| {
            let node = NvidiaNode::from_path(path.as_os_str().as_encoded_bytes())?;
            Some(row(path, node, rdev, policy, v1, majors))
        })
        .collect();
    nodes.sort_by(|a, b| a.path.cmp(&b.path));
    let present = |kind: &str| nodes.iter().any(|n| n.kind == kind);
    let mut missing: Vec<String> = EXPECTED
        .iter()
        .filter(|k| !present(k))
        .map(|k| k.to_string())
        .collect();
    if !nodes.iter().any(|n| matches!(n.node, NvidiaNode::Gpu(_))) {
        missing.push("nvidia0 (any nvidiaN)".into());
    }
    View {
        name,
        dev_dir: root.join("dev"),
        nodes,
        missing,
    }
}

pub fn row(
    path: PathBuf,
    node: NvidiaNode,
    rdev: u64,
    policy: &CgroupPolicy,
    v1: Option<&DevicesList>,
    majors: &CharMajors,
) -> NodeRow {
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let decide = |access: u16| decide(policy, v1, &DeviceQuery::char_device(major, minor, access));
    let letters: String = ACCESS_LETTERS
        .iter()
        .map(|&(bit, letter)| match decide(bit).0 {
            Decision::Allowed => letter,
            Decision::Denied => '-',
            Decision::Unknown => '?',
        })
        .collect();
    let (decision, decided_by) = decide(ACCESS_READ | ACCESS_WRITE);
    let stale = match majors.driver(major) {
        Some(driver)
            if driver == node.driver()
                || (node.driver() == "nvidia-frontend" && driver == "nvidia") =>
        {
            None
        }
        owner => {
            let today = majors
                .nvidia_majors()
                .into_iter()
                .find(|&m| majors.driver(m) == Some(node.driver()));
            let owner = owner.map_or("no driver".to_string(), str::to_string);
            Some(match today {
                Some(today) => format!(
                    "major {major} belongs to {owner}; {} has major {today} today (a stale node)",
                    node.driver()
                ),
                None => format!(
                    "major {major} belongs to {owner}, and {} is not loaded",
                    node.driver()
                ),
            })
        }
    };
    NodeRow {
        node,
        path,
        kind: node.name(),
        major,
        minor,
        access: letters,
        verdict: decision.name(),
        decided_by,
        stale,
        gpu: None,
        allocated: None,
    }
}

/// Marks each whole GPU's node with its UUID and whether `container` was
/// allocated it (as the kubelet lists the container's devices).
pub fn mark_allocations(views: &mut [View], gpus: &NvidiaGpus, container: &ContainerAllocation) {
    for row in views.iter_mut().flat_map(|v| v.nodes.iter_mut()) {
        let NvidiaNode::Gpu(minor) = row.node else {
            continue;
        };
        let Some(gpu) = gpus.gpu(minor) else {
            continue;
        };
        row.gpu = Some(gpu.uuid.clone());
        row.allocated = allocation_of(container, gpu).map(|a| a.allocated);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    Denied,
    Unknown,
}

impl Decision {
    /// As `check` reports it.
    pub fn name(self) -> &'static str {
        match self {
            Decision::Allowed => "allowed",
            Decision::Denied => "denied",
            Decision::Unknown => "unknown",
        }
    }
}

/// BPF programs first, then cgroup v1's devices.list, as the kernel checks them.
pub fn decide(
    policy: &CgroupPolicy,
    v1: Option<&DevicesList>,
    query: &DeviceQuery,
) -> (Decision, String) {
    match policy.answer(query) {
        Answer::DeniedBy(i) => return (Decision::Denied, policy.programs[i].label()),
        Answer::Unknown(i, why) => {
            return (
                Decision::Unknown,
                format!("cannot evaluate program {}: {why}", policy.programs[i].id),
            )
        }
        Answer::Allowed => {}
    }
    let by_bpf = if policy.programs.is_empty() {
        "no device program".to_string()
    } else {
        "no program denies it".to_string()
    };
    // The v1 cgroup's name is the target's to choose: its backticks must
    // not open a command in a line that shows one.
    match v1.map(|l| (prose(&l.cgroup), l.answer(query))) {
        None => (Decision::Allowed, by_bpf),
        Some((cgroup, V1Answer::Allowed(line))) => (
            Decision::Allowed,
            format!("{by_bpf}; devices.list of {cgroup}: `{line}`"),
        ),
        Some((cgroup, V1Answer::AllowedByDefault)) => (
            Decision::Allowed,
            format!(
                "{by_bpf}; devices.list of {cgroup} allows all (unlisted deny exceptions possible)"
            ),
        ),
        Some((cgroup, V1Answer::Denied)) => (
            Decision::Denied,
            format!("devices.list of v1 cgroup {cgroup} has no rule for it"),
        ),
    }
}

/// GPU nodes of the host view with no /dev/char/MAJ:MIN link to them. runc
/// (systemd cgroup driver) hands a passed device to systemd as
/// `DeviceAllow=/dev/char/MAJ:MIN`; without the link systemd drops the rule
/// and the next `systemctl daemon-reload` takes the device away.
/// nvidia-modprobe makes nodes without udev, hence without links.
pub fn missing_char_links(view: &View, dev_char: &Path) -> Vec<String> {
    view.nodes
        .iter()
        .filter(|row| {
            let link = dev_char.join(format!("{}:{}", row.major, row.minor));
            !fs::metadata(&link).is_ok_and(|m| {
                m.file_type().is_char_device()
                    && (libc::major(m.rdev()), libc::minor(m.rdev())) == (row.major, row.minor)
            })
        })
        .map(|row| {
            format!(
                "{}/{}:{} is missing (for {}): systemd drops a `DeviceAllow=/dev/char/{}:{}` rule for it, so a passed device is lost at the next `systemctl daemon-reload`; `nvidia-ctk system create-dev-char-symlinks --create-all` makes the links",
                dev_char.display(),
                row.major,
                row.minor,
                row.path.display(),
                row.major,
                row.minor
            )
        })
        .collect()
}

/// What stands in CUDA's way, one line each: stale majors, needed nodes
/// not allowed, nodes missing, nvidia_uvm not loaded.
pub fn problems(views: &[View], nvidia_uvm_loaded: bool) -> Vec<String> {
    let mut problems = Vec::new();
    for view in views {
        for row in &view.nodes {
            if let Some(stale) = &row.stale {
                problems.push(format!("{}: {}", row.path.display(), stale));
            }
            // A GPU the container was not given is denied as it should be.
            if row.verdict != "allowed" && is_needed(row.node) && row.allocated != Some(false) {
                problems.push(format!(
                    "{}: {} ({})",
                    row.path.display(),
                    row.verdict,
                    row.decided_by
                ));
            }
        }
        for name in &view.missing {
            problems.push(format!("{}: {name} is missing", view.dev_dir.display()));
        }
    }
    if !nvidia_uvm_loaded {
        problems.push("the nvidia_uvm module is not loaded (`nvidia-modprobe -u -c=0` loads it and makes its nodes)".into());
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{analysis::test_support::lxc_program, scenario::denylist_program};

    fn policy(insns: Vec<gpu_trace_policy::Insn>) -> CgroupPolicy {
        CgroupPolicy {
            cgroup: "/lxc/200".into(),
            programs: vec![lxc_program(insns)],
        }
    }

    fn rw(major: u32) -> DeviceQuery {
        DeviceQuery::char_device(major, 0, 6)
    }

    #[test]
    fn the_program_that_denies_decides_first() {
        let p = policy(denylist_program(&[(509, 6)]));
        assert_eq!(
            decide(&p, None, &rw(509)),
            (
                Decision::Denied,
                "prog 920 (lxc_devices) at /lxc/200".into()
            )
        );
        assert_eq!(
            decide(&p, None, &rw(195)),
            (Decision::Allowed, "no program denies it".into())
        );
    }

    #[test]
    fn v1_devices_list_decides_after_the_programs() {
        let p = policy(denylist_program(&[]));
        let v1 = DevicesList {
            cgroup: "/lxc/200".into(),
            lines: vec!["c 195:* rwm".into()],
        };
        assert_eq!(
            decide(&p, Some(&v1), &rw(195)),
            (
                Decision::Allowed,
                "no program denies it; devices.list of /lxc/200: `c 195:* rwm`".into()
            )
        );
        assert_eq!(
            decide(&p, Some(&v1), &rw(509)),
            (
                Decision::Denied,
                "devices.list of v1 cgroup /lxc/200 has no rule for it".into()
            )
        );
    }

    #[test]
    fn a_program_that_cannot_be_evaluated_is_unknown_never_a_guess() {
        let p = policy(Vec::new());
        let (decision, why) = decide(&p, None, &rw(509));
        assert_eq!(decision, Decision::Unknown);
        assert!(why.starts_with("cannot evaluate program 920: "), "{why}");
    }

    #[test]
    fn nodes_without_a_dev_char_link_are_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        // /dev/null is c 1:3 everywhere: a link to it counts as present.
        std::os::unix::fs::symlink("/dev/null", dir.path().join("1:3")).expect("link");
        let row = |major, minor, path: &str| NodeRow {
            node: NvidiaNode::Ctl,
            path: path.into(),
            kind: "nvidiactl".into(),
            major,
            minor,
            access: "rwm".into(),
            verdict: "allowed",
            decided_by: String::new(),
            stale: None,
            gpu: None,
            allocated: None,
        };
        let view = View {
            name: "host",
            dev_dir: "/dev".into(),
            nodes: vec![row(1, 3, "/dev/a"), row(195, 255, "/dev/nvidiactl")],
            missing: Vec::new(),
        };
        let warnings = missing_char_links(&view, dir.path());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("/195:255 is missing (for /dev/nvidiactl)"),
            "{}",
            warnings[0]
        );
    }

    #[test]
    fn a_denied_gpu_the_container_was_not_given_is_no_problem_an_allocated_one_is() {
        let proc_driver = tempfile::tempdir().expect("temp dir");
        for (minor, uuid) in [(0, "GPU-aaaa"), (1, "GPU-bbbb")] {
            let dir = proc_driver
                .path()
                .join(format!("nvidia/gpus/0000:1{minor}:00.0"));
            fs::create_dir_all(&dir).expect("gpu dir");
            fs::write(
                dir.join("information"),
                format!("Model: \t\t A100\nGPU UUID: \t\t {uuid}\nBus Location: \t\t 0000:1{minor}:00.0\nDevice Minor: \t\t {minor}\n"),
            )
            .expect("information");
        }
        let gpus = NvidiaGpus::read_from(proc_driver.path());
        let denied = |minor: u32| NodeRow {
            node: NvidiaNode::Gpu(minor),
            path: format!("/dev/nvidia{minor}").into(),
            kind: "gpu".into(),
            major: 195,
            minor,
            access: "--m".into(),
            verdict: "denied",
            decided_by: "prog 920".into(),
            stale: None,
            gpu: None,
            allocated: None,
        };
        let mut views = vec![View {
            name: "target",
            dev_dir: "/dev".into(),
            nodes: vec![denied(0), denied(1)],
            missing: Vec::new(),
        }];
        let given = ContainerAllocation {
            devices: vec![crate::host::pod_resources::AllocatedDevice {
                resource: "nvidia.com/gpu".into(),
                id: "GPU-aaaa".into(),
            }],
            has_claims: false,
        };
        mark_allocations(&mut views, &gpus, &given);
        let rows = &views[0].nodes;
        assert_eq!(
            (rows[0].gpu.as_deref(), rows[0].allocated),
            (Some("GPU-aaaa"), Some(true))
        );
        assert_eq!(
            (rows[1].gpu.as_deref(), rows[1].allocated),
            (Some("GPU-bbbb"), Some(false))
        );
        assert_eq!(
            problems(&views, true),
            ["/dev/nvidia0: denied (prog 920)"],
            "the allocated GPU only"
        );
    }
}
