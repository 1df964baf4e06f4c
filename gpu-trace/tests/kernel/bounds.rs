//! A tenant making the agent's own state large: many cgroups with long
//! paths. Each attack runs as an unprivileged user (uid 65534) in a
//! subtree delegated to it the way systemd delegates, against the real
//! binary, and asserts on what watch keeps and writes.

use std::os::unix::{
    fs::{chown, MetadataExt},
    process::CommandExt,
};

use gpu_trace::{cgroup::spawn::place_child_in, scenario::run_probe_in};

use crate::{common::*, memory_limit::MemoryLimit};

/// The tenant: nobody.
const TENANT: u32 = 65534;

/// The DaemonSet's memory limit, 64 Mi, in KiB.
const DAEMONSET_LIMIT_KIB: u64 = 64 * 1024;

/// A tree a tenant made in its delegated subtree: `depth` nested names of
/// `name_len` characters, then `fan_out` children at the bottom. Removed,
/// bottom first, on drop.
struct LongTree {
    top: PathBuf,
    bottom: PathBuf,
    children: usize,
}

impl LongTree {
    fn make(delegated: &Path, depth: usize, name_len: usize, fan_out: usize) -> Self {
        let nested: PathBuf = (0..depth)
            .map(|level| {
                format!("{level:x}")
                    .repeat(name_len)
                    .chars()
                    .take(name_len)
                    .collect::<String>()
            })
            .collect();
        let tenant = |dir: &Path| {
            let mut command = Command::new("mkdir");
            command.uid(TENANT).gid(TENANT).current_dir(dir);
            command
        };
        let bottom = delegated.join(&nested);
        if depth > 0 {
            let made = tenant(delegated)
                .arg("-p")
                .arg(&nested)
                .status()
                .expect("mkdir -p");
            assert!(made.success(), "the tenant made the nested names");
        }
        let names: Vec<String> = (0..fan_out).map(|i| format!("c{i}")).collect();
        for chunk in names.chunks(4_096) {
            let made = tenant(&bottom).args(chunk).status().expect("mkdir");
            assert!(made.success(), "the tenant made the fan-out");
        }
        let top = delegated.join(nested.iter().next().unwrap_or_default());
        Self {
            top,
            bottom,
            children: fan_out,
        }
    }
}

impl Drop for LongTree {
    fn drop(&mut self) {
        for i in 0..self.children {
            let _ = fs::remove_dir(self.bottom.join(format!("c{i}")));
        }
        let mut dir = self.bottom.clone();
        while dir.starts_with(&self.top) {
            let _ = fs::remove_dir(&dir);
            if !dir.pop() {
                break;
            }
        }
    }
}

/// Hands `dir` to the tenant as systemd does with Delegate=yes.
fn delegate(dir: &Path) {
    for file in [
        "",
        "cgroup.procs",
        "cgroup.threads",
        "cgroup.subtree_control",
    ] {
        chown(dir.join(file), Some(TENANT), Some(TENANT)).expect("chown for delegation");
    }
}

/// The incident in a cgroup named after `cgroup`, and mknod_cycle.c
/// built; None (said) where `test` cannot run.
pub(crate) fn cycling_test(test: &str, cgroup: &str) -> Option<(Incident, PathBuf)> {
    let (host, mut programs) = kernel_test_with_programs(test, &["mknod_cycle"])?;
    Some((Incident::new(&host, cgroup), programs.remove(0)))
}

