//! Kernel tests: the real gpu-trace binary against this machine's kernel,
//! with scratch cgroups, real device policies and nodes made with mknod.
//!
//! They need root. Run them one at a time (`--test-threads=1`): they attach
//! to the cgroup2 root and count events host-wide. A test that cannot run
//! says why on stderr; with GPU_TRACE_REQUIRE_KERNEL_TESTS=1 (set by
//! `cargo xtask test` in CI) it fails instead.

use std::{
    collections::HashSet,
    io::{BufRead, BufReader},
    os::unix::process::CommandExt,
    path::Path,
    process::{Child, Command, ExitStatus, Stdio},
    sync::{mpsc, Arc, Mutex},
    thread,
    time::{Duration, Instant},
};

use gpu_trace::{
    cgroup::v1_controller_mount_in,
    devices::{CharMajors, NVIDIA_FRONTEND_MAJOR},
    preflight::{check_host, Host},
    scenario::{
        run_probe, DeviceNodes, OpenMode, ProbeOp, ScratchCgroup, ScratchPolicy, PROBE_COMM,
    },
};
use gpu_trace_common::{program, ACCESS_MKNOD, ACCESS_READ, ACCESS_WRITE};
use nix::{
    sys::signal::{kill, Signal},
    unistd::Pid,
};
use serde_json::Value;

const GPU_TRACE: &str = env!("CARGO_BIN_EXE_gpu-trace");
/// Generous: these machines are noisy. Only bounds a wait, never asserted as speed.
const WAIT: Duration = Duration::from_secs(20);

/// The host, or None (with the reason printed) when this test cannot run.
fn kernel_test(name: &str) -> Option<Host> {
    let skip = |why: String| {
        if std::env::var("GPU_TRACE_REQUIRE_KERNEL_TESTS").is_ok_and(|v| v == "1") {
            panic!("{name} cannot run but is required here: {why}");
        }
        eprintln!("skipping {name}: {why}");
        None
    };
    match check_host() {
        Ok(host) => Some(host),
        Err(e) => skip(format!("{e:#}")),
    }
}

/// A major no driver owns, standing in for the dynamic nvidia-uvm major.
fn uvm_standin() -> u32 {
    CharMajors::read()
        .expect("read /proc/devices")
        .unused_dynamic_major()
        .expect("a free dynamic major")
}

fn scratch_cgroup(host: &Host, test: &str) -> ScratchCgroup {
    ScratchCgroup::create(
        &host.cgroup2_mount,
        &format!("gpu-trace-test-{test}-{}", std::process::id()),
    )
    .expect("create scratch cgroup")
}

/// `gpu-trace watch ...` running in the background, its stdout collected
/// line by line as it comes.
struct Watcher {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    stderr: mpsc::Receiver<String>,
    stderr_seen: Vec<String>,
}

