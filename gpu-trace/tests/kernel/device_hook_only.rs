//! `--device-hook-only`: the device hook alone reports each access, with
//! the path read from the syscall's saved registers, and the open-syscall
//! tracepoints stay out of the kernel.

use gpu_trace::scenario::PROBE_COMM;
use gpu_trace_common::program;

use crate::common::*;

/// Names of gpu-trace's open-syscall programs that are loaded right now.
fn loaded_open_programs() -> Vec<String> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter_map(|info| info.name_as_str().map(str::to_string))
        .filter(|name| {
            program::OPEN_CALLS
                .iter()
                .any(|ours| program::as_loaded(ours) == name)
        })
        .collect()
}

#[test]
fn device_hook_only_reports_denied_opens_and_mknods_with_their_paths() {
    let incident = or_skip!(incident_test, "hook-only");
    let made = incident.nodes.path("made-nvidia-uvm");
    let watcher = incident.watch(&["--format", "json", "--device-hook-only"]);
    let stderr = watcher.stderr_seen.clone();
    let device_hook = says(&stderr, "gpu-trace: hook active:", "fexit")
        || (!fexit_expected() && says(&stderr, "gpu-trace: hook active:", "observer"));
    assert!(device_hook, "no device hook active: {stderr:#?}");
    assert!(
        says(
            &stderr,
            "gpu-trace: hook refused:",
            "left out (--opens none)"
        ),
        "the tracepoints are announced as left out: {stderr:#?}"
    );
    let open_programs = loaded_open_programs();
    assert!(
        open_programs.is_empty(),
        "no open tracepoint program may be loaded: {open_programs:?}"
    );

    let child = run_probe(
        Path::new(gpu_trace()),
        &[&incident.cgroup],
        &[
            incident.open_rw("nvidia-uvm"),
            ProbeOp::Mknod {
                path: made.clone(),
                major: incident.uvm_major,
                minor: 1,
            },
        ],
    )
    .expect("run probe in scratch cgroup");
    assert_eq!(child.results, [libc::EPERM, libc::EPERM], "both denied");
    let (status, stderr, events) = watcher.stop_with_events(child.pid);
    assert!(status.success(), "{stderr:#?}");
    assert_eq!(events.len(), 2, "{events:#?}");

    let policy_id = incident.policy.program_id().expect("policy id");
    let check = |event: &Value, path: &Path, syscall: &str, access: &str, minor: u32| {
        assert_eq!(event["verdict"], "denied", "{event:#}");
        assert_eq!(event["path"], path.to_str().expect("utf-8"), "{event:#}");
        assert_eq!(event["syscall"], syscall, "{event:#}");
        // The call's result is not traced in this mode: unknown, not made up.
        assert_eq!(event["ret"], Value::Null, "{event:#}");
        assert_eq!(event["errno"], Value::Null, "{event:#}");
        assert_eq!(event["pid"], child.pid);
        assert_eq!(event["comm"], PROBE_COMM);
        assert_eq!(event["major"], incident.uvm_major);
        assert_eq!(event["minor"], minor);
        assert_eq!(event["access"], access);
        assert_eq!(
            event["cgroup"],
            incident.cgroup.relative_path().to_str().expect("utf-8")
        );
        assert_eq!(event["denied_by"]["id"], policy_id, "{event:#}");
    };
    check(
        &events[0],
        &incident.nodes.path("nvidia-uvm"),
        "openat",
        "rw",
        0,
    );
    // glibc's mknod() is the mknodat syscall.
    check(&events[1], &made, "mknodat", "m", 1);
}

#[test]
fn mknod_outside_open_calls_is_reported_with_its_path() {
    let incident = or_skip!(incident_test, "mknod-path");
    let made = incident.nodes.path("made-nvidia-uvm");
    let watcher = incident.watch(&["--format", "json"]);
    let child = run_probe(
        Path::new(gpu_trace()),
        &[&incident.cgroup],
        &[ProbeOp::Mknod {
            path: made.clone(),
            major: incident.uvm_major,
            minor: 1,
        }],
    )
    .expect("run probe in scratch cgroup");
    assert_eq!(child.results, [libc::EPERM]);
    let (status, stderr, events) = watcher.stop_with_events(child.pid);
    assert!(status.success(), "{stderr:#?}");
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["path"], made.to_str().expect("utf-8"));
    assert_eq!(events[0]["syscall"], "mknodat");
    assert_eq!(events[0]["access"], "m");
    assert_eq!(events[0]["ret"], Value::Null);
}
