//! The systemd unit's sandbox, as far as a host without systemd as PID 1
//! can try it: `watch` under exactly the unit's CapabilityBoundingSet and
//! with no_new_privs (util-linux `setpriv`) reports a denial with the
//! policy that denied it; without CAP_SYS_ADMIN the same denial comes
//! without its policy, so the test does depend on the set.

use crate::common::*;

const UNIT: &str = include_str!("../../../contrib/gpu-trace.service");

/// Capability numbers (linux/capability.h) of the names the unit may use.
const CAPABILITIES: [(&str, u32); 7] = [
    ("CAP_DAC_READ_SEARCH", 2),
    ("CAP_NET_ADMIN", 12),
    ("CAP_SYS_PTRACE", 19),
    ("CAP_SYS_ADMIN", 21),
    ("CAP_SYS_RESOURCE", 24),
    ("CAP_PERFMON", 38),
    ("CAP_BPF", 39),
];

/// The unit's CapabilityBoundingSet, as names.
fn unit_capabilities() -> Vec<&'static str> {
    UNIT.lines()
        .find_map(|l| l.strip_prefix("CapabilityBoundingSet="))
        .expect("the unit bounds its capabilities")
        .split_whitespace()
        .collect()
}

/// `gpu-trace watch ARGS` with only `caps` and no_new_privs.
fn watch_with(caps: &[&str], args: &[&str]) -> Command {
    let keep: Vec<String> = caps
        .iter()
        .map(|c| format!("+{}", c.trim_start_matches("CAP_").to_lowercase()))
        .collect();
    let mut command = Command::new("setpriv");
    command
        .arg("--no-new-privs")
        .arg(format!("--bounding-set=-all,{}", keep.join(",")))
        .arg("--")
        .arg(gpu_trace())
        .arg("watch")
        .args(args);
    command
}

/// CapBnd of `pid`, from /proc.
fn bounding_mask(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .expect("CapBnd");
    u64::from_str_radix(hex.trim(), 16).expect("hex mask")
}

#[test]
fn watch_works_with_exactly_the_units_capabilities() {
    let host = or_skip!(kernel_test);
    let caps = unit_capabilities();
    let want: u64 = caps
        .iter()
        .map(|name| {
            let (_, bit) = CAPABILITIES
                .iter()
                .find(|(n, _)| n == name)
                .unwrap_or_else(|| panic!("{name}: add its number to CAPABILITIES"));
            1u64 << bit
        })
        .sum();
    let incident = Incident::new(&host, "service");
    let major = incident.uvm_major.to_string();
    let watcher = Watcher::spawn(watch_with(&caps, &["--format", "json", "--major", &major]));
    // setpriv exec'd gpu-trace: the process we hold is it, bounded as the unit
    // says (less what this machine's root lacks already: CAP_SYS_RESOURCE here).
    let ours = bounding_mask(std::process::id());
    assert_eq!(bounding_mask(watcher.child.id()), want & ours);
    let events = watcher.wait_for_events(incident.deny_once(), 1);
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = &events[0];
    // Attribution read the policy by id, which takes CAP_SYS_ADMIN.
    assert_eq!(event["denied_by"]["name"], "gt_scratch_dev", "{event:#}");
    assert_eq!(
        event["denied_by"]["id"].as_u64(),
        incident.policy.program_id().map(u64::from)
    );
    assert!(event["cause"].is_string(), "{event:#}");
    watcher.stop_cleanly();

    // Without CAP_SYS_ADMIN the denial is still seen, but the program that
    // denied it cannot be read by id: the capability is what names it.
    let less: Vec<&str> = caps
        .iter()
        .copied()
        .filter(|c| *c != "CAP_SYS_ADMIN")
        .collect();
    let watcher = Watcher::spawn(watch_with(&less, &["--format", "json", "--major", &major]));
    let events = watcher.wait_for_events(incident.deny_once(), 1);
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_ne!(
        events[0]["denied_by"]["name"], "gt_scratch_dev",
        "named without CAP_SYS_ADMIN: {:#}",
        events[0]
    );
    watcher.stop_cleanly();
}