impl Watcher {
    /// Starts the watcher and waits for its "ready" line on stderr.
    fn start(args: &[&str]) -> Self {
        let mut child = Command::new(GPU_TRACE)
            .arg("watch")
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start gpu-trace watch");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("stdout piped");
        let sink = Arc::clone(&lines);
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().expect("lines lock").push(line);
            }
        });
        let (send, stderr) = mpsc::channel();
        let err = child.stderr.take().expect("stderr piped");
        thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = send.send(line);
            }
        });
        let mut watcher = Self {
            child,
            lines,
            stderr,
            stderr_seen: Vec::new(),
        };
        watcher.wait_for_stderr("gpu-trace: ready");
        watcher
    }

    fn wait_for_stderr(&mut self, prefix: &str) {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            match self.stderr.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    let found = line.starts_with(prefix);
                    self.stderr_seen.push(line);
                    if found {
                        return;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        }
        panic!(
            "gpu-trace never printed {prefix:?}; stderr so far: {:#?}",
            self.stderr_seen
        );
    }

    /// JSON events on stdout so far whose pid is `pid`.
    fn events_of(&self, pid: u32) -> Vec<Value> {
        self.lines
            .lock()
            .expect("lines lock")
            .iter()
            .map(|line| {
                serde_json::from_str::<Value>(line)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
            })
            .filter(|event| event["pid"] == pid)
            .collect()
    }

    /// Waits until `count` events of `pid` have been streamed, while the
    /// watcher still runs: proves the output is live, not written at exit.
    fn wait_for_events(&self, pid: u32, count: usize) -> Vec<Value> {
        let deadline = Instant::now() + WAIT;
        loop {
            let events = self.events_of(pid);
            if events.len() >= count || Instant::now() > deadline {
                return events;
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGINT, then wait: returns the exit status and the remaining stderr.
    fn stop(mut self) -> (ExitStatus, Vec<String>) {
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGINT).expect("signal watcher");
        let status = self.child.wait().expect("wait for watcher");
        // The stderr thread ends at EOF; collect what it read.
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_secs(2)) {
            self.stderr_seen.push(line);
        }
        (status, std::mem::take(&mut self.stderr_seen))
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The incident's pieces: a cgroup whose policy denies the uvm stand-in
/// (rwm) and allows everything else, and one node of each kind.
struct Incident {
    nodes: DeviceNodes,
    _policy: ScratchPolicy,
    cgroup: ScratchCgroup,
    uvm_major: u32,
}

impl Incident {
    fn new(host: &Host, test: &str) -> Self {
        let uvm_major = uvm_standin();
        let cgroup = scratch_cgroup(host, test);
        let policy = ScratchPolicy::attach(
            &cgroup,
            &[(uvm_major, ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD)],
        )
        .expect("attach deny policy to scratch cgroup");
        let nodes = DeviceNodes::create(&[
            ("nvidia-uvm", uvm_major, 0),
            ("nvidia0", NVIDIA_FRONTEND_MAJOR, 0),
        ])
        .expect("mknod device nodes");
        Self {
            nodes,
            _policy: policy,
            cgroup,
            uvm_major,
        }
    }

    fn open_rw(&self, node: &str) -> ProbeOp {
        ProbeOp::Open {
            path: self.nodes.path(node),
            mode: OpenMode::ReadWrite,
        }
    }
}

#[test]
fn denied_open_is_reported_once_with_its_cgroup_process_device_and_errno() {
    let Some(host) = kernel_test("denied_open_is_reported_once") else {
        return;
    };
    let incident = Incident::new(&host, "denied");
    let watcher = Watcher::start(&[
        "--format",
        "json",
        "--major",
        &incident.uvm_major.to_string(),
    ]);

    let child = run_probe(
        Path::new(GPU_TRACE),
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
    for hook in ["observer", "_openat", "_openat2", "_open"] {
        assert!(
            watcher
                .stderr_seen
                .iter()
                .any(|l| l.starts_with("gpu-trace: hook active:") && l.contains(hook)),
            "hook {hook} not active: {:#?}",
            watcher.stderr_seen
        );
    }
    assert!(
        !watcher
            .stderr_seen
            .iter()
            .any(|l| l.contains("hook refused")),
        "{:#?}",
        watcher.stderr_seen
    );
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
}

#[test]
fn allowed_access_is_reported_only_with_all() {
    let Some(host) = kernel_test("allowed_access_is_reported_only_with_all") else {
        return;
    };
    let incident = Incident::new(&host, "allowed");
    let major = incident.uvm_major.to_string();
    // The denied open comes last: once it is seen, the allowed one (earlier,
    // same thread) would have been seen too.
    let ops = [incident.open_rw("nvidia0"), incident.open_rw("nvidia-uvm")];

    for (args, expect_allowed) in [
        (vec!["--format", "json", "--major", &major], false),
        (vec!["--format", "json", "--all", "--major", &major], true),
    ] {
        let watcher = Watcher::start(&args);
        let child = run_probe(Path::new(GPU_TRACE), &[&incident.cgroup], &ops).expect("run probe");
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
        let (status, _) = watcher.stop();
        assert!(status.success());

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
    let Some(host) = kernel_test("denial_by_cgroup_v1_devices_list_is_not_blamed_on_bpf") else {
        return;
    };
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("read mountinfo");
    let Some(v1_devices) = v1_controller_mount_in(&mountinfo, "devices") else {
        // A property of the host's layout, not a missing kernel feature: pure
        // cgroup2 hosts have no devices.list at all.
        eprintln!(
            "skipping denial_by_cgroup_v1_devices_list: no cgroup v1 devices controller mounted"
        );
        return;
    };
    let major = uvm_standin();
    let v1 = ScratchCgroup::create(
        &v1_devices,
        &format!("gpu-trace-test-v1-{}", std::process::id()),
    )
    .expect("create v1 devices cgroup");
    std::fs::write(v1.path().join("devices.deny"), format!("c {major}:* rwm"))
        .expect("write devices.deny");
    let v2 = scratch_cgroup(&host, "v1deny");
    let nodes = DeviceNodes::create(&[("nvidia-uvm", major, 0)]).expect("mknod");

    let watcher = Watcher::start(&["--format", "json", "--major", &major.to_string()]);
    let op = ProbeOp::Open {
        path: nodes.path("nvidia-uvm"),
        mode: OpenMode::Read,
    };
    let child = run_probe(Path::new(GPU_TRACE), &[&v2, &v1], &[op]).expect("run probe");
    assert_eq!(
        child.results,
        [libc::EPERM],
        "devices.deny refuses the node"
    );
    let events = watcher.wait_for_events(child.pid, 1);
    let (status, _) = watcher.stop();
    assert!(status.success());
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = &events[0];
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

#[test]
fn observer_never_changes_a_verdict() {
    let Some(host) = kernel_test("observer_never_changes_a_verdict") else {
        return;
    };
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
        run_probe(Path::new(GPU_TRACE), &[&cgroup], &ops).expect("probe without gpu-trace");
    let watcher = Watcher::start(&["--format", "json", "--all", "--all-devices"]);
    let with = run_probe(Path::new(GPU_TRACE), &[&cgroup], &ops).expect("probe with gpu-trace");
    let seen = watcher.wait_for_events(with.pid, ops.len());
    let (status, _) = watcher.stop();
    assert!(status.success());

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

/// Ids of loaded programs that carry gpu-trace's program names.
fn gpu_trace_program_ids() -> HashSet<u32> {
    let names = [
        program::OBSERVER,
        program::ENTER_OPENAT,
        program::EXIT_OPENAT,
        program::ENTER_OPEN,
        program::EXIT_OPEN,
    ];
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|info| info.name_as_str().is_some_and(|n| names.contains(&n)))
        .map(|info| info.id())
        .collect()
}

#[test]
fn nothing_stays_attached_after_kill_9() {
    let Some(_host) = kernel_test("nothing_stays_attached_after_kill_9") else {
        return;
    };
    let before = gpu_trace_program_ids();
    let watcher = Watcher::start(&[]);
    let ours: HashSet<u32> = gpu_trace_program_ids()
        .difference(&before)
        .copied()
        .collect();
    assert!(
        ours.len() >= 5,
        "the watcher's programs are loaded: {ours:?}"
    );

    kill(Pid::from_raw(watcher.child.id() as i32), Signal::SIGKILL).expect("SIGKILL watcher");
    drop(watcher); // reaps it

    // Links die with the process's fds; the kernel frees the programs shortly after.
    let deadline = Instant::now() + WAIT;
    let mut left: HashSet<u32> = ours.clone();
    while !left.is_empty() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(50));
        left = gpu_trace_program_ids()
            .intersection(&ours)
            .copied()
            .collect();
    }
    assert!(
        left.is_empty(),
        "programs still loaded (so possibly attached) after SIGKILL: {left:?}"
    );
}

#[test]
fn non_root_gets_exit_status_3_and_one_line() {
    let Some(_host) = kernel_test("non_root_gets_exit_status_3_and_one_line") else {
        return;
    };
    const NOBODY: u32 = 65534;
    let output = Command::new(GPU_TRACE)
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
    let Some(_host) = kernel_test("selftest_passes") else {
        return;
    };
    let output = Command::new(GPU_TRACE)
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
