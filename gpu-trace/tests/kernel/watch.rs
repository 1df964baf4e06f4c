//! `watch` and the tracer core against the real kernel.

use std::{collections::HashSet, fs, os::unix::process::CommandExt};

use gpu_trace::{
    host::{proc_devices::CharMajors, v1_device_limits::V1DeviceLimits},
    model::node::NVIDIA_FRONTEND_MAJOR,
    scenario::PROBE_COMM,
};
use gpu_trace_common::program;

use crate::common::*;

#[test]
fn denied_open_is_reported_once_with_its_cgroup_process_device_and_errno() {
    let incident = or_skip!(incident_test, "denied");
    let watcher = incident.watch(&["--format", "json", "--opens", "full"]);

    let child = run_probe(
        Path::new(gpu_trace()),
        &[&incident.cgroup],
        &[incident.open_rw("nvidia-uvm")],
    )
    .expect("run probe in scratch cgroup");
    assert_eq!(
        child.results,
        [libc::EPERM],
        "the policy denies the uvm stand-in"
    );

    // Every hook this kernel supports must be in place: a refused one fails here.
    assert_hooks_in_place(&watcher.stderr_seen);
    let live = watcher.wait_for_events(child.pid, 1);
    assert_eq!(live.len(), 1, "streamed while running: {live:#?}");
    let (status, stderr) = watcher.stop();
    assert!(
        status.success(),
        "watch exits 0 on SIGINT: {status}, stderr {stderr:#?}"
    );
    assert!(
        stderr
            .iter()
            .any(|l| l.contains("detached; events 1, denied 1, lost 0")),
        "summary line: {stderr:#?}"
    );

    let event = &live[0];
    let path = incident.nodes.path("nvidia-uvm");
    assert_eq!(event["verdict"], "denied");
    assert_eq!(event["verdict_source"], "cgroup-bpf");
    assert_eq!(
        event["cgroup"],
        incident.cgroup.relative_path().to_str().expect("utf-8")
    );
    assert_eq!(event["pid"], child.pid);
    assert_eq!(event["tid"], child.pid);
    assert_eq!(event["comm"], PROBE_COMM);
    assert_eq!(event["uid"], 0);
    assert_eq!(event["type"], "c");
    assert_eq!(event["major"], incident.uvm_major);
    assert_eq!(event["minor"], 0);
    assert_eq!(event["access"], "rw");
    assert_eq!(event["path"], path.to_str().expect("utf-8"));
    assert_eq!(event["syscall"], "openat");
    assert_eq!(event["errno"], "EPERM");
    assert_eq!(event["ret"], -libc::EPERM);
    assert_eq!(event["bpf_retval"], -1);
    // Attributed to the very program attached to the scratch cgroup.
    let culprit = &event["denied_by"];
    assert_eq!(culprit["kind"], "program", "{event:#}");
    assert_eq!(
        culprit["id"],
        incident.policy.program_id().expect("policy id")
    );
    assert_eq!(
        culprit["attached_at"],
        incident.cgroup.relative_path().to_str().expect("utf-8")
    );
}

#[test]
fn a_32_bit_process_denied_is_reported_once_with_its_path() {
    let host = or_skip!(kernel_test);
    let Some(open32) = c_program(
        "a_32_bit_process_denied_is_reported_once",
        "open32",
        &["-m32"],
    ) else {
        return;
    };
    let incident = Incident::new(&host, "compat");
    let path = incident.nodes.path("nvidia-uvm");
    // The route the host gets by default, and the full picture: 32-bit
    // syscalls pass no syscall tracepoint, and with fexit on the open
    // function the device hook finds the call from the saved registers,
    // which a 32-bit process fills in its own way.
    for route in ["auto", "full"] {
        let (_, event) = the_one_denial_of(&incident, route, &open32, &[]);
        assert_eq!(
            event["path"],
            path.to_str().expect("utf-8"),
            "{route}: {event:#}"
        );
        assert_eq!(event["syscall"], "openat", "{route}: {event:#}");
        if fexit_expected() {
            assert_eq!(event["errno"], "EPERM", "{route}: {event:#}");
        }
    }
}

#[test]
fn a_denied_open_by_io_urings_worker_is_reported_not_lost() {
    let host = or_skip!(kernel_test);
    // Before 5.12 io_uring's workers were kernel threads outside the
    // submitter's cgroup: its device policy did not apply to them.
    if aya::util::KernelVersion::current().expect("kernel version")
        < aya::util::KernelVersion::new(5, 12, 0)
    {
        eprintln!(
            "a_denied_open_by_io_urings_worker: not applicable: this kernel's io_uring workers are kernel threads outside the cgroup"
        );
        return;
    }
    let Some(uring_open) = c_program("a_denied_open_by_io_urings_worker", "uring_open", &[]) else {
        return;
    };
    let incident = Incident::new(&host, "uring");
    // A worker is a thread of the submitter in no open syscall: its saved
    // registers are a copy of the submitter's. The device hook must report
    // it at once, not leave it for an open's exit that never comes. Made by
    // io_uring_enter, or (given a FIFO's path) on the way out of an openat
    // of that FIFO, whose path the registers then point to: there 6.1
    // issues the open inline, in the submitter's task work after that
    // openat returned, and 6.12 hands it to a worker made at that moment.
    let fifos = tempfile::tempdir().expect("temp dir");
    for route in ["auto", "full"] {
        let fifo = fifos.path().join(route);
        for args in [&[][..], &[fifo.as_path()][..]] {
            let (pid, event) = the_one_denial_of(&incident, route, &uring_open, args);
            let made_by = if args.is_empty() {
                "io_uring_enter"
            } else {
                "an openat of a FIFO"
            };
            let how = format!("{route}, open queued by {made_by}");
            if args.is_empty() {
                assert_ne!(event["tid"], pid, "{how}: a worker thread: {event:#}");
            }
            // Not an open syscall: no path from the copied registers.
            assert!(event["syscall"].is_null(), "{how}: {event:#}");
            assert!(event["path"].is_null(), "{how}: {event:#}");
        }
    }
}

