//! The device hooks: which one start-up picks, the fallbacks, and every
//! hook the kernel loads reporting the same events for the same accesses.

use aya::util::KernelVersion;
use gpu_trace::{host::v1_device_limits::V1DeviceLimits, model::access::VerdictSource};
use gpu_trace_common::program;

use crate::common::*;

/// Whether this kernel loads and attaches the fexit hook.
fn fexit_loads() -> bool {
    forced_hook_loads(&["--hook", "fexit"], "fexit devcgroup_check_permission")
}

fn verdict_source_line(source: VerdictSource) -> String {
    format!("gpu-trace: verdict source: {}", source.describe())
}

/// The cgroup_device observer with bpf_get_retval, the hook where fexit is
/// refused: how start-up names it, and the verdict source it announces.
const OBSERVER: (&str, VerdictSource) = ("cgroup_device observer at", VerdictSource::BpfRetval);

/// Asserts that start-up's announcement names `active` as the hook in place.
#[track_caller]
fn assert_hook_active(stderr: &[String], active: &str) {
    assert!(
        says(stderr, "gpu-trace: hook active:", active),
        "{active} active: {stderr:#?}"
    );
}

/// What `watch ARGS` says on stderr until it is ready (then it is stopped).
fn announcement(args: &[&str]) -> Vec<String> {
    Watcher::start(args).stderr_seen.clone()
}

#[test]
fn auto_picks_fexit_where_the_kernel_loads_it_and_says_so() {
    let _host = or_skip!(kernel_test);
    let fexit = fexit_loads();
    let stderr = announcement(&["--format", "json", "--opens", "full"]);
    assert_hooks_in_place(&stderr);
    let (active, source) = if fexit {
        ("fexit devcgroup_check_permission", VerdictSource::Fexit)
    } else {
        OBSERVER
    };
    assert_hook_active(&stderr, active);
    if !fexit {
        assert!(
            says(&stderr, "gpu-trace: hook refused: fexit", ""),
            "says once that fexit was refused: {stderr:#?}"
        );
    }
    // Kernels before 6.1 also refuse the observer with bpf_get_retval; that
    // case is the next test's.
    if fexit || KernelVersion::current().expect("kernel version") >= KernelVersion::new(6, 1, 0) {
        assert!(stderr.contains(&verdict_source_line(source)), "{stderr:#?}");
    }
}

/// Names of gpu-trace's syscall tracepoint programs loaded right now.
fn loaded_syscall_tracepoint_programs() -> Vec<String> {
    let ours: Vec<&str> = program::OPEN_CALLS[..6]
        .iter()
        .map(|name| program::as_loaded(name))
        .collect();
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter_map(|info| info.name_as_str().map(str::to_string))
        .filter(|name| ours.contains(&name.as_str()))
        .collect()
}

#[test]
fn auto_traces_open_calls_by_the_cheapest_route_that_sees_what_this_host_can_deny() {
    let _host = or_skip!(kernel_test);
    let fexit_opens = fexit_opens_load();
    let fexit = fexit_loads();
    let watcher = Watcher::start(&["--format", "json"]);
    let ready = watcher
        .stderr_seen
        .iter()
        .find(|l| l.starts_with("gpu-trace: ready:"))
        .expect("ready line")
        .clone();
    let tracepoint_programs = loaded_syscall_tracepoint_programs();
    drop(watcher);
    let v1 = V1DeviceLimits::read();
    let (expected, tracepoints) = if fexit_opens {
        (
            format!(
                "; open results traced by fexit {}: only open calls pay",
                program::OPEN_FUNCTION
            ),
            false,
        )
    } else if fexit {
        (
            "; open results not traced (fexit on the device check sees cgroup v1 denials too)"
                .to_string(),
            false,
        )
    } else if v1.may_deny() {
        (
            format!(
                "; open results traced by the syscall tracepoints, needed because no BPF trampolines for fexit, and {}",
                v1.describe()
            ),
            true,
        )
    } else {
        (
            format!(
                "; open results not traced (no BPF trampolines for fexit, and {})",
                v1.describe()
            ),
            false,
        )
    };
    assert!(ready.contains(&expected), "{expected:?} in {ready:?}");
    assert_eq!(
        !tracepoint_programs.is_empty(),
        tracepoints,
        "syscall tracepoint programs loaded: {tracepoint_programs:?}; {ready}"
    );
}

