//! What the kernel tests share: the host check that decides run or skip,
//! scratch cgroups, the incident's pieces, and a background `watch`.

use std::{
    io::{BufRead, BufReader},
    process::{Child, ExitStatus},
    sync::{
        atomic::{AtomicBool, Ordering},
        mpsc, Arc, LazyLock, Mutex,
    },
};

use gpu_trace::{
    host::{
        preflight::{check_host, Host},
        proc_devices::CharMajors,
    },
    scenario::incident::UVM_NODE,
};
use gpu_trace_common::program;

/// What the test files name again and again (files and paths, commands and
/// signals, waits, the scenario's pieces, the access bits, gpu-trace's
/// JSON), so that with `use crate::common::*` each imports only its own.
pub use prelude::*;

// Each test binary names a part of these.
#[allow(unused_imports)]
mod prelude {
    pub use gpu_trace::scenario::{
        run_probe, DeviceNodes, OpenMode, ProbeOp, ScratchCgroup, ScratchPolicy,
    };
    pub use gpu_trace_common::{ACCESS_MKNOD, ACCESS_READ, ACCESS_WRITE};
    pub use nix::{
        sys::signal::{kill, Signal},
        unistd::Pid,
    };
    pub use serde_json::Value;
    pub use std::{
        fs,
        path::{Path, PathBuf},
        process::{Command, Stdio},
        thread,
        time::{Duration, Instant},
    };
}

/// The gpu-trace binary under test: cargo's build, or GPU_TRACE_BIN where
/// the tests run away from the build tree (inside a test VM).
pub fn gpu_trace() -> &'static str {
    static PATH: LazyLock<String> = LazyLock::new(|| {
        std::env::var("GPU_TRACE_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_gpu-trace").to_string())
    });
    &PATH
}
/// Generous: these machines are noisy. Only bounds a wait, never asserted as speed.
pub const WAIT: Duration = Duration::from_secs(20);

/// Shell words that give a private mount namespace cgroup2 at
/// /sys/fs/cgroup, as LXC and runc must see it to write cgroup2 device
/// programs: mounted on a hybrid host, already there on a pure one.
pub const PURE_CGROUP2: &str = "{ [ \"$(stat -f -c %T /sys/fs/cgroup)\" = cgroup2fs ] || mount -t cgroup2 cgroup2 /sys/fs/cgroup; }";

/// The name of the test function this is written in, so that a test's
/// name is written once (in its `fn`): the type name of an item declared
/// inside it is the function's path plus the item.
macro_rules! test_name {
    () => {{
        fn here() {}
        let path = std::any::type_name_of_val(&here);
        let function = path.strip_suffix("::here").unwrap_or(path);
        function.rsplit("::").next().unwrap_or(function)
    }};
}
pub(crate) use test_name;

/// What `check` finds for this test (its host, its incident, its lab...),
/// or a return from the test when `check` says (on stderr) that it cannot
/// run here. `check` takes the test's name, then `args`:
/// `let incident = or_skip!(incident_test, "fold");`.
macro_rules! or_skip {
    ($check:path $(, $arg:expr)* $(,)?) => {
        match $check($crate::common::test_name!() $(, $arg)*) {
            Some(found) => found,
            None => return,
        }
    };
}
pub(crate) use or_skip;

/// The host, or None (with the reason printed) when this test cannot run.
pub fn kernel_test(name: &str) -> Option<Host> {
    match check_host() {
        Ok(host) => Some(host),
        Err(e) => {
            crate::skip::cannot_run(name, &format!("{e:#}"));
            None
        }
    }
}

/// watch's closing line ("detached; events N, denied N, lost N") and a
/// reader of its counts by name.
pub fn summary_counts(stderr: &[String]) -> (String, impl Fn(&str) -> usize + '_) {
    let summary = stderr
        .iter()
        .find(|l| l.contains("detached;"))
        .expect("summary line")
        .clone();
    let line = summary.clone();
    let number = move |word: &str| -> usize {
        // The number right after the word ("folded in the kernel 9990 (...)").
        line.split([',', ';'])
            .find_map(|part| {
                let rest = part.trim().strip_prefix(word)?.trim_start();
                let end = rest
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(rest.len());
                rest[..end].parse().ok()
            })
            .expect("a count")
    };
    (summary, number)
}

