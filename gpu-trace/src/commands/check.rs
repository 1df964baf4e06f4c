//! `gpu-trace check`: before anything fails, which NVIDIA devices a cgroup
//! may open, decided by evaluating the device policies actually in force on
//! it, plus node, major and module sanity.

use std::{
    fs,
    io::{self, Write},
    os::unix::fs::{FileTypeExt, MetadataExt},
    path::{Path, PathBuf},
};

use anyhow::Context;
use gpu_trace_common::{ACCESS_MKNOD, ACCESS_READ, ACCESS_WRITE, DEV_TYPE_CHAR};
use serde::Serialize;

use crate::{
    cgroup::identity::identify, cgroup::identity::NameSources, cgroup::paths::CgroupPaths,
    cgroup::target::cgroup_dir, cgroup::target::cgroup_of_pid, cgroup::target::container_dir,
    cgroup::target::first_pid_in, cli::CheckArgs, host::preflight::check_host,
    host::proc_devices::CharMajors, kernel::programs_in_force::CgroupPolicy,
    kernel::programs_in_force::PolicyProgram, kernel::programs_in_force::ProgramCache,
    model::container::Container, model::exit_status, model::node::NvidiaNode,
    render::output::Format,
};
use gpu_trace_policy::{Answer, DeviceQuery, DevicesList, V1Answer};

/// Nodes that should exist on a host with the driver and nvidia_uvm loaded.
const EXPECTED: [&str; 4] = [
    "nvidiactl",
    "nvidia-uvm",
    "nvidia-uvm-tools",
    "nvidia-modeset",
];

#[derive(Debug, Serialize)]
struct CheckReport {
    cgroup: String,
    container: Container,
    pid: Option<u32>,
    programs: Vec<PolicyProgram>,
    devices_list: Option<DevicesListReport>,
    views: Vec<View>,
    nvidia_uvm_loaded: bool,
    /// Every device CUDA needs is there, current and allowed, in the target's view.
    usable: bool,
    problems: Vec<String>,
}

#[derive(Debug, Serialize)]
struct DevicesListReport {
    cgroup: String,
    lines: Vec<String>,
}

/// The nodes as one mount namespace sees them.
#[derive(Debug, Serialize)]
struct View {
    /// "host" or "target".
    name: &'static str,
    dev_dir: PathBuf,
    nodes: Vec<NodeRow>,
    missing: Vec<String>,
}

#[derive(Debug, Serialize)]
struct NodeRow {
    #[serde(skip)]
    node: NvidiaNode,
    path: PathBuf,
    kind: String,
    major: u32,
    minor: u32,
    /// The allowed subset of "rwm", '-' for what is denied, '?' unknown.
    access: String,
    /// "allowed" (rw), "denied" or "unknown".
    verdict: &'static str,
    decided_by: String,
    /// Set when the major is not the driver's today.
    stale: Option<String>,
}

