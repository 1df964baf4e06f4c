//! The evaluator and `check` against the policies LXC itself generates for
//! real containers (with the tests that need LXC).

use crate::{common::*, lxc::*, policy_grid::assert_evaluator_matches_kernel};

#[test]
fn evaluator_matches_the_kernel_for_lxc_generated_policies() {
    let host = or_skip!(lxc_test);
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

/// `gpu-trace check --format json TARGET...` against a /proc/devices copy.
fn check_json(target: &[&str], proc_devices: &Path) -> (Option<i32>, Value) {
    check_json_with(target, Some(proc_devices))
}

#[test]
fn check_names_the_lxc_program_that_denies_uvm_and_passes_once_uvm_is_allowed() {
    let host = or_skip!(lxc_test);
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
    let pid = gpu_trace::cgroup::target::first_pid_in(&cgroup)
        .expect("the container's process")
        .to_string();
    let (status, by_pid) = check_json(&["--pid", &pid], &proc_devices);
    assert_eq!(status, Some(1), "{by_pid:#}");
    assert_eq!(by_pid["pid"], pid.parse::<u32>().expect("pid"));
    let (status, report) = check_json(&["--container", &denying.name], &proc_devices);
    assert_eq!(status, Some(1), "{report:#}");
    let target =
        element_where(&report["views"], "name", "target").expect("the container's own /dev");
    let row = |kind: &str| {
        element_where(&target["nodes"], "kind", kind)
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
            .ends_with(&format!("at {at}, written by lxc")),
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