/// A major no driver owns, standing in for the dynamic nvidia-uvm major.
pub fn uvm_standin() -> u32 {
    CharMajors::read()
        .expect("read /proc/devices")
        .unused_dynamic_major()
        .expect("a free dynamic major")
}

pub fn scratch_cgroup(host: &Host, test: &str) -> ScratchCgroup {
    ScratchCgroup::create(
        &host.cgroup2_mount,
        &format!("gpu-trace-test-{test}-{}", std::process::id()),
    )
    .expect("create scratch cgroup")
}

/// `gpu-trace watch ...` running in the background, its stdout collected
/// line by line as it comes.
pub struct Watcher {
    pub child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    stdout_done: Arc<AtomicBool>,
    stderr: mpsc::Receiver<String>,
    pub stderr_seen: Vec<String>,
}

impl Watcher {
    /// Starts the watcher and waits for its "ready" line on stderr.
    pub fn start(args: &[&str]) -> Self {
        let mut command = Command::new(gpu_trace());
        command.arg("watch").args(args);
        Self::spawn(command)
    }

    /// `gpu-trace watch --format json ARGS` reading majors from
    /// `proc_devices`, a copy of /proc/devices naming drivers this host lacks.
    pub fn with_proc_devices(args: &[&str], proc_devices: &std::path::Path) -> Self {
        let mut command = Command::new(gpu_trace());
        command
            .args(["watch", "--format", "json"])
            .args(args)
            .env("GPU_TRACE_PROC_DEVICES", proc_devices);
        Self::spawn(command)
    }

