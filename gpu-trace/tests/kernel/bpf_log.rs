//! `--bpf-log`: each branch where the kernel programs drop, count instead
//! of sending, or cut is provoked, and its record must reach stderr with
//! `debug` and not with `off`, naming the process's ids.

use std::os::unix::fs::MetadataExt;

use nix::sys::stat::{makedev, mknod, Mode, SFlag};

use crate::{bounds::cycling_test, common::*};

/// The kernel programs' records among watch's stderr lines.
fn bpf_lines(stderr: &[String]) -> Vec<&String> {
    stderr
        .iter()
        .filter(|l| l.starts_with("gpu-trace: bpf: "))
        .collect()
}

/// The records at `debug`; at `off`, there must be none, and None.
fn records_at<'a>(level: &str, stderr: &'a [String]) -> Option<Vec<&'a String>> {
    let said = bpf_lines(stderr);
    if level == "off" {
        assert!(said.is_empty(), "records at off: {said:#?}");
        return None;
    }
    Some(said)
}

/// watch's arguments for a flood at `level`: every problem sent (no fold),
/// none written (--pid 1 hides them once received).
pub(crate) fn unfolded_and_hidden(level: &str) -> [&str; 8] {
    [
        "--format",
        "json",
        "--fold",
        "0",
        "--pid",
        "1",
        "--bpf-log",
        level,
    ]
}

fn cgroup_id(dir: &Path) -> u64 {
    fs::metadata(dir).expect("stat the cgroup").ino()
}

#[test]
fn a_path_cut_to_the_events_buffer_is_said_at_debug_and_not_at_off() {
    let incident = or_skip!(incident_test, "bpf-log-path-cut");
    // A denied node at a path longer than an event's 256 bytes.
    let scratch = tempfile::tempdir().expect("temp dir");
    let mut dir = scratch.path().to_path_buf();
    for part in ["a", "b", "c"] {
        dir.push(part.repeat(100));
    }
    fs::create_dir_all(&dir).expect("make the long directory");
    let node = dir.join("uvm");
    mknod(
        &node,
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(incident.uvm_major.into(), 0),
    )
    .expect("mknod the denied node");
    let open = [ProbeOp::Open {
        path: node.clone(),
        mode: OpenMode::ReadWrite,
    }];
    let id = cgroup_id(incident.cgroup.path());
    for level in ["debug", "off"] {
        let watcher = incident.watch(&["--format", "json", "--bpf-log", level]);
        let probe = run_probe(Path::new(gpu_trace()), &[&incident.cgroup], &open).expect("probe");
        assert_eq!(probe.results, [libc::EPERM]);
        thread::sleep(Duration::from_millis(1_500)); // a tick reads the records
        let stderr = watcher.stop_cleanly();
        let Some(said) = records_at(level, &stderr) else {
            continue;
        };
        let program = event_program(&stderr, MadeBy::OpenatExit);
        let expected = format!(
            "gpu-trace: bpf: debug: path-cut: path cut to the event's 256 bytes in {program}: pid {} cgroup {id} device {}:0",
            probe.pid, incident.uvm_major
        );
        assert_eq!(said, [&expected], "{stderr:#?}");
    }
}