#[test]
fn an_open_refused_by_file_mode_is_not_given_an_earlier_opens_device() {
    let incident = or_skip!(incident_test, "reuse");
    // A node the probe's user may not open: refused by its mode, before
    // any device check.
    let locked = incident.nodes.dir().join("nvidia-uvm-locked");
    nix::sys::stat::mknod(
        &locked,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o600),
        nix::sys::stat::makedev(incident.uvm_major.into(), 1),
    )
    .expect("mknod the locked node");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(incident.nodes.dir(), std::fs::Permissions::from_mode(0o755))
        .expect("let the probe's user into the nodes' directory");
    // One thread, one path buffer (the probe's opens share a stack frame):
    // a watched device opened fine, then the locked node, then the denial.
    let ops = [
        ProbeOp::BecomeUser { uid: 65534 },
        ProbeOp::Open {
            path: "/dev/null".into(),
            mode: OpenMode::Read,
        },
        ProbeOp::Open {
            path: locked,
            mode: OpenMode::Read,
        },
        incident.open_rw("nvidia-uvm"),
    ];
    for route in ["auto", "full"] {
        // /dev/null's major watched: its open leaves what the device hook
        // saw, which the locked node's failed open must not take.
        let watcher = watch_unfolded(route, &[incident.uvm_major, 1]);
        let probe = run_probe(Path::new(gpu_trace()), &[&incident.cgroup], &ops).expect("probe");
        assert_eq!(probe.results, [0, 0, libc::EACCES, libc::EPERM], "{route}");
        watcher.wait_for_events(probe.pid, 1);
        // Give a wrongly reported extra event the chance to show up.
        thread::sleep(Duration::from_millis(300));
        let events = watcher.events_of(probe.pid);
        let (status, stderr) = watcher.stop();
        assert!(status.success(), "{route}: {stderr:#?}");
        // In the guests both routes are fexit alone, the one whose sightings
        // could be taken by the wrong open: not some other route by chance.
        let fexit_alone = format!("open results traced by fexit {}", program::OPEN_FUNCTION);
        assert!(
            !fexit_expected() || says(&stderr, "gpu-trace: ready:", &fexit_alone),
            "{route}: {stderr:#?}"
        );
        assert_eq!(events.len(), 1, "{route}: only the denial: {events:#?}");
        let event = &events[0];
        assert_eq!(event["major"], incident.uvm_major, "{route}: {event:#}");
        assert_eq!(event["minor"], 0, "{route}: {event:#}");
        assert_eq!(event["verdict"], "denied", "{route}: {event:#}");
        let uvm = incident.nodes.path("nvidia-uvm");
        assert_eq!(event["path"], uvm.to_str().expect("utf-8"), "{route}");
    }
}

/// `watch --format json --fold 0 --opens ROUTE`, watching `majors`.
fn watch_unfolded(route: &str, majors: &[u32]) -> Watcher {
    let majors: Vec<String> = majors.iter().map(u32::to_string).collect();
    let mut args = vec!["--format", "json", "--fold", "0", "--opens", route];
    for major in &majors {
        args.extend(["--major", major.as_str()]);
    }
    Watcher::start(&args)
}

/// `program` (one of tests/kernel/*.c, given the node and then `args`)
/// opens the incident's uvm node from its cgroup, under `watch --opens
/// ROUTE`, and is denied: its pid and the one event watch reports, asserted
/// to be the uvm denial and the only one.
fn the_one_denial_of(
    incident: &Incident,
    route: &str,
    program: &Path,
    args: &[&Path],
) -> (u32, Value) {
    let watcher = watch_unfolded(route, &[incident.uvm_major]);
    let mut command = Command::new(program);
    command.arg(incident.nodes.path("nvidia-uvm")).args(args);
    let _procs = gpu_trace::cgroup::spawn::place_child_in(&mut command, &[incident.cgroup.path()])
        .expect("place the program in the cgroup");
    let mut child = command.spawn().expect("start the program");
    let pid = child.id();
    let status = child.wait().expect("wait for the program");
    assert_eq!(status.code(), Some(libc::EPERM), "the policy denies it");
    let events = watcher.wait_for_events(pid, 1);
    let (status, stderr) = watcher.stop();
    assert!(status.success(), "{route}: {stderr:#?}");
    assert!(
        stderr
            .iter()
            .any(|l| l.contains("events 1, denied 1, lost 0")),
        "{route}: one event, not two: {stderr:#?}"
    );
    assert_eq!(events.len(), 1, "{route}: {events:#?}");
    let event = events.into_iter().next().expect("one event");
    assert_eq!(event["major"], incident.uvm_major, "{route}: {event:#}");
    assert_eq!(event["verdict"], "denied", "{route}: {event:#}");
    (pid, event)
}