    /// `command` (a `gpu-trace watch`, perhaps behind a wrapper that drops
    /// privileges) as the watcher.
    pub fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start gpu-trace watch");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let stdout = child.stdout.take().expect("stdout piped");
        let sink = Arc::clone(&lines);
        let stdout_done = Arc::new(AtomicBool::new(false));
        let done = Arc::clone(&stdout_done);
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().expect("lines lock").push(line);
            }
            done.store(true, Ordering::Release);
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
            stdout_done,
            stderr,
            stderr_seen: Vec::new(),
        };
        watcher.wait_for_stderr("gpu-trace: ready");
        watcher
    }

    pub fn wait_for_stderr(&mut self, prefix: &str) {
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

    /// Every line on stdout so far, as written.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().expect("lines lock").clone()
    }

    /// JSON events on stdout so far whose pid is `pid`.
    pub fn events_of(&self, pid: u32) -> Vec<Value> {
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
    pub fn wait_for_events(&self, pid: u32, count: usize) -> Vec<Value> {
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
    pub fn stop(mut self) -> (ExitStatus, Vec<String>) {
        self.finish()
    }

    /// Stops it, insists that it ended well, and returns its stderr.
    pub fn stop_cleanly(self) -> Vec<String> {
        let (status, stderr) = self.stop();
        assert!(status.success(), "watch ended with {status}: {stderr:#?}");
        stderr
    }

    /// Stops it and returns, besides, every event of `pid` it wrote, also
    /// those written while it shut down (folded records, for one).
    pub fn stop_with_events(mut self, pid: u32) -> (ExitStatus, Vec<String>, Vec<Value>) {
        let (status, stderr) = self.finish();
        (status, stderr, self.events_of(pid))
    }

    /// Stops it and returns, besides, every line it wrote on stdout.
    pub fn stop_with_lines(mut self) -> (ExitStatus, Vec<String>, Vec<String>) {
        let (status, stderr) = self.finish();
        (status, stderr, self.lines())
    }

    /// Everything it printed on stderr so far.
    pub fn stderr_now(&mut self) -> Vec<String> {
        while let Ok(line) = self.stderr.try_recv() {
            self.stderr_seen.push(line);
        }
        self.stderr_seen.clone()
    }

    fn finish(&mut self) -> (ExitStatus, Vec<String>) {
        kill(Pid::from_raw(self.child.id() as i32), Signal::SIGINT).expect("signal watcher");
        let status = self.child.wait().expect("wait for watcher");
        // The stderr thread ends at EOF; collect what it read.
        while let Ok(line) = self.stderr.recv_timeout(Duration::from_secs(2)) {
            self.stderr_seen.push(line);
        }
        // And the stdout one.
        let deadline = Instant::now() + WAIT;
        while !self.stdout_done.load(Ordering::Acquire) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(10));
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

pub use gpu_trace::scenario::incident::Incident;

/// The incident as the kernel tests set it up: in a scratch cgroup named
/// after the test.
pub trait IncidentInTests {
    fn new(host: &Host, test: &str) -> Self;
    /// One open of the uvm node from inside the cgroup, which the policy
    /// denies (asserted); returns the probe's pid.
    fn deny_once(&self) -> u32;
    /// `gpu-trace watch ARGS --major UVM`: the stand-in uvm major has no
    /// driver, so watch sees it only when named.
    fn watch(&self, args: &[&str]) -> Watcher;
}

/// The incident in a scratch cgroup named after `cgroup`, or None (with
/// the reason printed) when `test` cannot run on this host.
pub fn incident_test(test: &str, cgroup: &str) -> Option<Incident> {
    let host = kernel_test(test)?;
    Some(Incident::new(&host, cgroup))
}

impl IncidentInTests for Incident {
    fn new(host: &Host, test: &str) -> Self {
        Incident::set_up(
            &host.cgroup2_mount,
            &format!("gpu-trace-test-{test}-{}", std::process::id()),
            uvm_standin(),
            |_| {},
        )
        .expect("set up the incident in a scratch cgroup")
    }

    fn deny_once(&self) -> u32 {
        let probe = self
            .open_in_cgroup(std::path::Path::new(gpu_trace()), &[UVM_NODE])
            .expect("run probe in scratch cgroup");
        assert_eq!(probe.results, [libc::EPERM]);
        probe.pid
    }

    fn watch(&self, args: &[&str]) -> Watcher {
        let major = self.uvm_major.to_string();
        let mut all = args.to_vec();
        all.extend(["--major", &major]);
        Watcher::start(&all)
    }
}

/// Set inside the test VMs, whose Debian kernels load fexit: there a
/// refused fexit is a failure, not a reason to skip or fall back.
pub fn fexit_expected() -> bool {
    std::env::var("GPU_TRACE_EXPECT_FEXIT").is_ok_and(|v| v == "1")
}

/// A probe in `cgroups` opens `path` once and is refused (EPERM); the one
/// event `watcher` reports for it, and the probe's pid.
pub fn denied_open(
    watcher: &Watcher,
    cgroups: &[&ScratchCgroup],
    path: std::path::PathBuf,
    mode: OpenMode,
) -> (u32, Value) {
    let probe = gpu_trace::scenario::run_probe(
        std::path::Path::new(gpu_trace()),
        cgroups,
        &[ProbeOp::Open { path, mode }],
    )
    .expect("probe");
    assert_eq!(probe.results, [libc::EPERM], "the open is refused");
    let events = watcher.wait_for_events(probe.pid, 1);
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = events.into_iter().next().expect("one event");
    (probe.pid, event)
}

/// Where the cgroup v1 devices controller is mounted; None, saying that
/// `test` skips, where it is not. A property of the host's layout, not a
/// missing kernel feature: pure cgroup2 hosts have no devices.list at all.
pub fn v1_devices_mount(test: &str) -> Option<std::path::PathBuf> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").expect("read mountinfo");
    let mount = gpu_trace::host::mountinfo::v1_controller_mount_in(&mountinfo, "devices");
    if mount.is_none() {
        eprintln!("skipping {test}: no cgroup v1 devices controller mounted");
    }
    mount
}

/// A scratch cgroup named after `name` in the v1 devices hierarchy at `v1_devices`.
pub fn v1_devices_cgroup(v1_devices: &std::path::Path, name: &str) -> ScratchCgroup {
    ScratchCgroup::create(
        v1_devices,
        &format!("gpu-trace-test-{name}-{}", std::process::id()),
    )
    .expect("create v1 devices cgroup")
}

/// Has the v1 devices cgroup `v1` refuse every node of `major`.
pub fn v1_deny_major(v1: &ScratchCgroup, major: u32) {
    std::fs::write(v1.path().join("devices.deny"), format!("c {major}:* rwm"))
        .expect("write devices.deny");
}

/// A denial by the cgroup v1 devices list: the stand-in uvm major, a v1
/// devices cgroup `v1_name` that refuses it, a cgroup2 scratch cgroup
/// `v2_name` to open it from, and its node. None (said) where `test`
/// cannot run or the host has no v1 devices controller.
pub fn v1_denial(
    test: &str,
    v1_name: &str,
    v2_name: &str,
) -> Option<(u32, ScratchCgroup, ScratchCgroup, DeviceNodes)> {
    let host = kernel_test(test)?;
    let v1_devices = v1_devices_mount(test)?;
    let major = uvm_standin();
    let v1 = v1_devices_cgroup(&v1_devices, v1_name);
    v1_deny_major(&v1, major);
    let v2 = scratch_cgroup(&host, v2_name);
    let nodes = DeviceNodes::create(&[("nvidia-uvm", major, 0)]).expect("mknod");
    Some((major, v1, v2, nodes))
}

/// A temporary directory whose name starts with `prefix`, so that one left
/// behind says what made it; removed on drop.
pub fn temp_dir_named(prefix: &str) -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir()
        .expect("temp dir")
}