#[test]
fn a_path_the_process_no_longer_maps_is_said_unread_at_debug_and_not_at_off() {
    let incident = or_skip!(incident_test, "bpf-log-path-unread");
    let unmap_path = or_skip!(c_program, "unmap_path", &["-pthread"]);
    let uvm = incident.nodes.path("nvidia-uvm");
    let id = cgroup_id(incident.cgroup.path());
    // Long enough at debug for the race to be won many times; off only
    // has to say nothing.
    for (level, millis) in [("debug", "2000"), ("off", "500")] {
        // Unfolded: every denial reads its path.
        let args = unfolded_and_hidden(level);
        let watcher = incident.watch(&args);
        let mut command = Command::new(&unmap_path);
        command.arg(&uvm).arg(millis);
        let child = start_in_cgroup(incident.cgroup.path(), command);
        let pid = child.id();
        assert!(printed_count(child) > 0, "no open reached the device check");
        thread::sleep(Duration::from_millis(1_500)); // a tick reads the records
        let stderr = watcher.stop_cleanly();
        let Some(said) = records_at(level, &stderr) else {
            continue;
        };
        let program = event_program(&stderr, MadeBy::OpenatExit);
        let expected = format!(
            "gpu-trace: bpf: debug: path-unread: sent without a path (error -14) in {program}: pid {pid} cgroup {id} device {}:0",
            incident.uvm_major
        );
        assert!(
            said.iter().any(|l| **l == expected),
            "no path-unread record: {said:#?}"
        );
    }
}

/// Whether watch reads its ring buffer while the cycler runs.
#[derive(Clone, Copy, PartialEq)]
enum Reader {
    Running,
    /// Stopped (SIGSTOP) until the cycler is done: nothing drains the ring
    /// meanwhile, so a flood longer than the ring fills it however fast
    /// this machine runs either side.
    Stopped,
}

/// `watch ARGS` while mknod_cycle cycles `minors` denied minors of the
/// incident's major in its cgroup for `seconds`: the cycler's pid, and
/// watch's stderr once a tick has read the records.
fn watch_a_cycle(
    incident: &Incident,
    mknod_cycle: &Path,
    args: &[&str],
    (minors, seconds): (&str, &str),
    reader: Reader,
) -> (u32, Vec<String>) {
    let watcher = incident.watch(args);
    let watcher_pid = Pid::from_raw(watcher.child.id() as i32);
    if reader == Reader::Stopped {
        kill(watcher_pid, Signal::SIGSTOP).expect("stop watch");
    }
    let scratch = tempfile::tempdir().expect("temp dir");
    let mut cycle = Command::new(mknod_cycle);
    cycle
        .arg(scratch.path().join("n"))
        .args([&incident.uvm_major.to_string(), minors, seconds]);
    let cycle = start_in_cgroup(incident.cgroup.path(), cycle);
    let pid = cycle.id();
    printed_count(cycle);
    if reader == Reader::Stopped {
        kill(watcher_pid, Signal::SIGCONT).expect("continue watch");
    }
    thread::sleep(Duration::from_millis(1_500));
    (pid, watcher.stop_cleanly())
}

#[test]
fn a_full_ring_buffer_is_said_at_debug_rate_limited_and_not_at_off() {
    let (incident, mknod_cycle) = or_skip!(cycling_test, "bpf-log-ring-full");
    let id = cgroup_id(incident.cgroup.path());
    for level in ["debug", "off"] {
        // A flood the ring buffer cannot take: more than it holds
        // (4 MiB, about 11 000 events), with nobody reading it.
        let args = unfolded_and_hidden(level);
        let (pid, stderr) = watch_a_cycle(
            &incident,
            &mknod_cycle,
            &args,
            ("2000", "3"),
            Reader::Stopped,
        );
        let (summary, count) = summary_counts(&stderr);
        assert!(count("lost") > 0, "the ring took them all: {summary}");
        let Some(said) = records_at(level, &stderr) else {
            continue;
        };
        // mknod, outside open calls: the device hook makes the events.
        let program = event_program(&stderr, MadeBy::DeviceHook);
        let prefix = format!(
            "gpu-trace: bpf: warn: ring-full: event lost in {program}: pid {pid} cgroup {id} device {}:",
            incident.uvm_major
        );
        let lost_lines = said.iter().filter(|l| l.starts_with(&prefix)).count();
        assert!(lost_lines > 0, "no ring-full record: {said:#?}");
        // The programs make at most 10 a second of the kind (a few more
        // where CPUs race for the last place): four seconds' worth over the
        // 3 s flood. watch prints at most 10 a second of what it reads, and
        // continued, reads them in one go, so fewer still reach stderr: this
        // bound holds either limit; the count below is the programs' own.
        assert!(
            lost_lines <= 50,
            "{lost_lines} ring-full records: not rate-limited"
        );
        // The programs made at most 10 a second and counted the rest.
        assert!(
            said.iter()
                .any(|l| l.contains("more ring-full records left out by the kernel programs")),
            "what the rate limit left out is not counted: {said:#?}"
        );
    }
}

