//! The policy evaluator against the kernel: for real policies, what the
//! evaluator answers must be what an open() or mknod() from a child in that
//! cgroup actually gets; and `check` built on it.

use std::{fs, path::Path, process::Command};

use gpu_trace::{
    evaluator::DeviceQuery,
    policy::{Answer, CgroupPolicy, ProgramCache},
    scenario::{run_probe_in, DeviceNodes, OpenMode, ProbeOp, ScratchPolicy, SCRATCH_POLICY_NAME},
};
use gpu_trace_common::{ACCESS_MKNOD, ACCESS_READ, ACCESS_WRITE, DEV_TYPE_CHAR};
use serde_json::Value;

use crate::{common::*, lxc::*};

/// Opens (r, w, rw) and mknods over majors × minors; each op with the
/// access it asks of the device policy.
pub fn grid(nodes: &DeviceNodes, majors: &[u32]) -> Vec<(ProbeOp, DeviceQuery)> {
    let mut ops = Vec::new();
    for &major in majors {
        for minor in [0, 3, 255] {
            let name = format!("n-{major}-{minor}");
            let query = |access| DeviceQuery {
                dev_type: DEV_TYPE_CHAR,
                major,
                minor,
                access,
            };
            for (mode, access) in [
                (OpenMode::Read, ACCESS_READ),
                (OpenMode::Write, ACCESS_WRITE),
                (OpenMode::ReadWrite, ACCESS_READ | ACCESS_WRITE),
            ] {
                ops.push((
                    ProbeOp::Open {
                        path: nodes.path(&name),
                        mode,
                    },
                    query(access),
                ));
            }
            let made = nodes.path(&format!("made-{major}-{minor}"));
            ops.push((
                ProbeOp::Mknod {
                    path: made,
                    major,
                    minor,
                },
                query(ACCESS_MKNOD),
            ));
        }
    }
    ops
}

pub fn grid_nodes(majors: &[u32]) -> DeviceNodes {
    let names: Vec<(String, u32, u32)> = majors
        .iter()
        .flat_map(|&major| [0, 3, 255].map(|minor| (format!("n-{major}-{minor}"), major, minor)))
        .collect();
    let specs: Vec<(&str, u32, u32)> = names.iter().map(|(n, a, b)| (n.as_str(), *a, *b)).collect();
    DeviceNodes::create(&specs).expect("mknod grid")
}

/// Runs the grid in `cgroup_dir` and compares every errno with the
/// evaluator's answer for the policy in force there.
pub fn assert_evaluator_matches_kernel(
    host_mount: &Path,
    cgroup_dir: &Path,
    majors: &[u32],
) -> CgroupPolicy {
    let nodes = grid_nodes(majors);
    let ops = grid(&nodes, majors);
    let probe_ops: Vec<ProbeOp> = ops.iter().map(|(op, _)| op.clone()).collect();
    let outcome =
        run_probe_in(Path::new(gpu_trace()), &[cgroup_dir], &probe_ops).expect("probe in cgroup");
    let relative = Path::new("/").join(
        cgroup_dir
            .strip_prefix(host_mount)
            .expect("under the mount"),
    );
    let policy = CgroupPolicy::read(host_mount, &relative, &mut ProgramCache::default())
        .expect("read policy");
    assert!(
        !policy.programs.is_empty(),
        "a policy is in force on {}",
        relative.display()
    );
    let (mut denied, mut allowed) = (0, 0);
    for ((op, query), errno) in ops.iter().zip(&outcome.results) {
        let kernel_denied = *errno == libc::EPERM;
        match policy.answer(query) {
            Answer::DeniedBy(_) => {
                assert!(
                    kernel_denied,
                    "{op:?}: evaluator denies, kernel gave errno {errno}"
                );
                denied += 1;
            }
            Answer::Allowed => {
                assert!(
                    !kernel_denied,
                    "{op:?}: evaluator allows, kernel gave EPERM"
                );
                allowed += 1;
            }
            Answer::Unknown(i, why) => {
                panic!("cannot evaluate program {}: {why}", policy.programs[i].id)
            }
        }
    }
    eprintln!(
        "grid in {}: {denied} denied, {allowed} allowed",
        relative.display()
    );
    assert!(
        denied > 0 && allowed > 0,
        "the grid has both outcomes: {denied} denied, {allowed} allowed"
    );
    policy
}