/// The element of the JSON array `array` whose `key` is `value` (a view by
/// name, a node row by kind); panics when `array` is no array.
pub fn element_where<'a>(array: &'a Value, key: &str, value: &str) -> Option<&'a Value> {
    array
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {array:#}"))
        .iter()
        .find(|e| e[key] == value)
}

/// The event's text `field` ("explanation", "hint"); panics when it has none.
pub fn event_text<'a>(event: &'a Value, field: &str) -> &'a str {
    event[field]
        .as_str()
        .unwrap_or_else(|| panic!("no {field}: {event:#}"))
}

/// Asserts that the event's text `field` contains `part`, showing the text.
#[track_caller]
pub fn assert_event_says(event: &Value, field: &str, part: &str) {
    let text = event_text(event, field);
    assert!(text.contains(part), "{text}");
}

/// Asserts that the event's text `field` starts with `prefix`, showing the text.
#[track_caller]
pub fn assert_event_starts(event: &Value, field: &str, prefix: &str) {
    let text = event_text(event, field);
    assert!(text.starts_with(prefix), "{text}");
}

/// Whether a line of `stderr` starts with `prefix` and contains `part`.
pub fn says(stderr: &[String], prefix: &str, part: &str) -> bool {
    stderr
        .iter()
        .any(|l| l.starts_with(prefix) && l.contains(part))
}

/// From watch's stderr: an open route and a device hook are in place
/// (fexit on the device check and on the open function, where expected), and
/// nothing else was refused.
pub fn assert_hooks_in_place(stderr: &[String]) {
    let active = |what: &str| says(stderr, "gpu-trace: hook active:", what);
    let tracepoints = ["_openat", "_openat2", "_open"]
        .iter()
        .all(|tracepoint| active(tracepoint));
    let open_function = active(&format!("fexit {}", program::OPEN_FUNCTION));
    assert!(
        open_function || (!fexit_expected() && tracepoints),
        "no open route active: {stderr:#?}"
    );
    let device_hook = active("fexit") || (!fexit_expected() && active("observer"));
    assert!(device_hook, "no device hook active: {stderr:#?}");
    // Only the trampoline hooks may be refused, and only where not expected.
    let unexpected: Vec<&String> = stderr
        .iter()
        .filter(|l| l.contains("hook refused"))
        .filter(|l| fexit_expected() || !l.contains("refused: fexit"))
        .collect();
    assert!(unexpected.is_empty(), "{unexpected:#?}");
}