#[test]
fn allowed_access_is_reported_only_with_all() {
    let incident = or_skip!(incident_test, "allowed");
    let major = incident.uvm_major.to_string();
    // The denied open comes last: once it is seen, the allowed one (earlier,
    // same thread) would have been seen too.
    let ops = [incident.open_rw("nvidia0"), incident.open_rw("nvidia-uvm")];

    for (args, expect_allowed) in [
        (
            vec!["--format", "json", "--opens", "full", "--major", &major],
            false,
        ),
        (
            vec![
                "--format", "json", "--opens", "full", "--all", "--major", &major,
            ],
            true,
        ),
    ] {
        let watcher = Watcher::start(&args);
        let child =
            run_probe(Path::new(gpu_trace()), &[&incident.cgroup], &ops).expect("run probe");
        assert_eq!(child.results[1], libc::EPERM);
        assert_ne!(
            child.results[0],
            libc::EPERM,
            "195 is allowed by the policy"
        );
        let expected = if expect_allowed { 2 } else { 1 };
        let events = watcher.wait_for_events(child.pid, expected);
        // Give a wrongly reported extra event the chance to show up.
        thread::sleep(Duration::from_millis(300));
        let events = if events.len() == expected {
            watcher.events_of(child.pid)
        } else {
            events
        };
        watcher.stop_cleanly();

        let majors: Vec<&Value> = events.iter().map(|e| &e["major"]).collect();
        if expect_allowed {
            assert_eq!(
                majors,
                [NVIDIA_FRONTEND_MAJOR, incident.uvm_major],
                "{args:?}: {events:#?}"
            );
            assert_eq!(events[0]["verdict"], "allowed");
            assert_eq!(events[0]["device"], "nvidia0");
            let driver_loaded = CharMajors::read()
                .expect("read /proc/devices")
                .is_registered(NVIDIA_FRONTEND_MAJOR);
            if !driver_loaded {
                assert_eq!(
                    events[0]["errno"], "ENXIO",
                    "no driver behind 195: {events:#?}"
                );
            }
        } else {
            assert_eq!(majors, [incident.uvm_major], "{args:?}: {events:#?}");
        }
        assert_eq!(events.last().expect("denied event")["verdict"], "denied");
    }
}

#[test]
fn denial_by_cgroup_v1_devices_list_is_not_blamed_on_bpf() {
    let (major, v1, v2, nodes) = or_skip!(v1_denial, "v1", "v1deny");

    let watcher = full_json_watch_of(major);
    let event = &denied_by_devices_deny(watcher, &nodes, &v2, &v1);
    assert_eq!(event["verdict"], "denied");
    assert_eq!(
        event["verdict_source"], "not-bpf",
        "no BPF policy refused it: {event}"
    );
    assert_eq!(event["bpf_retval"], 0);
    assert_eq!(event["errno"], "EPERM");
    assert_eq!(event["access"], "r");
    assert_eq!(event["cgroup"], v2.relative_path().to_str().expect("utf-8"));
}

/// A process refused by its v1 devices.list that exits at once (the shape
/// of a `docker exec` probe or a crashing launch) keeps its culprit: the
/// kernel records its v1 devices cgroup at the sighting, so attribution
/// does not depend on /proc/PID/cgroup outliving the process. Twenty in a
/// row, every one named with the devices.list that refused it.
#[test]
fn v1_denials_of_processes_that_exit_at_once_keep_their_devices_list() {
    let (major, v1, v2, nodes) = or_skip!(v1_denial, "v1-exits", "v1exits");
    // Unfolded: twenty first sightings, not one and nineteen repeats.
    let watcher = Watcher::start(&[
        "--format",
        "json",
        "--opens",
        "full",
        "--fold",
        "0",
        "--major",
        &major.to_string(),
    ]);
    let probes: Vec<u32> = (0..20)
        .map(|_| {
            let probe = gpu_trace::scenario::run_probe(
                std::path::Path::new(gpu_trace()),
                &[&v2, &v1],
                &[ProbeOp::Open {
                    path: nodes.path("nvidia-uvm"),
                    mode: OpenMode::Read,
                }],
            )
            .expect("probe");
            assert_eq!(probe.results, [libc::EPERM], "the open is refused");
            probe.pid
        })
        .collect();
    let v1_cgroup = v1.relative_path().to_str().expect("utf-8");
    for pid in probes {
        let events = watcher.wait_for_events(pid, 1);
        assert_eq!(events.len(), 1, "pid {pid}: {events:#?}");
        let culprit = &events[0]["denied_by"];
        assert_eq!(culprit["kind"], "devices-list", "pid {pid}: {culprit}");
        assert_eq!(culprit["cgroup"], v1_cgroup, "pid {pid}: {culprit}");
        assert_eq!(culprit["found_by"], "sighting", "pid {pid}: {culprit}");
        // The cgroup allows all but a devices.deny line, which its
        // devices.list does not show.
        assert_eq!(
            culprit["note"], "a devices.deny exception, which devices.list does not show",
            "pid {pid}: {culprit}"
        );
    }
    watcher.stop_cleanly();
}