/// The peak resident memory of a process so far, in KiB.
pub(crate) fn peak_rss_kib(pid: u32) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("read status")
        .lines()
        .find_map(|l| {
            l.strip_prefix("VmHWM:")?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .expect("VmHWM")
}

#[test]
fn a_tenants_tree_of_long_cgroup_paths_stays_out_of_watchs_memory() {
    let host = or_skip!(kernel_test);
    let incident = Incident::new(&host, "long-paths");
    let delegated = scratch_cgroup(&host, "long-paths-tenant");
    delegate(delegated.path());
    // 15 names of 250 characters (3.8 KB of path), then the fan-out: 20 000
    // here; 6 000 in the guests, whose 1 GiB and emulated CPU would spend
    // minutes on the rest, and where 6 000 already held ~90 MB before.
    let fan_out = if fexit_expected() { 6_000 } else { 20_000 };
    let tree = LongTree::make(delegated.path(), 15, 250, fan_out);

    let major = incident.uvm_major.to_string();
    let watcher = Watcher::start(&["--format", "json", "--fold", "0", "--major", &major]);
    let first = incident.deny_once();
    let second = incident.deny_once();
    let events = watcher.wait_for_events(second, 1);
    assert_eq!(events.len(), 1, "{events:#?}");
    let expected = Path::new("/").join(
        incident
            .cgroup
            .path()
            .strip_prefix(&host.cgroup2_mount)
            .expect("under the mount"),
    );
    assert_eq!(
        events[0]["cgroup"],
        expected.to_str().expect("utf-8"),
        "{:#}",
        events[0]
    );
    assert_eq!(watcher.events_of(first).len(), 1, "both denials written");
    let peak = peak_rss_kib(watcher.child.id());
    watcher.stop_cleanly();
    eprintln!("{fan_out} cgroups with 3.8 KB paths: watch's peak RSS {peak} KiB");
    assert!(
        peak < DAEMONSET_LIMIT_KIB,
        "watch's peak RSS {peak} KiB, over the DaemonSet's 64 Mi"
    );
    drop(tree);
}

#[test]
fn a_denial_above_many_empty_cgroups_does_not_stall_anothers_line() {
    let host = or_skip!(kernel_test);
    let incident = Incident::new(&host, "empty-cgroups");
    // The tenant's cgroup, below the incident's policy, above 100 000
    // empty cgroups of its own making (10 000 in the guests).
    let tenant_dir = incident.cgroup.path().join("tenant");
    fs::create_dir(&tenant_dir).expect("make the tenant's cgroup");
    delegate(&tenant_dir);
    let fan_out = if fexit_expected() { 10_000 } else { 100_000 };
    let tree = LongTree::make(&tenant_dir, 0, 0, fan_out);

    let major = incident.uvm_major.to_string();
    let watcher = Watcher::start(&["--format", "json", "--fold", "0", "--major", &major]);
    let uvm = [incident.open_rw("nvidia-uvm")];
    let tenants = run_probe_in(Path::new(gpu_trace()), &[&tenant_dir], &uvm).expect("probe");
    assert_eq!(tenants.results, [libc::EPERM]);
    // Another cgroup's denial, right behind the tenant's: its line must
    // not wait for anything done about the tenant's.
    let other = incident.deny_once();
    let denied = Instant::now();
    let events = watcher.wait_for_events(other, 1);
    let latency = denied.elapsed();
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(watcher.wait_for_events(tenants.pid, 1).len(), 1);
    watcher.stop_cleanly();
    eprintln!("{fan_out} empty cgroups below the tenant's: the next line took {latency:?}");
    assert!(
        latency < Duration::from_millis(500),
        "another cgroup's line took {latency:?} behind the tenant's denial"
    );
    drop(tree);
    let _ = fs::remove_dir(&tenant_dir);
}

#[test]
fn check_reads_hostile_cdi_specs_within_bounds_and_says_what_it_skipped() {
    let host = or_skip!(kernel_test);
    let specs = tempfile::tempdir().expect("temp dir");
    // Billion laughs with anchors named `&.N`: nine levels of nine copies.
    let mut laughs = String::from("l0: &.0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
    for level in 1..=9 {
        let alias = format!("*.{}", level - 1);
        let row = [alias.as_str(); 9].join(", ");
        laughs += &format!("l{level}: &.{level} [{row}]\n");
    }
    fs::write(specs.path().join("laughs.yaml"), laughs + "kind: x\n").expect("write");
    // 1.5 million nested sequences.
    fs::write(specs.path().join("deep.yaml"), "- ".repeat(1_500_000)).expect("write");
    // A well-formed spec, but the tenant's.
    let tenants = specs.path().join("tenant.json");
    fs::write(&tenants, r#"{"kind":"nvidia.com/gpu","devices":[]}"#).expect("write");
    chown(&tenants, Some(TENANT), Some(TENANT)).expect("chown");

    let cgroup = scratch_cgroup(&host, "cdi-bounds");
    let relative = cgroup.relative_path().to_str().expect("UTF-8").to_string();
    let dir = specs.path().to_str().expect("UTF-8");
    let started = Instant::now();
    let (_, report) = check_json_with(&["--cgroup", &relative, "--cdi-dir", dir], None);
    let took = started.elapsed();
    let unreadable: Vec<String> = report["cdi"]["unreadable"]
        .as_array()
        .unwrap_or_else(|| panic!("cdi.unreadable: {report:#}"))
        .iter()
        .map(|u| u.as_str().expect("a string").to_string())
        .collect();
    let said = |file: &str, why: &str| {
        let path = specs.path().join(file);
        assert!(
            unreadable
                .iter()
                .any(|u| u == &format!("{}: {why}", path.display())),
            "{file}: {why}: {unreadable:#?}"
        );
    };
    said(
        "laughs.yaml",
        "YAML anchors or aliases, which CDI specs do not use",
    );
    said(
        "deep.yaml",
        "nested deeper than 32 levels, which no spec is",
    );
    said("tenant.json", "skipped: owned by uid 65534, not root");
    eprintln!("check read the hostile specs in {took:?}");
    assert!(took < Duration::from_secs(20), "check took {took:?}");
}

#[test]
fn a_tenant_cycling_minors_stays_within_the_budget_and_leaves_room_for_others() {
    let (incident, mknod_cycle) = or_skip!(cycling_test, "minor-cycle");
    // Another cgroup below the same policy, denied once mid-flood.
    let other = incident.cgroup.path().join("other");
    fs::create_dir(&other).expect("make the other cgroup");
    const SECONDS: u64 = 4;
    const PER_CGROUP: u64 = 20;
    let major = incident.uvm_major.to_string();
    let watcher = incident.watch(&[
        "--format",
        "json",
        "--fold",
        "1s",
        "--budget-per-cgroup",
        &PER_CGROUP.to_string(),
        "--budget",
        "100",
    ]);
    // 2 000 minors of the denied major, over and over: each a problem of
    // its own that repeats every window.
    let scratch = tempfile::tempdir().expect("temp dir");
    let node = scratch.path().join("n");
    let mut command = Command::new(mknod_cycle);
    command
        .arg(&node)
        .args([major.as_str(), "2000", &SECONDS.to_string()]);
    let tenant = start_in_cgroup(incident.cgroup.path(), command);
    let tenant_pid = tenant.id();
    std::thread::sleep(Duration::from_secs(SECONDS / 2));
    let uvm = [incident.open_rw("nvidia-uvm")];
    let victim = run_probe_in(Path::new(gpu_trace()), &[&other], &uvm).expect("probe");
    assert_eq!(victim.results, [libc::EPERM]);
    let victims_line = Instant::now();
    let victim_events = watcher.wait_for_events(victim.pid, 1);
    let waited = victims_line.elapsed();
    let refused = printed_count(tenant);
    std::thread::sleep(Duration::from_millis(1_500)); // the last window's records
    let (status, stderr, tenants) = watcher.stop_with_events(tenant_pid);
    assert!(status.success(), "{stderr:#?}");
    let (summary, count) = summary_counts(&stderr);

    // The other cgroup's new problem has a line of its own, at once.
    assert_eq!(victim_events.len(), 1, "{victim_events:#?}");
    assert_eq!(victim_events[0]["kind"], "event", "{:#}", victim_events[0]);
    assert!(
        waited < Duration::from_secs(2),
        "the other line took {waited:?}"
    );
    // The tenant: at most its budget per window, plus a summary, over the
    // windows it ran in (and the one closing as watch stopped), and exact.
    let windows = SECONDS + 3;
    eprintln!(
        "{refused} refused mknods: {} records in {windows} windows; {summary}",
        tenants.len()
    );
    assert!(
        tenants.len() as u64 <= windows * (PER_CGROUP + 1),
        "{} records from one cgroup in {windows} windows of budget {PER_CGROUP}",
        tenants.len()
    );
    let written = total_count(&tenants);
    assert_eq!(written + count("lost") as u64, refused, "{summary}");
    let _ = fs::remove_dir(&other);
}

#[test]
fn under_every_attack_at_once_watch_stays_small_and_a_steady_stream_loses_nothing() {
    let (host, programs) = or_skip!(kernel_test_with_programs, &["mknod_cycle", "open_paced"]);
    let [mknod_cycle, open_paced] = &programs[..] else {
        unreachable!("two programs")
    };
    let guest = fexit_expected();
    let incident = Incident::new(&host, "all-at-once");
    // The long paths, in a subtree of the tenant's own.
    let delegated = scratch_cgroup(&host, "all-at-once-tenant");
    delegate(delegated.path());
    let long = LongTree::make(
        delegated.path(),
        15,
        250,
        if guest { 6_000 } else { 20_000 },
    );
    // The tenant's cgroup below the policy, above its empty cgroups.
    let tenant_dir = incident.cgroup.path().join("tenant");
    fs::create_dir(&tenant_dir).expect("make the tenant's cgroup");
    delegate(&tenant_dir);
    let empty = LongTree::make(&tenant_dir, 0, 0, if guest { 10_000 } else { 100_000 });
    let other = incident.cgroup.path().join("other");
    fs::create_dir(&other).expect("make the other cgroup");

    // watch as shipped: the default fold window (5 s) and budgets, held
    // to the DaemonSet's memory limit.
    let limit = MemoryLimit::new(
        &host.cgroup2_mount,
        &format!("gpu-trace-test-all-at-once-memory-{}", std::process::id()),
        DAEMONSET_LIMIT_KIB * 1024,
    );
    let major = incident.uvm_major.to_string();
    let mut watch = Command::new(gpu_trace());
    watch.args(["watch", "--format", "json", "--major", &major]);
    let _procs = place_child_in(&mut watch, &[limit.dir()]).expect("watch in the memory cgroup");
    let mut watcher = Watcher::spawn(watch);
    let scratch = tempfile::tempdir().expect("temp dir");
    let mut cycle = Command::new(mknod_cycle);
    cycle
        .arg(scratch.path().join("n"))
        .args([major.as_str(), "2000", "6"]);
    let cycle = start_in_cgroup(&tenant_dir, cycle);
    let uvm = [incident.open_rw("nvidia-uvm")];
    let above_empty = run_probe_in(Path::new(gpu_trace()), &[&tenant_dir], &uvm).expect("probe");
    assert_eq!(above_empty.results, [libc::EPERM]);
    // The steady stream: 2 000 denials/s for 5 s from another cgroup.
    let mut stream = Command::new(open_paced);
    stream
        .arg(incident.nodes.path("nvidia-uvm"))
        .args(["10000", "2000"]);
    let started = Instant::now();
    let stream = start_in_cgroup(&other, stream);
    let stream_pid = stream.id();
    let first_line = watcher.wait_for_events(stream_pid, 1);
    let latency = started.elapsed();
    let streamed = printed_count(stream);
    let cycled = printed_count(cycle);
    let peak = peak_rss_kib(watcher.child.id());
    // The stream's last window closes 5 s after it began.
    std::thread::sleep(Duration::from_millis(6_500));
    assert!(
        watcher
            .child
            .try_wait()
            .is_ok_and(|status| status.is_none()),
        "watch died"
    );
    let (status, stderr, events) = watcher.stop_with_events(stream_pid);
    assert!(status.success(), "{stderr:#?}");
    assert_eq!(limit.oom_kills(), 0, "killed at the DaemonSet's limit");
    let (summary, count) = summary_counts(&stderr);
    let charged = limit.peak_bytes().map(|b| b / 1024);
    eprintln!(
        "all at once: the stream's first line after {latency:?}; {streamed} streamed, {cycled} cycled; watch's peak RSS {peak} KiB, peak charged to its memory cgroup {charged:?} KiB; {summary}"
    );
    assert_eq!(first_line.len(), 1, "{first_line:#?}");
    assert!(
        latency < Duration::from_secs(2),
        "the stream's first line took {latency:?}"
    );
    assert_eq!(count("lost"), 0, "{summary}");
    let reported = total_count(&events);
    assert_eq!(
        reported, streamed,
        "every denial of the stream, counted: {summary}"
    );
    assert!(peak < DAEMONSET_LIMIT_KIB, "watch's peak RSS {peak} KiB");
    drop((long, empty));
    for dir in [&tenant_dir, &other] {
        let _ = fs::remove_dir(dir);
    }
}

#[test]
fn ten_tenants_cycling_minors_leave_the_ring_and_the_fold_table_to_an_eleventh() {
    let (incident, mknod_cycle) = or_skip!(cycling_test, "ten-tenants");
    let scratch = tempfile::tempdir().expect("temp dir");
    let major = incident.uvm_major.to_string();
    let watcher = incident.watch(&["--format", "json", "--fold", "1s"]);
    // Ten cgroups below the policy, each cycling 2 000 minors of the
    // denied major: 20 000 problems a window, more than the kernel folds.
    let tenants: Vec<(PathBuf, std::process::Child)> = (0..10)
        .map(|n| {
            let dir = incident.cgroup.path().join(format!("tenant{n}"));
            fs::create_dir(&dir).expect("make a tenant's cgroup");
            let mut cycle = Command::new(&mknod_cycle);
            cycle
                .arg(scratch.path().join(format!("n{n}")))
                .args([major.as_str(), "2000", "5"]);
            let child = start_in_cgroup(&dir, cycle);
            (dir, child)
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    // The eleventh: one new denial, mid-flood.
    let eleventh = incident.cgroup.path().join("eleventh");
    fs::create_dir(&eleventh).expect("make the eleventh cgroup");
    let uvm = [incident.open_rw("nvidia-uvm")];
    let victim = run_probe_in(Path::new(gpu_trace()), &[&eleventh], &uvm).expect("probe");
    assert_eq!(victim.results, [libc::EPERM]);
    let victim_events = watcher.wait_for_events(victim.pid, 1);
    let refused: u64 = tenants
        .into_iter()
        .map(|(_, child)| printed_count(child))
        .sum();
    std::thread::sleep(Duration::from_millis(3_500)); // the last windows' counts
    let (status, stderr) = watcher.stop();
    assert!(status.success(), "{stderr:#?}");
    let (summary, count) = summary_counts(&stderr);
    eprintln!("ten tenants: {refused} refused mknods; {summary}");
    assert_eq!(victim_events.len(), 1, "the eleventh's line: {summary}");
    assert_eq!(victim_events[0]["kind"], "event", "{:#}", victim_events[0]);
    assert_eq!(count("lost"), 0, "{summary}");
    assert_eq!(
        count("denied") as u64,
        refused + 1,
        "every denial counted: {summary}"
    );
    for n in 0..10 {
        let _ = fs::remove_dir(incident.cgroup.path().join(format!("tenant{n}")));
    }
    let _ = fs::remove_dir(&eleventh);
}

#[test]
fn events_lost_to_a_full_ring_are_counted_by_cgroup_and_named() {
    let (incident, mknod_cycle) = or_skip!(cycling_test, "lost-by-cgroup");
    // Every problem sent (no fold), none written (--pid 1 hides them after
    // they are received): a flood the ring buffer cannot take.
    let watcher = incident.watch(&["--format", "json", "--fold", "0", "--pid", "1"]);
    let scratch = tempfile::tempdir().expect("temp dir");
    let major = incident.uvm_major.to_string();
    let mut flood = Command::new(&mknod_cycle);
    flood
        .arg(scratch.path().join("n"))
        .args([major.as_str(), "2000", "2"]);
    let refused = printed_count(start_in_cgroup(incident.cgroup.path(), flood));
    std::thread::sleep(Duration::from_millis(1_500)); // a tick reports them
    let stderr = watcher.stop_cleanly();
    let (summary, count) = summary_counts(&stderr);
    let lost = count("lost") as u64;
    assert!(
        lost > 0,
        "{refused} refused; the ring took them all: {summary}"
    );
    // Named in lines like "... lost 123 of cgroup /x (id 9), 4 of cgroup /y (id 10)".
    let id = fs::metadata(incident.cgroup.path()).expect("stat").ino();
    let ours = format!(
        " of cgroup {} (id {id})",
        incident.cgroup.relative_path().display()
    );
    let named: u64 = stderr
        .iter()
        .filter_map(|l| l.strip_prefix("gpu-trace: the ring buffer was full; lost"))
        .flat_map(|l| l.split(','))
        .filter_map(|part| part.trim_end().strip_suffix(ours.as_str()))
        .map(|n| n.trim().parse::<u64>().expect("a count"))
        .sum();
    assert_eq!(
        named, lost,
        "every lost event named by its cgroup: {stderr:#?}"
    );
}