/// Where an event is made, for the program a drop record names.
pub enum MadeBy {
    /// The device hook, reporting at once (outside open calls, or with no
    /// open route).
    DeviceHook,
    /// The end of an openat call, on watch's open route (the device hook's
    /// own report where there is none).
    OpenatExit,
}

/// The program, by the name drop records print, that makes the events
/// `made_by` says under the watch whose stderr is `stderr` (its hook lines).
pub fn event_program(stderr: &[String], made_by: MadeBy) -> &'static str {
    use gpu_trace_common::{
        EVENT_PROGRAMS, PROGRAM_CHECK_PERMISSION_EXIT, PROGRAM_EXIT_OPENAT, PROGRAM_OBSERVE_DEVICE,
        PROGRAM_OPEN_FUNCTION_EXIT,
    };
    let active = |what: &str| says(stderr, "gpu-trace: hook active:", what);
    let device_hook = if active("fexit devcgroup_check_permission") {
        PROGRAM_CHECK_PERMISSION_EXIT
    } else if active("cgroup_device observer") {
        PROGRAM_OBSERVE_DEVICE
    } else {
        panic!("no device hook among {stderr:#?}")
    };
    let program = match made_by {
        MadeBy::OpenatExit if active(&format!("fexit {}", program::OPEN_FUNCTION)) => {
            PROGRAM_OPEN_FUNCTION_EXIT
        }
        MadeBy::OpenatExit if active("tracepoints syscalls:sys_{enter,exit}_openat") => {
            PROGRAM_EXIT_OPENAT
        }
        _ => device_hook,
    };
    EVENT_PROGRAMS[program as usize]
}

/// Whether `run ARGS -- true` starts: exit 0 where the kernel takes the
/// forced hook, 6 (hook refused, naming `refused`) where it does not. Where
/// trampolines are expected (GPU_TRACE_EXPECT_FEXIT=1), a refusal fails here.
pub fn forced_hook_loads(args: &[&str], refused: &str) -> bool {
    let out = Command::new(gpu_trace())
        .arg("run")
        .args(args)
        .args(["--", "true"])
        .output()
        .expect("run gpu-trace run");
    let stderr = String::from_utf8_lossy(&out.stderr);
    match out.status.code() {
        Some(0) => true,
        Some(6) => {
            assert!(
                stderr.contains(&format!("refused the {refused}")),
                "exit 6 names the refused hook: {stderr}"
            );
            assert!(
                !fexit_expected(),
                "GPU_TRACE_EXPECT_FEXIT=1, yet this kernel refused {refused}: {stderr}"
            );
            eprintln!("this kernel refuses {refused}: {stderr}");
            false
        }
        other => panic!("gpu-trace run {args:?}: exit {other:?}: {stderr}"),
    }
}

/// Whether fexit on the open function loads here (`--opens fexit`).
pub fn fexit_opens_load() -> bool {
    forced_hook_loads(
        &["--opens", "fexit"],
        &format!("fexit {}", program::OPEN_FUNCTION),
    )
}

/// net.core.bpf_jit_harden set for one test and put back after: with 2,
/// the kernel blinds the constants of every program loaded meanwhile and
/// hands back instructions that use its auxiliary register.
pub struct JitHarden(String);

const JIT_HARDEN: &str = "/proc/sys/net/core/bpf_jit_harden";

