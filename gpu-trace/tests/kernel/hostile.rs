//! A tenant attacking the host through gpu-trace: each attack runs as an
//! unprivileged user (uid 65534), in a cgroup it was handed the way
//! systemd delegates (the directory and its cgroup.procs chowned to it),
//! or in a cgroup root gave a name the tenant chose (a privileged LXC
//! container's). Asserts on what gpu-trace writes.

use std::os::unix::fs::{chown, PermissionsExt};

use gpu_trace::{
    kernel::bpf_sys::{attach_device_program, load_device_program},
    scenario::{
        denylist_program,
        pasted::{assert_paste_safe, MARKER},
        run_probe_in,
    },
    text::terminal::needs_escape,
};

use crate::common::*;

/// The tenant: nobody.
const TENANT: u32 = 65534;
/// A Docker id a tenant would like to be taken for.
const VICTIM_ID: &str = "5ac1e7d2b3a4f5061728394a5b6c7d8e9f0a1b2c3d4e5f60718293a4b5c6d7e8";

/// A cgroup below a scratch cgroup, removed (after its processes) on drop.
struct ChildCgroup(PathBuf);

impl ChildCgroup {
    fn create(parent: &ScratchCgroup, name: &str) -> Self {
        let path = parent.path().join(name);
        fs::create_dir(&path).expect("make child cgroup");
        Self(path)
    }

    /// Hands the cgroup to `uid` as systemd does with Delegate=yes.
    fn delegate_to(&self, uid: u32) {
        for file in [
            "",
            "cgroup.procs",
            "cgroup.threads",
            "cgroup.subtree_control",
        ] {
            chown(self.0.join(file), Some(uid), Some(uid)).expect("chown for delegation");
        }
    }
}

impl ChildCgroup {
    /// The incident's deny rules at this cgroup itself, where LXC attaches
    /// a container's program (one only at the parent would be an
    /// ancestor's). Detached when the returned link closes.
    fn own_policy(&self, major: u32) -> std::os::fd::OwnedFd {
        let program = load_device_program(
            "gt_scratch_dev",
            &denylist_program(&[(major, ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD)]),
        )
        .expect("load the container's policy");
        let dir = fs::File::open(&self.0).expect("open the child cgroup");
        attach_device_program(&program, &dir).expect("attach the container's policy")
    }
}