#[test]
fn auto_attaches_the_open_tracepoints_once_a_cgroup_v1_devices_cgroup_is_made() {
    let host = or_skip!(kernel_test);
    let Some(v1_devices) = v1_devices_mount("auto_attaches_the_open_tracepoints") else {
        return;
    };
    // Properties of the host's layout, not missing kernel features.
    if fexit_opens_load() {
        eprintln!("skipping auto_attaches_the_open_tracepoints: fexit traces every open here");
        return;
    }
    let at_start = V1DeviceLimits::read();
    if at_start.may_deny() {
        eprintln!(
            "skipping auto_attaches_the_open_tracepoints: {} (the tracepoints are there from the start)",
            at_start.describe()
        );
        return;
    }
    let major = uvm_standin();
    let mut watcher = Watcher::start(&["--format", "json", "--major", &major.to_string()]);
    assert!(
        says(
            &watcher.stderr_seen,
            "gpu-trace: ready:",
            "; open results not traced"
        ),
        "{:#?}",
        watcher.stderr_seen
    );
    let v1 = v1_devices_cgroup(&v1_devices, "v1-made");
    watcher.wait_for_stderr(
        "gpu-trace: open results traced by the syscall tracepoints, needed because a cgroup in the cgroup v1 devices hierarchy was made or joined",
    );
    v1_deny_major(&v1, major);
    let v2 = scratch_cgroup(&host, "v1made");
    let nodes = DeviceNodes::create(&[("nvidia-uvm", major, 0)]).expect("mknod");
    let event = denied_by_devices_deny(watcher, &nodes, &v2, &v1);
    assert_eq!(event["verdict"], "denied");
    assert_eq!(event["verdict_source"], "not-bpf", "{event}");
    assert_eq!(event["errno"], "EPERM");
}

/// Opens the node from a process in `v2` and the v1 cgroup `v1`, whose
/// devices.deny refuses it; the one event `watcher` reports.
fn denied_by_devices_deny(
    watcher: Watcher,
    nodes: &DeviceNodes,
    v2: &ScratchCgroup,
    v1: &ScratchCgroup,
) -> Value {
    let (_, event) = denied_open(
        &watcher,
        &[v2, v1],
        nodes.path("nvidia-uvm"),
        OpenMode::Read,
    );
    watcher.stop_cleanly();
    event
}

#[test]
fn observer_never_changes_a_verdict() {
    let host = or_skip!(kernel_test);
    let denied_major = uvm_standin();
    let write_denied_major = denied_major - 1;
    let cgroup = scratch_cgroup(&host, "verdicts");
    let _policy = ScratchPolicy::attach(
        &cgroup,
        &[
            (denied_major, ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD),
            (write_denied_major, ACCESS_WRITE),
        ],
    )
    .expect("attach policy");
    let majors = [NVIDIA_FRONTEND_MAJOR, denied_major, write_denied_major];
    let minors = [0, 1, 255];
    let mut node_specs = Vec::new();
    for major in majors {
        for minor in minors {
            node_specs.push((format!("n-{major}-{minor}"), major, minor));
        }
    }
    let specs: Vec<(&str, u32, u32)> = node_specs
        .iter()
        .map(|(n, ma, mi)| (n.as_str(), *ma, *mi))
        .collect();
    let nodes = DeviceNodes::create(&specs).expect("mknod grid");
    let mut ops = Vec::new();
    for (name, major, minor) in &node_specs {
        for mode in [OpenMode::Read, OpenMode::Write, OpenMode::ReadWrite] {
            ops.push(ProbeOp::Open {
                path: nodes.path(name),
                mode,
            });
        }
        ops.push(ProbeOp::Mknod {
            path: nodes.path(&format!("made-{name}")),
            major: *major,
            minor: *minor,
        });
    }

    let without =
        run_probe(Path::new(gpu_trace()), &[&cgroup], &ops).expect("probe without gpu-trace");
    let watcher = Watcher::start(&["--format", "json", "--all", "--all-devices"]);
    let with = run_probe(Path::new(gpu_trace()), &[&cgroup], &ops).expect("probe with gpu-trace");
    let seen = watcher.wait_for_events(with.pid, ops.len());
    watcher.stop_cleanly();

    for ((op, before), after) in ops.iter().zip(&without.results).zip(&with.results) {
        assert_eq!(
            before, after,
            "{op:?}: errno {before} without gpu-trace, {after} with it"
        );
    }
    let outcomes: HashSet<i32> = without.results.iter().copied().collect();
    assert!(
        outcomes.contains(&libc::EPERM),
        "the grid includes denials: {outcomes:?}"
    );
    assert!(
        outcomes.contains(&libc::ENXIO) || outcomes.contains(&0),
        "and allowed accesses: {outcomes:?}"
    );
    // The observer really ran for every access (it did not silently stay detached).
    assert_eq!(seen.len(), ops.len(), "one event per access: {seen:#?}");
    let denied = seen.iter().filter(|e| e["verdict"] == "denied").count();
    let eperm = with.results.iter().filter(|&&r| r == libc::EPERM).count();
    assert_eq!(
        denied, eperm,
        "reported denials match the EPERMs the child got"
    );
}