#[test]
fn a_cgroup_past_its_kernel_budget_is_said_held_back_at_debug_and_not_at_off() {
    let (incident, mknod_cycle) = or_skip!(cycling_test, "bpf-log-held-back");
    let id = cgroup_id(incident.cgroup.path());
    for level in ["debug", "off"] {
        // The default fold window: past 64 first sightings in a window, a
        // cgroup's problems are counted in the kernel, by key.
        let args = ["--format", "json", "--bpf-log", level];
        let (pid, stderr) = watch_a_cycle(
            &incident,
            &mknod_cycle,
            &args,
            ("200", "1"),
            Reader::Running,
        );
        let Some(said) = records_at(level, &stderr) else {
            continue;
        };
        let program = event_program(&stderr, MadeBy::DeviceHook);
        let prefix = format!(
            "gpu-trace: bpf: debug: held-back: over its cgroup's budget, counted not sent in {program}: pid {pid} cgroup {id} device {}:",
            incident.uvm_major
        );
        assert!(
            said.iter().any(|l| l.starts_with(&prefix)),
            "no held-back record: {stderr:#?}"
        );
    }
}

/// What cgroup_fan is asked to do: make `cgroups` cgroups below the
/// incident's and, in each, mknod `minors` denied minors, `majors` majors
/// taken in turn from the incident's uvm major up, `pause_ms` between cgroups.
struct Fan {
    cgroups: u64,
    minors: u64,
    majors: u32,
    pause_ms: u64,
}

/// `watch ARGS` while cgroup_fan makes `fan`: the fanner's pid and watch's
/// stderr. The cgroups are removed.
fn watch_a_fan(
    incident: &Incident,
    cgroup_fan: &Path,
    args: &[&str],
    fan_of: &Fan,
) -> (u32, Vec<String>) {
    let Fan {
        cgroups,
        minors,
        majors,
        pause_ms,
    } = *fan_of;
    let watcher = incident.watch(args);
    let fan = incident.cgroup.path().join("fan");
    fs::create_dir(&fan).expect("make the tenant's cgroup");
    let scratch = tempfile::tempdir().expect("temp dir");
    let mut command = Command::new(cgroup_fan);
    command
        .arg(&fan)
        .arg(cgroups.to_string())
        .arg(scratch.path().join("n"))
        .arg(incident.uvm_major.to_string())
        .arg(minors.to_string())
        .arg(pause_ms.to_string())
        .arg(majors.to_string())
        .stdout(Stdio::piped());
    let child = command.spawn().expect("start cgroup_fan");
    let pid = child.id();
    assert_eq!(printed_count(child), cgroups * minors);
    thread::sleep(Duration::from_millis(1_500));
    let stderr = watcher.stop_cleanly();
    for c in 0..cgroups {
        let _ = fs::remove_dir(fan.join(format!("c{c}")));
    }
    let _ = fs::remove_dir(&fan);
    (pid, stderr)
}