#[test]
fn evaluator_matches_the_kernel_for_a_generated_policy() {
    let Some(host) = kernel_test("evaluator_matches_the_kernel_for_a_generated_policy") else {
        return;
    };
    let major = uvm_standin();
    let cgroup = scratch_cgroup(&host, "eval-generated");
    let policy = ScratchPolicy::attach(
        &cgroup,
        &[
            (major, ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD),
            (major - 1, ACCESS_WRITE),
        ],
    )
    .expect("attach policy");
    let read = assert_evaluator_matches_kernel(
        &host.cgroup2_mount,
        cgroup.path(),
        &[195, major, major - 1],
    );
    assert_eq!(read.programs.len(), 1, "{read:#?}");
    assert_eq!(Some(read.programs[0].id), policy.program_id());
    assert_eq!(read.programs[0].name, SCRATCH_POLICY_NAME);
    assert_eq!(
        read.programs[0].attached_at,
        cgroup.relative_path().to_str().expect("utf-8")
    );
    assert_eq!(
        read.programs[0].attach_mode, "multi",
        "attached with a link"
    );
}

#[test]
fn evaluator_matches_the_kernel_for_lxc_generated_policies() {
    let Some(host) = lxc_test("evaluator_matches_the_kernel_for_lxc_generated_policies") else {
        return;
    };
    let major = uvm_standin();
    let empty = DeviceNodes::create(&[]).expect("no nodes");
    // An allow list (deny everything else) and a deny list (allow everything else), as LXC writes them.
    let allowlist = allowlist_rules(&[
        "c 1:3 rwm",
        "c 195:* rwm",
        &format!("c {major}:0 r"),
        &format!("c {}:* m", major - 1),
    ]);
    let denylist = vec![
        "lxc.cgroup2.devices.allow = a".to_string(),
        format!("lxc.cgroup2.devices.deny = c {major}:* rwm"),
        "lxc.cgroup2.devices.deny = c 195:255 w".to_string(),
    ];
    for (test, rules) in [("eval-allow", allowlist), ("eval-deny", denylist)] {
        let mut container = LxcContainer::new(test, &empty, &[], &rules, "sleep 60");
        container.start();
        let cgroup = container.wait_running(&host.cgroup2_mount);
        let policy = assert_evaluator_matches_kernel(
            &host.cgroup2_mount,
            &cgroup,
            &[195, major, major - 1, 1],
        );
        assert!(
            policy.programs.iter().any(|p| p.attached_at
                == format!("/{}", cgroup.file_name().expect("name").to_string_lossy())),
            "LXC's program is attached at the container's cgroup: {policy:#?}"
        );
    }
}

/// A copy of /proc/devices in which the stand-in major is nvidia-uvm's, so
/// the container's nodes count as current.
fn proc_devices_with_uvm_at(dir: &Path, major: u32) -> std::path::PathBuf {
    let path = dir.join("devices");
    fs::write(&path, format!("Character devices:\n  1 mem\n195 nvidia-frontend\n{major} nvidia-uvm\n\nBlock devices:\n")).expect("write devices copy");
    path
}