/// watch in JSON, with every open call (`--opens full`), of char major
/// `major` alone: what the v1 and stale-node tests read their one event from.
fn full_json_watch_of(major: u32) -> Watcher {
    Watcher::start(&[
        "--format",
        "json",
        "--opens",
        "full",
        "--major",
        &major.to_string(),
    ])
}

/// Asserts that none of `ours` is still loaded once the kernel had time to
/// free them (links die with the process's fds, the programs shortly
/// after); `failure` says what the ones left mean.
pub fn assert_unloaded_after_a_while(ours: &HashSet<u32>, failure: &str) {
    let deadline = Instant::now() + WAIT;
    let mut left = ours.clone();
    while !left.is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
        left = gpu_trace_program_ids()
            .intersection(ours)
            .copied()
            .collect();
    }
    assert!(left.is_empty(), "{failure}: {left:?}");
}

#[test]
fn nothing_stays_attached_after_kill_9() {
    let _host = or_skip!(kernel_test);
    // The device hook with both halves of openat, openat2 and open; and,
    // where the kernel has trampolines, with fexit on the open function.
    let mut routes = vec![("tracepoints", 7)];
    if fexit_opens_load() {
        routes.push(("fexit", 3));
    }
    for (route, programs) in routes {
        let before = gpu_trace_program_ids();
        let watcher = Watcher::start(&["--opens", route]);
        let ours: HashSet<u32> = gpu_trace_program_ids()
            .difference(&before)
            .copied()
            .collect();
        assert!(
            ours.len() >= programs,
            "--opens {route}: the watcher's programs are loaded: {ours:?}"
        );

        kill(Pid::from_raw(watcher.child.id() as i32), Signal::SIGKILL).expect("SIGKILL watcher");
        drop(watcher); // reaps it

        assert_unloaded_after_a_while(
            &ours,
            &format!("--opens {route}: programs still loaded (so possibly attached) after SIGKILL"),
        );
    }
}

/// The default watch's tracepoints read no syscall's record: they are raw
/// tracepoints, whose detach waits out no grace periods. A trace event standing in
/// (the BTF offsets not found, the raw attach refused) fails nothing else,
/// yet costs every stop about 75 ms, several times that under emulation.
#[test]
fn the_default_watchs_tracepoints_are_raw_so_that_it_stops_at_once() {
    let _host = or_skip!(kernel_test);
    let watcher = Watcher::start(&[]);
    let pid = watcher.child.id();
    let mut raw: Vec<String> = fs::read_dir(format!("/proc/{pid}/fdinfo"))
        .expect("watch's descriptors")
        .filter_map(|fd| fs::read_to_string(fd.ok()?.path()).ok())
        .filter(|info| info.lines().any(|l| l == "link_type:\traw_tracepoint"))
        .filter_map(|info| {
            info.lines()
                .find_map(|l| l.strip_prefix("tp_name:\t").map(str::to_owned))
        })
        .collect();
    raw.sort();
    let stderr = watcher.stop_cleanly();
    assert_eq!(
        raw,
        [
            "cgroup_attach_task",
            "cgroup_mkdir",
            "sched_process_exit",
            "task_rename"
        ],
        "{stderr:#?}"
    );
}

#[test]
fn watch_whose_reader_goes_away_ends_with_status_0_and_detaches() {
    let incident = or_skip!(incident_test, "reader-gone");
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let before = gpu_trace_program_ids();
    // `gpu-trace watch | head -n 1`, with the test as head.
    let mut child = Command::new(gpu_trace())
        .args(["watch", "--format", "json", "--fold", "0", "--major"])
        .arg(incident.uvm_major.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start gpu-trace watch");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr piped")).lines();
    let ready = stderr
        .by_ref()
        .map_while(Result::ok)
        .find(|line| line.starts_with("gpu-trace: ready"));
    assert!(ready.is_some(), "watch never became ready");
    let later_stderr = thread::spawn(move || stderr.map_while(Result::ok).collect::<Vec<_>>());
    let ours: HashSet<u32> = gpu_trace_program_ids()
        .difference(&before)
        .copied()
        .collect();
    assert!(!ours.is_empty(), "the watcher's programs are loaded");

    let pid = incident.deny_once();
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout piped"));
    let mut first = String::new();
    stdout.read_line(&mut first).expect("read the first line");
    let event: Value = serde_json::from_str(&first).expect("a JSON line");
    assert_eq!(event["pid"], pid, "{event:#}");
    drop(stdout); // head has what it wanted

    // Denials keep coming; writing them finds the pipe closed.
    let deadline = Instant::now() + WAIT;
    let status = loop {
        incident.deny_once();
        if let Some(status) = child.try_wait().expect("wait for watch") {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill(); // leave no watcher behind a failed test
            let _ = child.wait();
            panic!("watch kept running with no reader");
        }
        thread::sleep(Duration::from_millis(100));
    };
    let stderr = later_stderr.join().expect("stderr reader");
    assert_eq!(
        status.code(),
        Some(0),
        "a reader going away is no error: {stderr:#?}"
    );
    assert_unloaded_after_a_while(&ours, "programs still loaded after watch ended");
}