/// A fan of `scene` (cgroups, minors, pause) under `--fold 60s` (a window
/// of a minute keeps every key in the tables) at debug, with `--pid 1`
/// keeping the lines out of the way: a record of the fanner's starting
/// `record` must be among the kernel's. At debug only: the fans are long
/// under emulation, and `off` is checked by the cheaper scenes above.
fn a_fan_fills(test: &str, fan: Fan, record: &str) {
    let Some((host, programs)) = kernel_test_with_programs(test, &["cgroup_fan"]) else {
        return;
    };
    let mut incident = Incident::new(&host, test);
    let mut args: Vec<String> = [
        "--format",
        "json",
        "--fold",
        "60s",
        "--pid",
        "1",
        "--bpf-log",
        "debug",
    ]
    .map(String::from)
    .into();
    // The uvm major is denied and watched already; the fan's others too.
    for major in (1..fan.majors).map(|k| incident.uvm_major + k) {
        incident
            .policy
            .set_rule(major, gpu_trace_common::ACCESS_MKNOD)
            .expect("deny the fan's major");
        args.extend(["--major".to_string(), major.to_string()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (pid, stderr) = watch_a_fan(&incident, &programs[0], &args, &fan);
    let said = records_at("debug", &stderr).expect("records at debug");
    // mknod, outside open calls: the device hook makes the events.
    let program = event_program(&stderr, MadeBy::DeviceHook);
    let prefix = format!("gpu-trace: bpf: {record} in {program}: pid {pid} cgroup ");
    assert!(
        said.iter().any(|l| l.starts_with(&prefix)),
        "no {record:?} record: {said:#?}"
    );
}

#[test]
fn a_full_repeats_table_is_said_at_debug() {
    // Each cgroup sends its 64 first sightings, and 300 of them are more
    // than the table's 16 384 keys, paced so that the ring buffer takes
    // them also under emulation, where watch reads a few thousand events
    // a second (a first sighting lost to the ring makes no key).
    a_fan_fills(
        test_name!(),
        Fan {
            cgroups: 300,
            minors: 64,
            majors: 1,
            pause_ms: 40,
        },
        "debug: repeats-full: repeats sent, not counted",
    );
}

#[test]
fn a_full_held_back_table_is_said_at_debug() {
    // Each of 72 cgroups sends its 64 first sightings, then denials of 64
    // majors in turn: a held-back key per major (a cgroup's own keys go up
    // to 64), 4 608 in all, more than the table's 4 096. Denials spread
    // over majors fill it with a fiftieth of the denials that one key per
    // cgroup took.
    a_fan_fills(
        test_name!(),
        Fan {
            cgroups: 72,
            minors: 128,
            majors: 64,
            pause_ms: 0,
        },
        "warn: held-back-full: event lost",
    );
}

#[test]
fn an_open_calls_entry_evicted_in_flight_is_said_at_debug() {
    let _host = or_skip!(kernel_test);
    let evict = or_skip!(c_program, "evict_in_flight", &["-pthread"]);
    let scratch = tempfile::tempdir().expect("temp dir");
    let fifo = scratch.path().join("fifo");
    nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).expect("mkfifo");
    // More new threads than the table of calls in flight holds (16 384).
    let threads = gpu_trace_common::IN_FLIGHT_CAPACITY + 1_000;
    // At debug only: the thread churn is long under emulation, and `off`
    // is checked by the cheaper scenes above. The syscall tracepoints: the
    // route that keeps an entry per call.
    let watcher = Watcher::start(&[
        "--format",
        "json",
        "--opens",
        "tracepoints",
        "--bpf-log",
        "debug",
    ]);
    let mut command = Command::new(&evict);
    command
        .arg(&fifo)
        .arg(threads.to_string())
        .stdout(Stdio::piped());
    let child = command.spawn().expect("start evict_in_flight");
    let pid = child.id();
    let tid = printed_count(child);
    thread::sleep(Duration::from_millis(1_500));
    let stderr = watcher.stop_cleanly();
    let said = records_at("debug", &stderr).expect("records at debug");
    // glibc's open() is the openat syscall.
    let program = event_program(&stderr, MadeBy::OpenatExit);
    let expected = format!(
        "gpu-trace: bpf: debug: in-flight-evicted: an open call's entry was gone at its exit, its result unseen in {program}: pid {pid} tid {tid}"
    );
    assert!(
        said.contains(&&expected),
        "{expected:?} not among {said:#?}"
    );
}