/// `gpu-trace check --format json TARGET...`, e.g. `["--container", name]`.
fn check_json(target: &[&str], proc_devices: &Path) -> (Option<i32>, Value) {
    let output = Command::new(gpu_trace())
        .args(["check", "--format", "json"])
        .args(target)
        .env("GPU_TRACE_PROC_DEVICES", proc_devices)
        .output()
        .expect("run gpu-trace check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "check --format json ({e}): {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code(), report)
}

#[test]
fn check_names_the_lxc_program_that_denies_uvm_and_passes_once_uvm_is_allowed() {
    let Some(host) = lxc_test("check_names_the_lxc_program_that_denies_uvm") else {
        return;
    };
    let major = uvm_standin();
    let nodes = DeviceNodes::create(&[
        ("nvidiactl", 195, 255),
        ("nvidia0", 195, 0),
        ("nvidia-uvm", major, 0),
        ("nvidia-uvm-tools", major, 1),
        ("nvidia-modeset", 195, 254),
    ])
    .expect("mknod");
    let proc_devices = proc_devices_with_uvm_at(nodes.dir(), major);
    let names = [
        "nvidiactl",
        "nvidia0",
        "nvidia-uvm",
        "nvidia-uvm-tools",
        "nvidia-modeset",
    ];

    let mut denying = LxcContainer::new(
        "check-deny",
        &nodes,
        &names,
        &allowlist_rules(&["c 1:3 rwm", "c 195:* rwm"]),
        "sleep 60",
    );
    denying.start();
    let cgroup = denying.wait_running(&host.cgroup2_mount);
    // By a process in the container, as a user holding its pid would ask.
    let pid = gpu_trace::target::first_pid_in(&cgroup)
        .expect("the container's process")
        .to_string();
    let (status, by_pid) = check_json(&["--pid", &pid], &proc_devices);
    assert_eq!(status, Some(1), "{by_pid:#}");
    assert_eq!(by_pid["pid"], pid.parse::<u32>().expect("pid"));
    let (status, report) = check_json(&["--container", &denying.name], &proc_devices);
    assert_eq!(status, Some(1), "{report:#}");
    let target = report["views"]
        .as_array()
        .expect("views")
        .iter()
        .find(|v| v["name"] == "target")
        .expect("the container's own /dev");
    let row = |kind: &str| {
        target["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .find(|n| n["kind"] == kind)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind}: {target:#}"))
    };
    let uvm = row("nvidia-uvm");
    assert_eq!(uvm["verdict"], "denied", "{uvm:#}");
    let at = format!("/{}", cgroup.file_name().expect("name").to_string_lossy());
    assert!(
        uvm["decided_by"]
            .as_str()
            .expect("decided_by")
            .ends_with(&format!("at {at}")),
        "{uvm:#}"
    );
    assert_eq!(uvm["access"], "---");
    assert_eq!(row("nvidiactl")["verdict"], "allowed");
    assert_eq!(row("nvidia0")["access"], "rwm");
    assert_eq!(report["container"]["runtime"], "lxc");
    assert!(
        report["problems"]
            .as_array()
            .expect("problems")
            .iter()
            .any(|p| p.as_str().is_some_and(|p| p.contains("nvidia-uvm: denied"))),
        "{report:#}"
    );
    drop(denying);

    let mut allowing = LxcContainer::new(
        "check-allow",
        &nodes,
        &names,
        &allowlist_rules(&["c 1:3 rwm", "c 195:* rwm", &format!("c {major}:* rwm")]),
        "sleep 60",
    );
    allowing.start();
    allowing.wait_running(&host.cgroup2_mount);
    let (status, report) = check_json(&["--container", &allowing.name], &proc_devices);
    assert_eq!(status, Some(0), "uvm allowed now: {report:#}");
    assert_eq!(report["usable"], true);
}

#[test]
fn check_exits_2_on_a_bad_target() {
    let Some(_host) = kernel_test("check_exits_2_on_a_bad_target") else {
        return;
    };
    let output = Command::new(gpu_trace())
        .args(["check", "--cgroup", "/no/such/gpu-trace/cgroup"])
        .output()
        .expect("run check");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a cgroup"));
}