impl JitHarden {
    pub fn set(level: &str) -> Self {
        let before = std::fs::read_to_string(JIT_HARDEN).expect("read bpf_jit_harden");
        std::fs::write(JIT_HARDEN, level).expect("set bpf_jit_harden");
        Self(before.trim().to_string())
    }
}

impl Drop for JitHarden {
    fn drop(&mut self) {
        let _ = std::fs::write(JIT_HARDEN, &self.0);
    }
}

/// Whether a program's instructions show blinding (the auxiliary register, r11).
pub fn blinded(policy: &gpu_trace::kernel::programs_in_force::CgroupPolicy) -> bool {
    policy
        .programs
        .iter()
        .flat_map(|p| p.insns.iter())
        .any(|i| i.dst == 11 || i.src == 11)
}

/// `gpu-trace check --format json TARGET...`, e.g. `["--container", name]`,
/// optionally against a copy of /proc/devices: its status and report.
pub fn check_json_with(
    target: &[&str],
    proc_devices: Option<&std::path::Path>,
) -> (Option<i32>, Value) {
    let mut command = Command::new(gpu_trace());
    command.args(["check", "--format", "json"]).args(target);
    if let Some(devices) = proc_devices {
        command.env("GPU_TRACE_PROC_DEVICES", devices);
    }
    let output = command.output().expect("run gpu-trace check");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "check --format json ({e}): {stdout}{}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    (output.status.code(), report)
}

/// A local address nothing listens on yet, for `--metrics`.
pub fn free_local_addr() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("addr")
        .port();
    format!("127.0.0.1:{port}")
}

/// The body of `http://ADDR/metrics`.
pub fn scrape(addr: &str) -> String {
    scrape_accepting(addr, "*/*")
}

/// The body of `http://ADDR/metrics` for a client that sends `accept`.
pub fn scrape_accepting(addr: &str, accept: &str) -> String {
    ureq::get(&format!("http://{addr}/metrics"))
        .header("Accept", accept)
        .call()
        .expect("scrape")
        .body_mut()
        .read_to_string()
        .expect("body")
}