impl Drop for ChildCgroup {
    fn drop(&mut self) {
        // Children the tenant made first, deepest first.
        let mut dirs = vec![self.0.clone()];
        let mut i = 0;
        while i < dirs.len() {
            if let Ok(entries) = fs::read_dir(&dirs[i]) {
                dirs.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
            }
            i += 1;
        }
        for dir in dirs.iter().rev() {
            let _ = fs::write(dir.join("cgroup.kill"), "1");
            for _ in 0..50 {
                if fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The incident, open to the tenant, with a cgroup `unit` below it
/// delegated to the tenant; None (said) where `test` cannot run.
fn tenant_test(test: &str, cgroup: &str, unit: &str) -> Option<(Incident, ChildCgroup)> {
    let incident = incident_test(test, cgroup)?;
    open_to_tenants(&incident.nodes);
    let delegated = ChildCgroup::create(&incident.cgroup, unit);
    delegated.delegate_to(TENANT);
    Some((incident, delegated))
}

/// The tenant in `delegated`: it makes a cgroup named as the victim's
/// container, moves there, is denied the uvm node once, then does `then`.
fn as_the_victim(
    incident: &Incident,
    delegated: &ChildCgroup,
    then: &[ProbeOp],
) -> gpu_trace::scenario::ProbeOutcome {
    let mut ops = vec![
        ProbeOp::BecomeUser { uid: TENANT },
        ProbeOp::EnterNewCgroup {
            name: format!("docker-{VICTIM_ID}.scope"),
        },
        incident.open_rw("nvidia-uvm"),
    ];
    ops.extend_from_slice(then);
    probe(&delegated.0, &ops)
}

/// The nodes' directory is the test's (0700): let the tenant in.
fn open_to_tenants(nodes: &DeviceNodes) {
    fs::set_permissions(nodes.dir(), fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn probe(dir: &Path, ops: &[ProbeOp]) -> gpu_trace::scenario::ProbeOutcome {
    run_probe_in(Path::new(gpu_trace()), &[dir], ops).expect("tenant probe runs")
}

fn assert_terminal_safe(text: &str) {
    let raw: Vec<char> = text.chars().filter(|&c| needs_escape(c)).collect();
    assert!(raw.is_empty(), "raw {raw:?} in {text:?}");
}

#[test]
fn a_hostile_container_name_reaches_no_shell_and_no_terminal_raw() {
    let host = or_skip!(kernel_test);
    let incident = Incident::new(&host, "hostile-names");
    open_to_tenants(&incident.nodes);
    // Root made these cgroups with names the tenant chose, as LXC does for
    // a container named so: the runtime's pattern counts, and its fix is
    // the one an admin would paste.
    let names = [
        "$(touch${IFS}pwned)".to_string(),
        format!("a\u{1b}]0;{MARKER}\u{7}\u{202e}b\u{9b}"),
    ];
    let major = incident.uvm_major.to_string();
    let human = Watcher::start(&["--format", "human", "--major", &major]);
    let json = Watcher::start(&["--format", "json", "--major", &major]);
    let mut pids = Vec::new();
    let mut cgroups = Vec::new();
    let mut policies = Vec::new();
    for name in &names {
        let cgroup = ChildCgroup::create(&incident.cgroup, &format!("lxc.payload.{name}"));
        policies.push(cgroup.own_policy(incident.uvm_major));
        let child = probe(
            &cgroup.0,
            &[
                ProbeOp::BecomeUser { uid: TENANT },
                incident.open_rw("nvidia-uvm"),
            ],
        );
        assert_eq!(child.results, [0, libc::EPERM]);
        pids.push(child.pid);
        cgroups.push(cgroup);
    }
    for &pid in &pids {
        assert_eq!(json.wait_for_events(pid, 1).len(), 1);
    }
    let json_lines = json.lines();
    json.stop_cleanly();
    // Stopping drains the human watcher too: every line it had to write.
    let (status, stderr, human_lines) = human.stop_with_lines();
    assert!(status.success(), "watch ended with {status}: {stderr:#?}");

    // JSON keeps each name exactly, yet no line holds a raw control, DEL,
    // C1 or bidi character, and every command in a hint is paste-safe.
    for (pid, name) in pids.iter().zip(&names) {
        let line = json_lines
            .iter()
            .find(|l| serde_json::from_str::<Value>(l).is_ok_and(|v| v["pid"] == *pid))
            .expect("the tenant's event");
        assert_terminal_safe(line);
        let event: Value = serde_json::from_str(line).expect("JSON");
        assert_eq!(event["container"]["runtime"], "lxc", "{event}");
        assert_eq!(event["container"]["id"], name.as_str(), "{event}");
        assert_paste_safe(event["hint"].as_str().expect("a hint"), name);
    }
    // Human lines: all escaped; the first name's fix pastes as a literal word.
    for line in &human_lines {
        assert_terminal_safe(line);
    }
    let fixes: Vec<&str> = human_lines
        .iter()
        .filter_map(|l| l.trim_start().strip_prefix("fix (")?.split_once("): "))
        .map(|(_cause, fix)| fix)
        .collect();
    assert_eq!(fixes.len(), 2, "{human_lines:#?}");
    assert!(
        fixes[0].contains("lxc-stop -n '$(touch${IFS}pwned)'"),
        "{}",
        fixes[0]
    );
    assert_paste_safe(fixes[0], &names[0]);
    assert!(fixes[1].contains("lxc-stop -n CONTAINER "), "{}", fixes[1]);
    assert!(
        human_lines
            .iter()
            .any(|l| l.contains("lxc a\\u{1b}]0;pwned\\u{7}\\u{202e}b\\u{9b}")),
        "{human_lines:#?}"
    );
}

#[test]
fn a_tenant_cannot_pass_for_another_container_nor_flood_the_log() {
    let (incident, delegated) = or_skip!(tenant_test, "hostile-flood", "user@4242.service");
    // The real container, made by root where Docker's systemd driver would.
    let victim = ChildCgroup::create(&incident.cgroup, &format!("docker-{VICTIM_ID}.scope"));
    const OPENS: u32 = 20_000;
    let watcher = incident.watch(&[
        "--format",
        "json",
        "--fold",
        "60s",
        "--budget-per-cgroup",
        "20",
        "--budget",
        "100",
    ]);
    let fake = format!("docker-{VICTIM_ID}.scope");
    let child = as_the_victim(
        &incident,
        &delegated,
        &[ProbeOp::OpenUnderNewNames {
            path: incident.nodes.path("nvidia-uvm"),
            mode: OpenMode::ReadWrite,
            count: OPENS,
        }],
    );
    assert_eq!(child.results, [0, 0, libc::EPERM, OPENS as i32]);
    watcher.wait_for_events(child.pid, 20);
    let (status, stderr, events) = watcher.stop_with_events(child.pid);
    assert!(status.success(), "{stderr:#?}");
    let (summary, count) = summary_counts(&stderr);
    let lost = count("lost");

    // Not the victim: the delegated unit it sits in, as systemd made it.
    let attacker_path = format!(
        "{}/user@4242.service/{fake}",
        incident.cgroup.relative_path().display()
    );
    for event in &events {
        assert_eq!(event["container"]["runtime"], "systemd", "{event}");
        assert_eq!(event["container"]["id"], "user@4242.service", "{event}");
        assert_eq!(event["cgroup"], attacker_path.as_str());
    }
    // Bounded: 20 first occurrences, then one summary, whose count makes
    // the sum exact.
    let sum = total_count(&events);
    assert_eq!(sum, u64::from(OPENS) + 1 - lost as u64, "{summary}");
    // Bounded whatever was lost: 20 first occurrences and one summary at most.
    assert!(events.len() <= 21, "{} records", events.len());
    if lost == 0 {
        let kinds: Vec<&str> = events
            .iter()
            .map(|e| e["kind"].as_str().expect("kind"))
            .collect();
        assert_eq!(kinds.len(), 21, "{kinds:?}");
        assert_eq!(kinds.iter().filter(|k| **k == "event").count(), 20);
        let last = events
            .iter()
            .find(|e| e["kind"] == "summary")
            .expect("a summary");
        assert_eq!(last["count"], OPENS - 19);
    }

    // `check --container` finds the real one only.
    let (_, report) = check_json_with(&["--container", &VICTIM_ID[..12]], None);
    let victim_path = format!(
        "{}/docker-{VICTIM_ID}.scope",
        incident.cgroup.relative_path().display()
    );
    assert_eq!(report["cgroup"], victim_path.as_str());
    assert_eq!(report["container"]["runtime"], "docker");
    drop(victim);
    // With the victim gone, the tenant's look-alike is no match at all.
    let out = Command::new(gpu_trace())
        .args(["check", "--container", &VICTIM_ID[..12]])
        .output()
        .expect("run check");
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no running container matches"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn metrics_series_are_capped_and_their_sum_exact() {
    let host = or_skip!(kernel_test);
    let incident = Incident::new(&host, "hostile-metrics");
    const MINORS: u32 = 40;
    let names: Vec<String> = (0..MINORS).map(|m| format!("uvm{m}")).collect();
    let specs: Vec<(&str, u32, u32)> = names
        .iter()
        .zip(0..)
        .map(|(n, m)| (n.as_str(), incident.uvm_major, m))
        .collect();
    let nodes = DeviceNodes::create(&specs).expect("mknod");
    let addr = free_local_addr();
    let watcher = incident.watch(&[
        "--format",
        "json",
        "--metrics",
        &addr,
        "--metrics-series",
        "5",
    ]);
    let ops: Vec<ProbeOp> = names
        .iter()
        .map(|n| ProbeOp::Open {
            path: nodes.path(n),
            mode: OpenMode::ReadWrite,
        })
        .collect();
    let child = probe(incident.cgroup.path(), &ops);
    assert!(child.results.iter().all(|&r| r == libc::EPERM));
    watcher.wait_for_events(child.pid, MINORS as usize);
    let body = scrape(&addr);
    let series: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("gpu_trace_denied_total{"))
        .collect();
    assert!(series.len() <= 6, "at most 5 and other: {body}");
    let ours: f64 = series
        .iter()
        .filter(|l| {
            l.contains(&format!("major=\"{}\"", incident.uvm_major))
                || l.contains("major=\"other\"")
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(ours, f64::from(MINORS), "{body}");
    watcher.stop_cleanly();
}

#[test]
fn our_own_observers_are_known_by_who_holds_them_not_by_name() {
    let host = or_skip!(kernel_test);
    let incident = Incident::new(&host, "hostile-own");
    // The errno observer's name is cut to observe_device_ by the kernel.
    let watcher = Watcher::start(&[
        "--hook",
        "errno-observer",
        "--major",
        &incident.uvm_major.to_string(),
    ]);
    // A root program that takes our observer's name, and denies.
    let impostor = load_device_program(
        "observe_device",
        &denylist_program(&[(
            incident.uvm_major,
            ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD,
        )]),
    )
    .expect("load the impostor");
    let _link = attach_device_program(&impostor, incident.cgroup.open().expect("open cgroup"))
        .expect("attach the impostor");
    let cgroup = incident.cgroup.relative_path().to_str().expect("UTF-8");
    let (_, report) = check_json_with(&["--cgroup", cgroup], None);
    let names: Vec<&str> = report["programs"]
        .as_array()
        .expect("programs")
        .iter()
        .map(|p| p["name"].as_str().expect("name"))
        .collect();
    // The scratch policy and the impostor; not the observer watch holds,
    // whatever it is called.
    let mut names = names;
    names.sort_unstable();
    assert_eq!(names, ["gt_scratch_dev", "observe_device"], "{report}");
    watcher.stop_cleanly();
}

#[test]
fn the_log_is_never_written_through_a_symlink_or_to_a_file_root_does_not_own() {
    let _host = or_skip!(kernel_test);
    let dir = tempfile::tempdir().expect("temp dir");
    let target = dir.path().join("passwd-stand-in");
    fs::write(&target, "precious\n").expect("write target");
    let link = dir.path().join("denied.jsonl");
    std::os::unix::fs::symlink(&target, &link).expect("symlink");
    let owned = dir.path().join("tenant.jsonl");
    fs::write(&owned, "").expect("make file");
    chown(&owned, Some(TENANT), Some(TENANT)).expect("chown");
    for (path, why) in [
        (&link, "is a symbolic link"),
        (&owned, "is owned by uid 65534"),
    ] {
        let out = Command::new(gpu_trace())
            .args(["watch", "--output"])
            .arg(path)
            .output()
            .expect("run watch");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(why), "{stderr}");
    }
    assert_eq!(fs::read_to_string(&target).expect("read"), "precious\n");

    // logrotate's move, then a symlink in its place before the SIGHUP.
    let log = dir.path().join("audit.jsonl");
    let mut watcher = Watcher::start(&["--output", log.to_str().expect("UTF-8")]);
    fs::rename(&log, dir.path().join("audit.jsonl.1")).expect("rotate");
    std::os::unix::fs::symlink(&target, &log).expect("symlink");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watcher.child.id() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .expect("SIGHUP");
    watcher.wait_for_stderr("gpu-trace: reopening the output after SIGHUP");
    let stderr = watcher.stop_cleanly();
    assert!(
        says(&stderr, "gpu-trace: detached;", "failed reopens 1"),
        "{stderr:#?}"
    );
    assert_eq!(fs::read_to_string(&target).expect("read"), "precious\n");
}

#[test]
fn check_pid_reads_the_targets_dev_inside_its_root() {
    let _host = or_skip!(kernel_test);
    use nix::sys::stat::{makedev, mknod, Mode, SFlag};
    let node = |path: &Path, minor: u64| {
        mknod(
            path,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            makedev(195, minor),
        )
        .expect("mknod");
    };
    // A host directory with a node the container must not be credited with.
    let host_dir = tempfile::tempdir().expect("temp dir");
    node(&host_dir.path().join("nvidia0"), 7);
    // The container's root: /dev is an absolute symlink to the same path,
    // which inside the root holds the container's own node.
    let root = tempfile::tempdir().expect("temp dir");
    let inside = root
        .path()
        .join(host_dir.path().strip_prefix("/").expect("absolute"));
    fs::create_dir_all(&inside).expect("mkdir");
    node(&inside.join("nvidia0"), 3);
    std::os::unix::fs::symlink(host_dir.path(), root.path().join("dev")).expect("symlink");
    fs::create_dir(root.path().join("bin")).expect("mkdir");
    fs::copy("/bin/busybox", root.path().join("bin/busybox")).expect("a static busybox");
    let mut contained = Command::new("chroot")
        .arg(root.path())
        .args(["/bin/busybox", "sleep", "30"])
        .spawn()
        .expect("chroot");
    let pid = contained.id();
    let proc_root = format!("/proc/{pid}/root");
    let deadline = std::time::Instant::now() + WAIT;
    while fs::read_link(&proc_root).ok().as_deref() != Some(root.path()) {
        assert!(
            std::time::Instant::now() < deadline,
            "chroot never happened"
        );
        thread::sleep(Duration::from_millis(10));
    }
    let (_, report) = check_json_with(&["--pid", &pid.to_string()], None);
    let _ = contained.kill();
    let _ = contained.wait();
    let target = report["views"]
        .as_array()
        .expect("views")
        .iter()
        .find(|v| v["name"] == "target")
        .expect("a target view");
    let minors: Vec<u64> = target["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .map(|n| n["minor"].as_u64().expect("minor"))
        .collect();
    assert_eq!(
        minors,
        [3],
        "the container's own node, not the host's: {target}"
    );
}

#[test]
fn idle_scrapers_neither_delay_events_nor_exhaust_descriptors() {
    let host = or_skip!(kernel_test);
    const IDLE: usize = 1_000;
    // Room for the idle connections in this process.
    let limit = libc::rlimit {
        rlim_cur: 4096,
        rlim_max: 4096,
    };
    // SAFETY: setrlimit reads the struct it is given.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
    let incident = Incident::new(&host, "hostile-scrapers");
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("audit.jsonl");
    let addr = free_local_addr();
    let major = incident.uvm_major.to_string();
    let watcher = Watcher::start(&[
        "--output",
        log.to_str().expect("UTF-8"),
        "--major",
        &major,
        "--metrics",
        &addr,
    ]);
    // Connections that never send a byte.
    let idle: Vec<std::net::TcpStream> = (0..IDLE)
        .filter_map(|_| std::net::TcpStream::connect(&addr).ok())
        .collect();
    assert!(idle.len() >= IDLE / 2, "connected {}", idle.len());
    // logrotate's move and SIGHUP, then a denial: written to the new file.
    fs::rename(&log, dir.path().join("audit.jsonl.1")).expect("rotate");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(watcher.child.id() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .expect("SIGHUP");
    let child = probe(incident.cgroup.path(), &[incident.open_rw("nvidia-uvm")]);
    assert_eq!(child.results, [libc::EPERM]);
    let deadline = std::time::Instant::now() + WAIT;
    let written = loop {
        let text = fs::read_to_string(&log).unwrap_or_default();
        if text.contains(&format!("\"pid\":{}", child.pid)) || std::time::Instant::now() > deadline
        {
            break text;
        }
        thread::sleep(Duration::from_millis(50));
    };
    assert!(
        written.contains(&format!("\"pid\":{}", child.pid)),
        "{written}"
    );
    // watch holds a bounded number of descriptors, not one per idle peer.
    let fds = fs::read_dir(format!("/proc/{}/fd", watcher.child.id()))
        .expect("watch's fds")
        .count();
    assert!(fds < 200, "watch holds {fds} descriptors");
    // Once the header timeout has closed the idle ones, a scrape is answered.
    drop(idle);
    let body = scrape(&addr);
    assert!(body.contains("gpu_trace_denied_total{"), "{body}");
    let stderr = watcher.stop_cleanly();
    assert!(!says(&stderr, "gpu-trace: reopening", ""), "{stderr:#?}");
}

#[test]
fn selftest_refuses_a_shared_tmpdir_and_leaves_nothing_when_interrupted() {
    let host = or_skip!(kernel_test);
    // A directory anyone may write to, without the sticky bit; and one a
    // tenant owns.
    let open = tempfile::tempdir().expect("temp dir");
    fs::set_permissions(open.path(), fs::Permissions::from_mode(0o777)).expect("chmod");
    let owned = tempfile::tempdir().expect("temp dir");
    chown(owned.path(), Some(TENANT), Some(TENANT)).expect("chown");
    for (dir, why) in [(&open, "not sticky"), (&owned, "owned by uid 65534")] {
        let out = Command::new(gpu_trace())
            .arg("selftest")
            .env("TMPDIR", dir.path())
            .output()
            .expect("run selftest");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        assert!(stderr.contains(why), "{stderr}");
        assert_eq!(
            fs::read_dir(dir.path()).expect("read").count(),
            0,
            "nothing made"
        );
    }

    // SIGTERM once its nodes exist: the nodes and the scratch cgroup go.
    let mut selftest = Command::new(gpu_trace())
        .arg("selftest")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("run selftest");
    let pid = selftest.id();
    let stdout = selftest.stdout.take().expect("stdout");
    let nodes_line = std::io::BufRead::lines(std::io::BufReader::new(stdout))
        .map_while(Result::ok)
        .find(|l| l.contains("device nodes in "))
        .expect("the nodes line");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let status = selftest.wait().expect("wait");
    let nodes_dir = nodes_line
        .split("device nodes in ")
        .nth(1)
        .and_then(|rest| rest.split(':').next())
        .expect("a directory");
    // 143 when interrupted mid-way; a run already over cleaned up anyway.
    assert!(status.code() == Some(143) || status.success(), "{status}");
    assert!(!Path::new(nodes_dir).exists(), "{nodes_dir} left behind");
    let cgroup = host.cgroup2_mount.join(format!("gpu-trace-selftest-{pid}"));
    assert!(!cgroup.exists(), "{} left behind", cgroup.display());
}

/// A container denied one GPU must not be handed every GPU of the node: the
/// fix allows the denied minor (195:1), never the major 195.
#[test]
fn a_denied_gpu_is_fixed_with_its_own_minor_never_the_whole_major() {
    let host = or_skip!(kernel_test);
    let cgroup = scratch_cgroup(&host, "one-gpu");
    let _policy = gpu_trace::scenario::ScratchPolicy::attach(
        &cgroup,
        &[(195, ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD)],
    )
    .expect("attach a policy that denies the GPUs");
    let nodes = DeviceNodes::create(&[("nvidia1", 195, 1)]).expect("mknod");
    let watcher = Watcher::start(&["--format", "json", "--opens", "full"]);
    let probe = gpu_trace::scenario::run_probe(
        Path::new(gpu_trace()),
        &[&cgroup],
        &[ProbeOp::Open {
            path: nodes.path("nvidia1"),
            mode: OpenMode::ReadWrite,
        }],
    )
    .expect("run probe in scratch cgroup");
    assert_eq!(probe.results, [libc::EPERM]);
    let events = watcher.wait_for_events(probe.pid, 1);
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = &events[0];
    assert_eq!(event["cause"], "device-denied", "{event:#}");
    let hint = event["hint"].as_str().expect("a fix");
    assert!(hint.contains("allow c 195:1 rwm"), "{hint}");
    assert!(!hint.contains("195:*"), "{hint}");
}

#[test]
fn a_tenants_look_alike_is_not_the_victim_once_its_directories_are_gone() {
    let (incident, delegated) = or_skip!(tenant_test, "gone-spoof", "user@4243.service");
    let major = incident.uvm_major.to_string();
    let watcher = Watcher::start(&["--format", "json", "--fold", "0", "--major", &major]);
    // The tenant stalls watch (here: the test stops it), is denied in a
    // cgroup of its own named as the victim's container, then the whole
    // subtree goes before watch looks.
    let watcher_pid = Pid::from_raw(watcher.child.id() as i32);
    kill(watcher_pid, Signal::SIGSTOP).expect("stop the watcher");
    let fake = format!("docker-{VICTIM_ID}.scope");
    let child = as_the_victim(&incident, &delegated, &[]);
    assert_eq!(child.results, [0, 0, libc::EPERM]);
    let attacker_path = format!(
        "{}/user@4243.service/{fake}",
        incident.cgroup.relative_path().display()
    );
    fs::remove_dir(delegated.0.join(&fake)).expect("remove the look-alike");
    drop(delegated);
    kill(watcher_pid, Signal::SIGCONT).expect("resume the watcher");

    let events = watcher.wait_for_events(child.pid, 1);
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = &events[0];
    // Named from the kernel's note, which says the tenant made it.
    assert_eq!(event["cgroup"], attacker_path.as_str(), "{event:#}");
    assert_ne!(event["container"]["runtime"], "docker", "{event:#}");
    assert_eq!(event["container"]["runtime"], "systemd", "{event:#}");
    assert_eq!(event["container"]["id"], "user@4243.service", "{event:#}");
    watcher.stop_cleanly();
}

#[test]
fn a_denial_whose_path_another_thread_rewrites_is_never_lost() {
    let incident = or_skip!(incident_test, "flip");
    let flip_open = or_skip!(c_program, "flip_open", &["-pthread"]);
    let uvm = incident.nodes.path("nvidia-uvm");
    let uvm = uvm.to_str().expect("UTF-8");
    // The same length, different in its first 32 bytes, and not there.
    let elsewhere = format!("/X{}", &uvm[2..]);
    let watcher = incident.watch(&["--format", "json", "--fold", "1s", "--bpf-log", "debug"]);
    let mut command = Command::new(&flip_open);
    command.args([uvm, &elsewhere, "20000"]);
    let child = start_in_cgroup(incident.cgroup.path(), command);
    let pid = child.id();
    let denied = printed_count(child);
    assert!(denied > 0, "some opens reached the device check");
    thread::sleep(Duration::from_millis(1_500)); // the fold window's records
    let (status, stderr, events) = watcher.stop_with_events(pid);
    assert!(status.success(), "{stderr:#?}");
    let (summary, count) = summary_counts(&stderr);
    assert_eq!(count("lost"), 0, "{summary}");
    let reported = total_count(&events);
    let rewritten = events.iter().filter(|e| e["path_changed"] == true).count();
    eprintln!("flip_open: {denied} denials, {reported} reported, {rewritten} records with the path rewritten");
    assert_eq!(reported, denied, "every denial sent or counted: {summary}");
    for event in events.iter().filter(|e| e["path_changed"] == true) {
        assert!(event["path"].is_null(), "{event:#}");
        assert_eq!(event["major"], incident.uvm_major, "{event:#}");
    }
    // The kernel says so too (--bpf-log), where it happened at all: with
    // fexit on the open function, the path is read at the call's end.
    let program =
        gpu_trace_common::EVENT_PROGRAMS[gpu_trace_common::PROGRAM_OPEN_FUNCTION_EXIT as usize];
    let said = format!("gpu-trace: bpf: debug: path-changed: path rewritten during the call, sent without in {program}: pid {pid} ");
    let records = stderr.iter().filter(|l| l.starts_with(&said)).count();
    assert_eq!(
        records > 0,
        rewritten > 0,
        "{records} path-changed records: {stderr:#?}"
    );
}

/// A 64-bit process may call through the 32-bit entry (`int $0x80`): the
/// kernel takes the path from the 32-bit registers while the saved code
/// segment still says 64-bit, and the 64-bit path register holds another
/// value (here openat2's size). Every denial is reported or counted, once,
/// with its own path: none hidden behind the register the call did not use.
#[test]
fn a_denial_through_a_64_bit_process_s_32_bit_entry_keeps_its_path_and_count() {
    let incident = or_skip!(incident_test, "int80");
    if !gpu_trace::scenario::compat_open::int80_works() {
        crate::skip::cannot_run(
            test_name!(),
            "this kernel takes no 32-bit calls from 64-bit code (no IA32 emulation)",
        );
        return;
    }
    const OPENS: usize = 200;
    let uvm = incident.nodes.path("nvidia-uvm");
    let op = ProbeOp::OpenThroughInt80 {
        path: uvm.clone(),
        mode: OpenMode::ReadWrite,
    };
    let watcher = incident.watch(&["--format", "json", "--fold", "1s"]);
    let child = gpu_trace::scenario::run_probe(
        Path::new(gpu_trace()),
        &[&incident.cgroup],
        &vec![op; OPENS],
    )
    .expect("probe");
    assert!(
        child.results.iter().all(|&r| r == libc::EPERM),
        "{:?}",
        child.results
    );
    let (status, stderr, records) = watcher.stop_with_events(child.pid);
    assert!(status.success(), "{stderr:#?}");
    assert!(stderr.iter().any(|l| l.contains("lost 0")), "{stderr:#?}");
    assert_eq!(total_count(&records), OPENS as u64, "{records:#?}");
    for record in &records {
        assert_eq!(record["path"], uvm.to_str().expect("UTF-8"), "{record:#}");
        assert_eq!(record["syscall"], "openat2", "{record:#}");
        assert_eq!(record["major"], incident.uvm_major, "{record:#}");
    }
}