/// Returns the exit status: 0 usable, 1 not (2, on error, is the caller's).
pub fn run(args: CheckArgs) -> anyhow::Result<u8> {
    let host = check_host()?;
    let mount = &host.cgroup2_mount;
    let mut cgroups = CgroupPaths::new(mount);
    let (dir, pid) = match (&args.cgroup, args.pid, &args.container) {
        (Some(path), _, _) => (cgroup_dir(mount, path)?, None),
        (None, Some(pid), _) => (
            mount.join(
                cgroup_of_pid(pid)?
                    .strip_prefix("/")
                    .unwrap_or(Path::new("")),
            ),
            Some(pid),
        ),
        (None, None, Some(query)) => {
            let dir = container_dir(mount, &mut cgroups, query)?;
            let pid = first_pid_in(&dir);
            (dir, pid)
        }
        (None, None, None) => {
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
    };
    let relative = Path::new("/").join(dir.strip_prefix(mount).unwrap_or(&dir));
    let majors = CharMajors::read().context("reading /proc/devices")?;
    let policy = CgroupPolicy::read(mount, &relative, &mut ProgramCache::default())?;
    let v1 = match pid {
        Some(pid) => crate::host::proc_pid::devices_list_of(pid)
            .with_context(|| format!("reading the v1 devices cgroup of pid {pid}"))?,
        None => None,
    };

    let mut views = vec![view(
        "host",
        PathBuf::from("/dev"),
        &policy,
        v1.as_ref(),
        &majors,
    )];
    if let Some(root) = pid
        .map(|p| PathBuf::from(format!("/proc/{p}/root")))
        .filter(|r| !same_root(r))
    {
        views.push(view(
            "target",
            root.join("dev"),
            &policy,
            v1.as_ref(),
            &majors,
        ));
    }
    let target_view = views.last().expect("the host view is always there");
    let mut problems = Vec::new();
    for view in &views {
        for row in &view.nodes {
            if let Some(stale) = &row.stale {
                problems.push(format!("{}: {}", row.path.display(), stale));
            }
            if row.verdict != "allowed" && is_needed(row.node) {
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
    let nvidia_uvm_loaded = Path::new("/sys/module/nvidia_uvm").exists();
    if !nvidia_uvm_loaded {
        problems.push("the nvidia_uvm module is not loaded (`nvidia-modprobe -u -c=0` loads it and makes its nodes)".into());
    }
    let usable = cuda_usable(target_view);
    let report = CheckReport {
        container: identify(&relative.to_string_lossy(), &NameSources::default()),
        cgroup: relative.to_string_lossy().into_owned(),
        pid,
        programs: policy.programs.clone(),
        devices_list: v1.map(|l| DevicesListReport {
            cgroup: l.cgroup,
            lines: l.lines,
        }),
        views,
        nvidia_uvm_loaded,
        usable,
        problems,
    };
    let mut out = io::stdout().lock();
    match args.format {
        Format::Json => writeln!(out, "{}", serde_json::to_string(&report)?)?,
        Format::Human => write_human(&mut out, &report)?,
    }
    Ok(if usable {
        exit_status::OK
    } else {
        exit_status::FAILURE
    })
}

fn same_root(root: &Path) -> bool {
    let ids = |p: &Path| fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
    ids(root).is_some() && ids(root) == ids(Path::new("/"))
}

/// What a CUDA program opens: nvidiactl, nvidia-uvm and a GPU node.
fn is_needed(node: NvidiaNode) -> bool {
    matches!(node, NvidiaNode::Ctl | NvidiaNode::Uvm | NvidiaNode::Gpu(_))
}

/// nvidiactl, nvidia-uvm and at least one nvidiaN: there, current, allowed.
fn cuda_usable(view: &View) -> bool {
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

/// The NVIDIA nodes under `dev_dir` and what the policy says about each.
fn view(
    name: &'static str,
    dev_dir: PathBuf,
    policy: &CgroupPolicy,
    v1: Option<&DevicesList>,
    majors: &CharMajors,
) -> View {
    let mut paths: Vec<PathBuf> = list_dir(&dev_dir);
    paths.extend(list_dir(&dev_dir.join("nvidia-caps")));
    let mut nodes: Vec<NodeRow> = paths
        .into_iter()
        .filter_map(|path| {
            let node = NvidiaNode::from_path(path.as_os_str().as_encoded_bytes())?;
            let meta = fs::metadata(&path).ok()?;
            meta.file_type()
                .is_char_device()
                .then(|| row(path, node, meta.rdev(), policy, v1, majors))
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
        dev_dir,
        nodes,
        missing,
    }
}

fn list_dir(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .map(|entries| entries.flatten().map(|e| e.path()).collect())
        .unwrap_or_default()
}

fn row(
    path: PathBuf,
    node: NvidiaNode,
    rdev: u64,
    policy: &CgroupPolicy,
    v1: Option<&DevicesList>,
    majors: &CharMajors,
) -> NodeRow {
    let (major, minor) = (libc::major(rdev), libc::minor(rdev));
    let decide = |access: u16| {
        decide(
            policy,
            v1,
            &DeviceQuery {
                dev_type: DEV_TYPE_CHAR,
                major,
                minor,
                access,
            },
        )
    };
    let letters: String = [(ACCESS_READ, 'r'), (ACCESS_WRITE, 'w'), (ACCESS_MKNOD, 'm')]
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
        verdict: match decision {
            Decision::Allowed => "allowed",
            Decision::Denied => "denied",
            Decision::Unknown => "unknown",
        },
        decided_by,
        stale,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Allowed,
    Denied,
    Unknown,
}

/// BPF programs first, then cgroup v1's devices.list, as the kernel checks them.
fn decide(
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
    match v1.map(|l| (l, l.answer(query))) {
        None => (Decision::Allowed, by_bpf),
        Some((l, V1Answer::Allowed(line))) => (
            Decision::Allowed,
            format!("{by_bpf}; devices.list of {}: `{line}`", l.cgroup),
        ),
        Some((l, V1Answer::AllowedByDefault)) => (
            Decision::Allowed,
            format!(
                "{by_bpf}; devices.list of {} allows all (unlisted deny exceptions possible)",
                l.cgroup
            ),
        ),
        Some((l, V1Answer::Denied)) => (
            Decision::Denied,
            format!("devices.list of v1 cgroup {} has no rule for it", l.cgroup),
        ),
    }
}

fn write_human(out: &mut impl Write, report: &CheckReport) -> io::Result<()> {
    let pid = report.pid.map(|p| format!(", pid {p}")).unwrap_or_default();
    writeln!(
        out,
        "gpu-trace check: cgroup {} ({}){pid}",
        report.cgroup,
        report.container.label()
    )?;
    match report.programs.len() {
        0 => writeln!(out, "device programs in force: none")?,
        n => {
            writeln!(
                out,
                "device programs in force ({n}, in the order the kernel runs them):"
            )?;
            for p in &report.programs {
                writeln!(
                    out,
                    "  {} ({} attach, tag {})",
                    p.label(),
                    p.attach_mode,
                    p.tag
                )?;
            }
        }
    }
    if let Some(list) = &report.devices_list {
        writeln!(
            out,
            "cgroup v1 devices.list of {}: {}",
            list.cgroup,
            list.lines.join(", ")
        )?;
    }
    for view in &report.views {
        writeln!(out)?;
        writeln!(out, "{} nodes ({}):", view.name, view.dev_dir.display())?;
        if view.nodes.is_empty() {
            writeln!(out, "  (no NVIDIA nodes)")?;
        }
        for row in &view.nodes {
            writeln!(
                out,
                "  {:<32} {:<18} c {:>3}:{:<4} {:<4} {:<8} {}",
                row.path.display().to_string(),
                row.kind,
                row.major,
                row.minor,
                row.access,
                row.verdict,
                row.decided_by
            )?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "nvidia_uvm module: {}",
        if report.nvidia_uvm_loaded {
            "loaded"
        } else {
            "not loaded"
        }
    )?;
    for problem in &report.problems {
        writeln!(out, "problem: {problem}")?;
    }
    if report.usable {
        writeln!(
            out,
            "result: usable: nvidiactl, nvidia-uvm and a GPU node are present, current and allowed"
        )
    } else {
        writeln!(out, "result: NOT usable for CUDA (see the problems above)")
    }
}
