//! A device policy written after its cgroup's first process started (rules
//! rewritten while a container ran): `check` names it, and `watch` gives
//! a denial by it the cause rules-rewritten without having seen the
//! device allowed before; a policy written before the process is neither.

use std::process::Child;

use crate::common::*;

/// `sleep` moved into `cgroup`: the cgroup's first process.
fn sleeper_in(cgroup: &ScratchCgroup) -> Child {
    let child = Command::new("sleep")
        .arg("60")
        .spawn()
        .expect("start sleep");
    fs::write(cgroup.path().join("cgroup.procs"), child.id().to_string())
        .expect("move sleep into the cgroup");
    child
}

fn written_after_start(cgroup: &ScratchCgroup) -> Vec<serde_json::Value> {
    let relative = cgroup.relative_path().to_str().expect("UTF-8").to_string();
    let (_, report) = check_json_with(&["--cgroup", &relative], None);
    report["written_after_start"]
        .as_array()
        .unwrap_or_else(|| panic!("written_after_start: {report}"))
        .clone()
}

#[test]
fn check_flags_a_policy_written_after_its_cgroup_started() {
    let host = or_skip!(kernel_test);
    let rules = [(uvm_standin(), ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD)];

    // The container's process first, its rules 3 s later: a rewrite.
    let late = scratch_cgroup(&host, "rewritten");
    let mut first = sleeper_in(&late);
    thread::sleep(Duration::from_secs(3));
    let policy = ScratchPolicy::attach(&late, &rules).expect("attach the late policy");
    let found = written_after_start(&late);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0]["id"].as_u64(), policy.program_id().map(u64::from));
    assert_eq!(found[0]["first_pid"], first.id());
    let after = found[0]["seconds_after_start"].as_u64().expect("seconds");
    assert!((3..60).contains(&after), "{after} s after the start");

    // The rules first, then the process: as any runtime starts a container.
    let early = scratch_cgroup(&host, "written-first");
    let _policy = ScratchPolicy::attach(&early, &rules).expect("attach the early policy");
    let mut second = sleeper_in(&early);
    assert_eq!(written_after_start(&early), Vec::<serde_json::Value>::new());

    for child in [&mut first, &mut second] {
        child.kill().expect("kill sleep");
        child.wait().expect("reap sleep");
    }
}

#[test]
fn watch_names_a_denial_by_rules_written_after_the_start_a_rewrite() {
    let host = or_skip!(kernel_test);
    let major = uvm_standin();
    let rules = [(major, ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD)];
    let nodes = DeviceNodes::create(&[("nvidia-uvm", major, 0)]).expect("mknod");
    let open = ProbeOp::Open {
        path: nodes.path("nvidia-uvm"),
        mode: OpenMode::ReadWrite,
    };
    let watcher = Watcher::start(&["--format", "json", "--major", &major.to_string()]);

    // Rewritten: the process first, the rules 3 s later; the denied open
    // comes from a new process, with no allowed open seen before it.
    let late = scratch_cgroup(&host, "rewritten-watch");
    let mut first = sleeper_in(&late);
    thread::sleep(Duration::from_secs(3));
    let _late_policy = ScratchPolicy::attach(&late, &rules).expect("attach");
    let probe = run_probe(
        std::path::Path::new(gpu_trace()),
        &[&late],
        std::slice::from_ref(&open),
    )
    .expect("probe");
    assert_eq!(probe.results, [libc::EPERM]);
    let events = watcher.wait_for_events(probe.pid, 1);
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0]["cause"], "rules-rewritten", "{:#}", events[0]);
    let explanation = events[0]["explanation"].as_str().expect("explanation");
    assert!(
        explanation.contains(&format!(
            "after the cgroup's first process (pid {}) started",
            first.id()
        )),
        "{explanation}"
    );
    assert!(
        events[0]["denied_by"]["loaded_at"].is_string(),
        "{:#}",
        events[0]
    );

    // Written first: the same denial has its usual cause.
    let early = scratch_cgroup(&host, "written-first-watch");
    let _early_policy = ScratchPolicy::attach(&early, &rules).expect("attach");
    let mut second = sleeper_in(&early);
    let probe = run_probe(std::path::Path::new(gpu_trace()), &[&early], &[open]).expect("probe");
    let events = watcher.wait_for_events(probe.pid, 1);
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(
        events[0]["cause"], "dynamic-major-not-allowed",
        "{:#}",
        events[0]
    );

    watcher.stop_cleanly();
    for child in [&mut first, &mut second] {
        child.kill().expect("kill sleep");
        child.wait().expect("reap sleep");
    }
}