/// A small static C program of tests/kernel (`NAME.c`): from the directory
/// GPU_TRACE_C_PROGRAMS where they were built beforehand (the guests have
/// no compiler), else built here with `cc -static FLAGS` (gcc-multilib for
/// -m32). None, said, when neither works.
pub fn c_program(test: &str, name: &str, flags: &[&str]) -> Option<std::path::PathBuf> {
    if let Some(dir) = std::env::var_os("GPU_TRACE_C_PROGRAMS") {
        return Some(std::path::Path::new(&dir).join(name));
    }
    let source = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/kernel")
        .join(format!("{name}.c"));
    let binary = std::env::temp_dir().join(format!("gpu-trace-{name}-{}", std::process::id()));
    let built = Command::new("cc")
        .args(flags)
        .args(["-static", "-O2", "-o"])
        .arg(&binary)
        .arg(&source)
        .output();
    match built {
        Ok(out) if out.status.success() => Some(binary),
        Ok(out) => {
            let why = format!(
                "cc {} -static {name}.c failed (gcc-multilib for -m32): {}",
                flags.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
            crate::skip::cannot_run(test, &why);
            None
        }
        Err(e) => {
            crate::skip::cannot_run(test, &format!("no C compiler: {e}"));
            None
        }
    }
}

/// Writes a copy of /proc/devices for GPU_TRACE_PROC_DEVICES: the NVIDIA
/// frontend, and nvidia-uvm once `uvm` is Some (its driver loaded). Renamed
/// into place, so that a reader never sees it half written.
pub fn write_proc_devices(path: &std::path::Path, uvm: Option<u32>) {
    let uvm_line = uvm.map(|m| format!("{m} nvidia-uvm\n")).unwrap_or_default();
    let text = format!(
        "Character devices:\n  1 mem\n195 nvidia-frontend\n{uvm_line}\nBlock devices:\n  8 sd\n"
    );
    let partial = path.with_extension("partial");
    std::fs::write(&partial, text).expect("write the /proc/devices copy");
    std::fs::rename(&partial, path).expect("rename the /proc/devices copy");
}

/// A node made under /dev/nvidia* for one test, removed on drop.
pub struct DevNode(pub std::path::PathBuf);

impl DevNode {
    pub fn create(major: u32, minor: u32, mode: u32) -> Self {
        let node = DevNode(std::path::PathBuf::from(format!(
            "/dev/nvidia-gpu-trace-test-{}",
            std::process::id()
        )));
        nix::sys::stat::mknod(
            &node.0,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::from_bits_truncate(mode),
            nix::sys::stat::makedev(major.into(), minor.into()),
        )
        .expect("mknod in /dev");
        // mknod applies the umask.
        std::fs::set_permissions(&node.0, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .expect("chmod");
        node
    }
}

impl Drop for DevNode {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// A C program of tests/kernel started inside `cgroup`, its stdout piped.
pub fn start_in_cgroup(cgroup: &std::path::Path, mut command: Command) -> std::process::Child {
    let _procs = gpu_trace::cgroup::spawn::place_child_in(&mut command, &[cgroup])
        .expect("place the program in the cgroup");
    command
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the program")
}

/// The number a C program of tests/kernel prints when it ends well.
pub fn printed_count(program: std::process::Child) -> u64 {
    let out = program.wait_with_output().expect("wait for the program");
    assert!(out.status.success(), "{:?}", out.status);
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .expect("a count")
}

/// The sum of `count` over records: how many problems they stand for.
pub fn total_count(records: &[Value]) -> u64 {
    records
        .iter()
        .map(|r| r["count"].as_u64().expect("a count"))
        .sum()
}

/// The host and the C programs `names` of tests/kernel, or None (said)
/// where `test` cannot run.
pub fn kernel_test_with_programs(
    test: &str,
    names: &[&str],
) -> Option<(Host, Vec<std::path::PathBuf>)> {
    let host = kernel_test(test)?;
    let programs = names
        .iter()
        .map(|name| c_program(test, name, &[]))
        .collect::<Option<Vec<_>>>()?;
    Some((host, programs))
}

/// /proc/driver as NVIDIA's driver writes it, for GPU_TRACE_PROC_DRIVER:
/// one `information` file per GPU, by (minor, UUID), each on its own bus.
pub fn proc_driver_with_gpus(gpus: &[(u32, &str)]) -> tempfile::TempDir {
    let root = temp_dir_named("gpu-trace-proc-driver-");
    for (minor, uuid) in gpus {
        let bus = format!("0000:{:02x}:00.0", 0x18 + minor);
        let dir = root.path().join("nvidia/gpus").join(&bus);
        fs::create_dir_all(&dir).expect("gpu dir");
        fs::write(
            dir.join("information"),
            format!("Model: \t\t NVIDIA A100-SXM4-40GB\nIRQ:   \t\t 42\nGPU UUID: \t\t {uuid}\nVideo BIOS: \t\t 92.00.45.00.03\nBus Type: \t\t PCIe\nDMA Size: \t\t 47 bits\nDMA Mask: \t\t 0x7fffffffffff\nBus Location: \t\t {bus}\nDevice Minor: \t\t {minor}\nGPU Excluded:\t\t No\n"),
        )
        .expect("information");
    }
    root
}

/// Ids of loaded programs that carry gpu-trace's program names.
pub fn gpu_trace_program_ids() -> std::collections::HashSet<u32> {
    let names: Vec<&str> = [
        &gpu_trace_common::program::DEVICE_HOOKS[..],
        &gpu_trace_common::program::OPEN_CALLS,
        &gpu_trace_common::program::OTHERS,
    ]
    .concat()
    .into_iter()
    .map(gpu_trace_common::program::as_loaded)
    .collect();
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|info| info.name_as_str().is_some_and(|n| names.contains(&n)))
        .map(|info| info.id())
        .collect()
}