#[test]
fn observer_takes_the_verdict_from_the_errno_where_the_kernel_has_no_bpf_get_retval() {
    let _host = or_skip!(kernel_test);
    let stderr = announcement(&["--hook", "observer", "--format", "json"]);
    let kernel = KernelVersion::current().expect("kernel version");
    let retval_refused = says(
        &stderr,
        "gpu-trace: hook refused: cgroup_device observer with bpf_get_retval",
        "",
    );
    // bpf_get_retval for device programs arrived in 5.18, the thread id the
    // observer needs in 6.1: the fallback below 6.1, the observer from it.
    if kernel < KernelVersion::new(5, 18, 0) {
        assert!(retval_refused, "{kernel}: {stderr:#?}");
    }
    if kernel >= KernelVersion::new(6, 1, 0) {
        assert!(!retval_refused, "{kernel}: {stderr:#?}");
    }
    let (active, source) = if retval_refused {
        ("(without bpf_get_retval)", VerdictSource::Errno)
    } else {
        OBSERVER
    };
    assert_hook_active(&stderr, active);
    assert!(stderr.contains(&verdict_source_line(source)), "{stderr:#?}");
}

/// What must not depend on the hook: everything but times, ids and the
/// name of the verdict's source.
fn hook_independent(mut event: Value) -> Value {
    let object = event.as_object_mut().expect("JSON object");
    for field in [
        "time",
        "first_seen",
        "last_seen",
        "pid",
        "tid",
        "verdict_from",
    ] {
        object.remove(field);
    }
    event
}

#[test]
fn every_device_hook_reports_the_same_events() {
    let host = or_skip!(kernel_test);
    let fexit = fexit_loads();
    let hooks: &[&str] = if fexit {
        &["fexit", "observer", "errno-observer"]
    } else {
        &["observer", "errno-observer"]
    };
    // Every device hook with every open route that sees the open's result.
    let routes: &[&str] = if fexit_opens_load() {
        &["fexit", "tracepoints"]
    } else {
        &["tracepoints"]
    };
    let incident = Incident::new(&host, "same");
    // Allowed first, so that every run diagnoses the denial alike (the
    // frontend was seen allowed).
    let ops = [
        incident.open_rw("nvidia0"),
        incident.open_rw("nvidia-uvm"),
        incident.open_rw("nvidiactl"),
    ];
    let mut runs = Vec::new();
    // The errno observer needs each open's entry, which fexit on the open
    // function does not see: that pair is refused (see below). Before 6.1
    // the observer is the errno observer too.
    let observer_is_errno = says(
        &announcement(&["--hook", "observer", "--opens", "tracepoints"]),
        "gpu-trace: hook active:",
        "(without bpf_get_retval)",
    );
    let errno_hook =
        |hook: &str| hook == "errno-observer" || (hook == "observer" && observer_is_errno);
    for (&hook, &route) in hooks
        .iter()
        .flat_map(|hook| routes.iter().map(move |route| (hook, route)))
        .filter(|&(&hook, &route)| !(errno_hook(hook) && route == "fexit"))
    {
        let watcher = incident.watch(&[
            "--hook", hook, "--opens", route, "--format", "json", "--all", "--fold", "0",
        ]);
        let child = run_probe(Path::new(gpu_trace()), &[&incident.cgroup], &ops)
            .expect("run probe in scratch cgroup");
        assert_eq!(
            child.results,
            [libc::ENXIO, libc::EPERM, libc::ENXIO],
            "no driver behind 195 (ENXIO); the policy denies the uvm stand-in"
        );
        let events = watcher.wait_for_events(child.pid, ops.len());
        let (status, stderr) = watcher.stop();
        assert!(status.success(), "{hook}: {status}: {stderr:#?}");
        assert_eq!(events.len(), ops.len(), "{hook}: {events:#?}");
        let expected: &[&str] = match hook {
            "fexit" => &["fexit"],
            "observer" => &["bpf_get_retval", "errno"],
            _ => &["errno"],
        };
        for event in &events {
            assert!(
                expected.contains(&event["verdict_from"].as_str().unwrap_or("")),
                "{hook}: {event:#}"
            );
        }
        runs.push((
            format!("--hook {hook} --opens {route}"),
            events.into_iter().map(hook_independent).collect::<Vec<_>>(),
        ));
    }
    if routes.contains(&"fexit") {
        let refused = Command::new(gpu_trace())
            .args([
                "run",
                "--hook",
                "errno-observer",
                "--opens",
                "fexit",
                "--",
                "true",
            ])
            .output()
            .expect("run gpu-trace run");
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert_eq!(refused.status.code(), Some(6), "{stderr}");
        assert!(
            stderr.contains("the errno observer needs each open's entry"),
            "{stderr}"
        );
    }
    let (first, reference) = &runs[0];
    for (hook, events) in &runs[1..] {
        assert_eq!(
            reference, events,
            "{first} (left) and {hook} (right) disagree"
        );
    }
    let denied = &reference[1];
    assert_eq!(denied["verdict"], "denied");
    assert_eq!(denied["verdict_source"], "cgroup-bpf");
    assert_eq!(denied["bpf_retval"], -1);
    assert_eq!(denied["major"], incident.uvm_major);
    assert_eq!(
        denied["denied_by"]["id"],
        incident.policy.program_id().expect("policy id")
    );
    assert_eq!(reference[0]["verdict"], "allowed");
}
