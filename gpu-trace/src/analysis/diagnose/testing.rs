//! What the causes' tests share: a diagnoser with /proc/devices as the
//! analysis tests give it, a culprit program, hostile names.

use std::rc::Rc;

use crate::{
    analysis::test_support::PROC_DEVICES,
    model::{
        denied_by::DeniedBy,
        diagnosis::Diagnosis,
        policy_writer::{Manager, PolicyWriter},
        record::Record,
        rendered::Rendered,
    },
};
/// What the causes' tests name again and again (the record, the diagnoser,
/// the /proc/devices it reads, the verdict and the cause), so that with
/// `use crate::analysis::diagnose::testing::*` each imports only its own.
pub use crate::{
    analysis::{diagnose::Diagnoser, test_support::record},
    host::proc_devices::CharMajors,
    model::{access::Verdict, diagnosis::Cause},
};

/// A Docker container's scope under the systemd cgroup driver.
pub const DOCKER_SCOPE: &str =
    "/system.slice/docker-3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8.scope";

/// A pod's container under the kubelet's systemd cgroup driver.
pub const KUBEPODS_SCOPE: &str = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0a1b2c3d_1111_4000_8000_000000000001.slice/cri-containerd-3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8.scope";

/// The same container's cgroup under Docker's cgroupfs driver.
pub const DOCKER_CGROUPFS: &str =
    "/docker/3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";

/// Names a tenant may give its cgroup (root in an LXC container, a
/// delegated systemd subtree) or the path it opens.
pub const HOSTILE: [&str; 4] = [
    "$(touch${IFS}pwned)",
    "x;echo>pwned",
    "a'b`echo>pwned`",
    "-n$(echo>pwned)",
];

/// An open of `path` (c major:minor) from `cgroup` that a BPF policy denied.
pub fn denied(cgroup: &str, path: &str, major: u32, minor: u32) -> Record {
    record(
        cgroup,
        path,
        major,
        minor,
        Verdict::DeniedByBpfPolicy,
        -libc::EPERM,
    )
}

/// An open of `path` (c major:minor) from `cgroup` that failed with
/// `errno` before any device check (the node's mode, a missing node).
pub fn failed_before_check(cgroup: &str, path: &str, major: u32, minor: u32, errno: i32) -> Record {
    record(
        cgroup,
        path,
        major,
        minor,
        Verdict::FailedBeforeDeviceCheck,
        -errno,
    )
}

/// An open of `path` (c major:minor) that the device check allowed and
/// that still failed with `errno` (a node no driver answers: ENXIO).
pub fn allowed_failing(cgroup: &str, path: &str, major: u32, minor: u32, errno: i32) -> Record {
    record(cgroup, path, major, minor, Verdict::Allowed, -errno)
}

pub fn diagnose(d: &mut Diagnoser, r: &Record) -> Option<Rc<Diagnosis>> {
    d.diagnose(r, &CharMajors::parse(PROC_DEVICES), 0, None, None)
}

/// The diagnosis a fresh diagnoser gives; panics when there is none.
pub fn diagnosis_of(r: &Record) -> Rc<Diagnosis> {
    diagnose(&mut Diagnoser::default(), r).expect("a diagnosis")
}

/// The diagnosis a fresh diagnoser gives, asserted to name `cause`.
#[track_caller]
pub fn diagnosis_naming(r: &Record, cause: Cause) -> Rc<Diagnosis> {
    diagnosed_as(&mut Diagnoser::default(), r, cause)
}

/// The diagnosis `d` gives, asserted to name `cause`.
#[track_caller]
pub fn diagnosed_as(d: &mut Diagnoser, r: &Record, cause: Cause) -> Rc<Diagnosis> {
    let diag = diagnose(d, r).expect("a diagnosis");
    assert_eq!(diag.cause, cause);
    diag
}

/// A program attached at `attached_at`, written by `manager`.
pub fn by_program(attached_at: &str, manager: Manager) -> Rc<Rendered<DeniedBy>> {
    Rc::new(Rendered::new(DeniedBy::Program {
        id: 77,
        name: "sd_devices".into(),
        tag: "ab12".into(),
        attached_at: attached_at.into(),
        loaded_at: "2026-11-30T06:00:00Z".into(),
        loaded_boot_ns: 0,
        allowed_by: Vec::new(),
        writer: Some(PolicyWriter {
            manager,
            evidence: "pid 1 (systemd) holds it open".into(),
            pid: Some(1),
            comm: Some("systemd".into()),
            loaded_at: "2026-11-30T06:00:00Z".into(),
            trigger: None,
        }),
    }))
}

/// Asserts that `text` contains `part`, showing `text` when it does not.
#[track_caller]
pub fn assert_has(text: &str, part: &str) {
    assert!(text.contains(part), "{part:?} not in {text:?}");
}

/// Asserts that `text` starts with `prefix`, showing `text` when it does not.
#[track_caller]
pub fn assert_starts(text: &str, prefix: &str) {
    assert!(text.starts_with(prefix), "{text}");
}