#[test]
fn non_root_gets_exit_status_3_and_one_line() {
    let _host = or_skip!(kernel_test);
    const NOBODY: u32 = 65534;
    let output = Command::new(gpu_trace())
        .arg("watch")
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .expect("run gpu-trace as nobody");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    assert!(
        stderr.starts_with("gpu-trace: error: gpu-trace must run as root"),
        "{stderr}"
    );
}

#[test]
fn selftest_passes() {
    let _host = or_skip!(kernel_test);
    let output = Command::new(gpu_trace())
        .arg("selftest")
        .output()
        .expect("run selftest");
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    assert!(
        output.status.success(),
        "selftest failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.lines().any(|l| l.starts_with("PASS:")), "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
}

#[test]
fn a_cgroup_removed_before_its_denial_is_read_is_still_named() {
    let host = or_skip!(kernel_test);
    let watcher = Watcher::start(&["--format", "json", "--major", &uvm_standin().to_string()]);
    // Frozen, the watcher reads nothing until the cgroup is gone: the way a
    // failed launch's container vanishes before a busy watcher gets to it.
    let watcher_pid = Pid::from_raw(watcher.child.id() as i32);
    kill(watcher_pid, Signal::SIGSTOP).expect("stop the watcher");
    let incident = Incident::new(&host, "short-lived");
    let relative = incident.cgroup.relative_path().to_owned();
    let absolute = host
        .cgroup2_mount
        .join(relative.strip_prefix("/").expect("absolute"));
    let child = run_probe(
        Path::new(gpu_trace()),
        &[&incident.cgroup],
        &[incident.open_rw("nvidia-uvm")],
    )
    .expect("run probe in scratch cgroup");
    assert_eq!(child.results, [libc::EPERM]);
    drop(incident);
    assert!(!absolute.exists(), "{} removed", absolute.display());
    kill(watcher_pid, Signal::SIGCONT).expect("resume the watcher");

    let events = watcher.wait_for_events(child.pid, 1);
    watcher.stop_cleanly();
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(
        events[0]["cgroup"],
        relative.to_str().expect("utf-8"),
        "{:#}",
        events[0]
    );
}

#[test]
fn a_denied_kfd_open_is_amds_with_its_dynamic_major_and_fix() {
    let host = or_skip!(kernel_test);
    // /proc/devices as on a ROCm host: kfd on a dynamic major. Watched by
    // default, with no --major.
    let kfd = uvm_standin();
    let proc_devices = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(
        proc_devices.path(),
        format!("Character devices:\n  1 mem\n195 nvidia\n226 drm\n{kfd} kfd\n\nBlock devices:\n  8 sd\n"),
    )
    .expect("write /proc/devices copy");
    // And an NVIDIA node, for the --vendor nvidia watcher to show it is live.
    let nodes = DeviceNodes::create(&[("kfd", kfd, 0), ("nvidia0", 195, 0)]).expect("mknod");
    let cgroup = scratch_cgroup(&host, "kfd");
    let every_access = ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD;
    let _policy = ScratchPolicy::attach(&cgroup, &[(kfd, every_access), (195, every_access)])
        .expect("attach");
    let watcher = Watcher::with_proc_devices(&[], proc_devices.path());
    let nvidia_only = Watcher::with_proc_devices(&["--vendor", "nvidia"], proc_devices.path());
    let (probe_pid, event) =
        denied_open(&watcher, &[&cgroup], nodes.path("kfd"), OpenMode::ReadWrite);
    let event = &event;
    assert_eq!(event["driver"], "kfd", "{event:#}");
    assert_eq!(event["vendor"], "amd", "{event:#}");
    assert_eq!(event["role"], "compute", "{event:#}");
    assert_eq!(event["major"], kfd, "{event:#}");
    assert_eq!(event["cause"], "dynamic-major-not-allowed", "{event:#}");
    assert_event_says(
        event,
        "explanation",
        &format!("kfd's major {kfd} (AMD's ROCm compute node)"),
    );
    watcher.stop_cleanly();
    // --vendor nvidia reports an NVIDIA denial made after the kfd one...
    let (_, nvidia) = denied_open(
        &nvidia_only,
        &[&cgroup],
        nodes.path("nvidia0"),
        OpenMode::ReadWrite,
    );
    assert_eq!(nvidia["vendor"], "nvidia", "{nvidia:#}");
    assert_eq!(nvidia["major"], 195, "{nvidia:#}");
    // ...and left AMD's out.
    let (status, _, shown) = nvidia_only.stop_with_events(probe_pid);
    assert!(status.success());
    assert_eq!(shown, Vec::<serde_json::Value>::new());
}

#[test]
fn a_watched_major_whose_driver_is_gone_is_reported_when_its_open_fails_enxio() {
    let host = or_skip!(kernel_test);
    // A GPU node of a major watched since before its driver went away (a
    // reload onto another major): no policy refuses it, no driver answers.
    // Its cause, from the node's name, is the lab's reload test's to check.
    let major = uvm_standin();
    let node = DevNode::create(major, 0, 0o666);
    let cgroup = scratch_cgroup(&host, "stale-watched");
    let watcher = full_json_watch_of(major);
    let probe = run_probe(
        Path::new(gpu_trace()),
        &[&cgroup],
        &[ProbeOp::Open {
            path: node.0.clone(),
            mode: OpenMode::ReadWrite,
        }],
    )
    .expect("probe");
    assert_eq!(probe.results, [libc::ENXIO], "no driver behind the major");
    let events = watcher.wait_for_events(probe.pid, 1);
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = &events[0];
    assert_eq!(event["major"], major, "{event:#}");
    assert_eq!(event["errno"], "ENXIO", "{event:#}");
    assert_eq!(event["verdict"], "allowed", "{event:#}");
    assert_eq!(event["path"], node.0.to_str().expect("utf-8"), "{event:#}");
    // No driver has the major at all (a reload onto another is the lab's
    // stale-major): the module is not loaded.
    assert_eq!(event["cause"], "driver-not-loaded", "{event:#}");
    assert_event_says(
        event,
        "explanation",
        &format!("but no driver has major {major} in /proc/devices"),
    );
    watcher.stop_cleanly();
}

/// The char majors the ready line says are watched.
fn watched_at_ready(stderr: &[String]) -> Vec<u32> {
    let ready = stderr
        .iter()
        .find_map(|l| l.strip_prefix("gpu-trace: ready: watching denied accesses to char majors "))
        .unwrap_or_else(|| panic!("no ready line with majors: {stderr:#?}"));
    ready
        .split(';')
        .next()
        .into_iter()
        .flat_map(|list| list.split(", "))
        .map(|m| {
            m.trim()
                .parse()
                .unwrap_or_else(|_| panic!("a major: {m:?} in {ready}"))
        })
        .collect()
}

#[test]
fn watch_watches_a_driver_major_registered_after_start() {
    let incident = or_skip!(incident_test, "late-driver");
    // nvidia-uvm is not loaded when watch starts (nvidia-modprobe loads it
    // at the first CUDA call): its major is in no list, and not watched.
    let proc_devices = tempfile::NamedTempFile::new().expect("temp file");
    write_proc_devices(proc_devices.path(), None);
    let mut watcher = Watcher::with_proc_devices(&[], proc_devices.path());
    let stderr = watcher.stderr_now();
    let at_start = watched_at_ready(&stderr);
    assert!(at_start.contains(&NVIDIA_FRONTEND_MAJOR), "{stderr:#?}");
    assert!(!at_start.contains(&incident.uvm_major), "{stderr:#?}");
    // The driver loads.
    write_proc_devices(proc_devices.path(), Some(incident.uvm_major));
    watcher.wait_for_stderr(&format!(
        "gpu-trace: now also watching char major {} (nvidia-uvm), registered after start",
        incident.uvm_major
    ));
    let pid = incident.deny_once();
    let events = watcher.wait_for_events(pid, 1);
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = &events[0];
    assert_eq!(event["major"], incident.uvm_major, "{event:#}");
    assert_eq!(event["driver"], "nvidia-uvm", "{event:#}");
    assert_eq!(event["device"], "nvidia-uvm", "{event:#}");
    assert_eq!(event["cause"], "dynamic-major-not-allowed", "{event:#}");
    watcher.stop_cleanly();
}

#[test]
fn watch_keeps_reporting_while_proc_devices_cannot_be_read() {
    let host = or_skip!(kernel_test);
    // Bound over /proc/devices: text that is not the kernel's list.
    let not_the_kernels = tempfile::NamedTempFile::new().expect("temp file");
    std::fs::write(not_the_kernels.path(), "not the kernel's list\n").expect("write");
    let incident = Incident::new(&host, "unreadable-devices");
    let mut command = Command::new(gpu_trace());
    command.args([
        "watch",
        "--format",
        "json",
        "--major",
        &incident.uvm_major.to_string(),
    ]);
    // A mount namespace of the watcher's own, private, so that what is
    // bound there never reaches the host's /proc.
    // SAFETY: only syscalls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let root = c"/";
            if libc::unshare(libc::CLONE_NEWNS) != 0
                || libc::mount(
                    std::ptr::null(),
                    root.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut watcher = Watcher::spawn(command);
    let watcher_pid = watcher.child.id();

    bind_in_mount_namespace_of(
        watcher_pid,
        Some(not_the_kernels.path()),
        Path::new("/proc/devices"),
    );
    assert!(
        CharMajors::read_kernel().is_ok(),
        "the host's /proc/devices is untouched"
    );
    watcher.wait_for_stderr("gpu-trace: cannot read /proc/devices");
    let pid = incident.deny_once();
    let events = watcher.wait_for_events(pid, 1);
    assert_eq!(events[0]["verdict"], "denied", "{:#}", events[0]);
    assert_eq!(events[0]["major"], incident.uvm_major);
    // A few more ticks whose reads fail: still said only once.
    thread::sleep(Duration::from_millis(2500));

    bind_in_mount_namespace_of(watcher_pid, None, Path::new("/proc/devices"));
    watcher.wait_for_stderr("gpu-trace: /proc/devices is readable again");
    let stderr = watcher.stop_cleanly();
    assert!(
        stderr
            .iter()
            .any(|l| l.contains("detached; events 1, denied 1, lost 0")),
        "{stderr:#?}"
    );
    let said = |prefix: &str| stderr.iter().filter(|l| l.starts_with(prefix)).count();
    assert_eq!(
        said("gpu-trace: cannot read /proc/devices"),
        1,
        "said once: {stderr:#?}"
    );
}

/// Binds `source` over `target` (or, with no source, unmounts `target`) in
/// the mount namespace of `pid`, from a forked child: a process with
/// threads cannot enter another mount namespace.
fn bind_in_mount_namespace_of(pid: u32, source: Option<&Path>, target: &Path) {
    use std::{
        ffi::CString,
        os::{fd::AsRawFd, unix::ffi::OsStrExt, unix::fs::MetadataExt},
    };
    let namespace = std::fs::File::open(format!("/proc/{pid}/ns/mnt")).expect("mount namespace");
    let ours = std::fs::metadata("/proc/self/ns/mnt").expect("our mount namespace");
    assert_ne!(
        namespace.metadata().expect("its mount namespace").ino(),
        ours.ino(),
        "pid {pid} must have a mount namespace of its own"
    );
    let c_path = |p: &Path| CString::new(p.as_os_str().as_bytes()).expect("no NUL");
    let source = source.map(c_path);
    let target = c_path(target);
    // SAFETY: the child makes raw syscalls only, then _exit.
    let child = unsafe { libc::fork() };
    assert!(child >= 0, "fork: {}", std::io::Error::last_os_error());
    if child == 0 {
        // SAFETY: as above; every pointer is a CString made before the fork.
        unsafe {
            let entered = libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNS) == 0;
            let done = entered
                && match &source {
                    Some(source) => {
                        libc::mount(
                            source.as_ptr(),
                            target.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND,
                            std::ptr::null(),
                        ) == 0
                    }
                    None => libc::umount2(target.as_ptr(), libc::MNT_DETACH) == 0,
                };
            libc::_exit(if done { 0 } else { 1 });
        }
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    let waited = unsafe { libc::waitpid(child, &mut status, 0) };
    assert!(
        waited == child && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "binding {source:?} over {target:?} in pid {pid}'s mount namespace failed"
    );
}

/// The benchmark's breakdown cuts the device hook short by name
/// (GPU_TRACE_BENCH_CUT): a cut it does not know, or one with an open route
/// beside the hook, is refused before anything is loaded; a known one is
/// said in the notes, the verdict stands,
/// and what the hook sees past the cut is not reported.
#[test]
fn a_bench_cut_is_said_and_an_unknown_one_is_refused_before_loading() {
    let incident = or_skip!(incident_test, "bench-cut");
    let major = incident.uvm_major.to_string();
    let loaded_before = gpu_trace_program_ids();
    let refused = Command::new(gpu_trace())
        .args(["watch", "--major", &major])
        .env("GPU_TRACE_BENCH_CUT", "lookup")
        .output()
        .expect("run gpu-trace watch");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "GPU_TRACE_BENCH_CUT=\"lookup\": no such step (one of entry, verdict, identity, short-way,"
        ),
        "{stderr}"
    );
    assert!(
        gpu_trace_program_ids().is_subset(&loaded_before),
        "a refused cut left programs loaded"
    );
    // The open route's exits report on their own: a cut needs the hook alone.
    let with_opens = Command::new(gpu_trace())
        .args(["watch", "--major", &major])
        .env("GPU_TRACE_BENCH_CUT", "verdict")
        .output()
        .expect("run gpu-trace watch");
    let stderr = String::from_utf8_lossy(&with_opens.stderr);
    assert_eq!(with_opens.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("GPU_TRACE_BENCH_CUT cuts the device hook's own report: it needs the device hook alone (--device-hook-only)"),
        "{stderr}"
    );
    assert!(
        gpu_trace_program_ids().is_subset(&loaded_before),
        "a refused cut left programs loaded"
    );

    let mut command = Command::new(gpu_trace());
    command
        .args([
            "watch",
            "--format",
            "json",
            "--device-hook-only",
            "--major",
            &major,
        ])
        .env("GPU_TRACE_BENCH_CUT", "verdict");
    let watcher = Watcher::spawn(command);
    assert!(
        watcher.stderr_seen.iter().any(|l| l
            == "gpu-trace: GPU_TRACE_BENCH_CUT=verdict: the device hook stops after its verdict step \
                (a benchmark's breakdown); what it sees is not reported"),
        "{:#?}",
        watcher.stderr_seen
    );
    let child = run_probe(
        Path::new(gpu_trace()),
        &[&incident.cgroup],
        &[incident.open_rw("nvidia-uvm")],
    )
    .expect("run probe in scratch cgroup");
    assert_eq!(child.results, [libc::EPERM], "the policy's verdict stands");
    let (status, stderr, lines) = watcher.stop_with_lines();
    assert!(status.success(), "{stderr:#?}");
    assert_eq!(
        lines,
        Vec::<String>::new(),
        "nothing past the cut is reported"
    );
    assert!(
        stderr
            .iter()
            .any(|l| l.contains("detached; events 0, denied 0, lost 0")),
        "{stderr:#?}"
    );
}
