//! Kernel records decoded into typed device accesses.

use gpu_trace_common::{
    DeviceAccessEvent, DeviceFields, DEV_TYPE_BLOCK, FLAG_DEVICE_SEEN, FLAG_HAS_SYSCALL,
    FLAG_PATH_CHANGED, FLAG_PATH_FROM_REGS, FLAG_PATH_TRUNCATED, SYSCALL_ACCESS, SYSCALL_CREAT,
    SYSCALL_FACCESSAT, SYSCALL_FACCESSAT2, SYSCALL_MKNOD, SYSCALL_MKNODAT, SYSCALL_OPEN,
    SYSCALL_OPENAT, SYSCALL_OPENAT2,
};

/// What decided an access, as far as gpu-trace can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    Allowed,
    /// A cgroup BPF device policy returned deny (seen with bpf_get_retval).
    DeniedByBpfPolicy,
    /// The BPF policies allowed it, yet the open failed with EPERM: a check
    /// after them refused it (cgroup v1 devices.list, or an LSM).
    DeniedAfterBpf,
    /// Denied, by which layer not yet known: the verdict came from fexit or
    /// the errno. Attribution settles it by evaluating the BPF policies.
    DeniedLayerUnknown,
    /// An open of /dev/nvidia* failed before any device check: the node is
    /// missing (ENOENT) or its file mode refused the caller (EACCES).
    FailedBeforeDeviceCheck,
    /// The device check allowed it, yet the open failed with EACCES: a
    /// security module (SELinux, AppArmor) checks after it.
    DeniedAfterDeviceCheck,
}

impl Verdict {
    /// Refused by a device policy (BPF or not).
    pub fn is_denied(self) -> bool {
        matches!(
            self,
            Verdict::DeniedByBpfPolicy
                | Verdict::DeniedAfterBpf
                | Verdict::DeniedLayerUnknown
                | Verdict::DeniedAfterDeviceCheck
        )
    }

    /// Anything a user needs to look at: a denial or a failed open of a GPU node.
    pub fn is_problem(self) -> bool {
        self != Verdict::Allowed
    }

    /// Stable name used in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::DeniedByBpfPolicy
            | Verdict::DeniedAfterBpf
            | Verdict::DeniedLayerUnknown
            | Verdict::DeniedAfterDeviceCheck => "denied",
            Verdict::FailedBeforeDeviceCheck => "failed",
        }
    }

    /// Stable name used in JSON output.
    pub fn source(self) -> &'static str {
        match self {
            Verdict::Allowed => "none",
            Verdict::DeniedByBpfPolicy => "cgroup-bpf",
            Verdict::DeniedAfterBpf => "not-bpf",
            Verdict::DeniedLayerUnknown => "unknown",
            Verdict::FailedBeforeDeviceCheck => "before-device-check",
            Verdict::DeniedAfterDeviceCheck => "security-module",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::DeniedByBpfPolicy => "by cgroup BPF device policy",
            Verdict::DeniedAfterBpf => "not by BPF policy: cgroup v1 devices.list or other",
            Verdict::DeniedLayerUnknown => "by a device policy",
            Verdict::FailedBeforeDeviceCheck => "before any device check",
            Verdict::DeniedAfterDeviceCheck => {
                "after the device check: a security module (SELinux, AppArmor)"
            }
        }
    }
}

/// Which device hook gave the verdicts (see device_hook.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerdictSource {
    /// fexit on devcgroup_check_permission: the kernel's final answer.
    Fexit,
    /// The observer's bpf_get_retval(): the BPF policies' answer.
    BpfRetval,
    /// The open call's errno (EPERM), on kernels whose device hook offers
    /// neither.
    Errno,
}

impl VerdictSource {
    /// Stable name used in JSON output.
    pub fn name(self) -> &'static str {
        match self {
            VerdictSource::Fexit => "fexit",
            VerdictSource::BpfRetval => "bpf_get_retval",
            VerdictSource::Errno => "errno",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            VerdictSource::Fexit => {
                "the kernel's final answer (fexit on devcgroup_check_permission): BPF policies and cgroup v1 alike"
            }
            VerdictSource::BpfRetval => {
                "the BPF policies' answer (bpf_get_retval in the observer); EPERM after it points at cgroup v1"
            }
            VerdictSource::Errno => {
                "the open's errno (this kernel's device hook has no bpf_get_retval); accesses outside open calls are not seen"
            }
        }
    }
}

/// The call that carried the access: an open, or (seen through the saved
/// registers) a mknod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenCall {
    pub syscall: &'static str,
    pub path: Vec<u8>,
    pub path_truncated: bool,
    /// Another thread rewrote the path buffer during the call: `path` is
    /// empty, and what was opened is known by its device only.
    pub path_changed: bool,
    /// File descriptor, or negative errno; None when the call's exit was not
    /// traced (an access outside a traced open, --device-hook-only).
    pub ret: Option<i32>,
}

impl OpenCall {
    /// The path for a person to read.
    pub fn shown_path(&self) -> String {
        if self.path_changed {
            "(path rewritten during the call)".into()
        } else {
            crate::text::terminal::printable(&self.path)
        }
    }

    pub fn errno(&self) -> Option<i32> {
        self.ret.filter(|&ret| ret < 0).map(|ret| -ret)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceAccess {
    pub boot_ns: u64,
    pub pid: u32,
    pub tid: u32,
    pub uid: u32,
    pub comm: Vec<u8>,
    pub cgroup_id: u64,
    /// The kernfs id of its v1 devices cgroup, read by the kernel at the
    /// sighting; None where there is no v1 devices hierarchy.
    pub v1_devices_cgroup: Option<u64>,
    /// The ids of the device programs in force on its cgroup2 cgroup, read
    /// by the kernel at a denial's sighting, 0 after the last; all 0 when
    /// not read.
    pub sighted_programs: [u32; gpu_trace_common::SIGHTED_PROGRAMS],
    /// False when the access never reached the device hook: the device
    /// fields below are then unknown (zero).
    pub device_seen: bool,
    /// Where no device was seen: the kernel's digest of the path, which
    /// its fold key holds instead of a device (DeviceFields::of_unresolved_path).
    pub path_digest: Option<u64>,
    pub block_device: bool,
    pub major: u32,
    pub minor: u32,
    /// `ACCESS_*` bits.
    pub access: u16,
    pub verdict: Verdict,
    /// The combined verdict of the BPF policies: 0 or a negative errno. Read
    /// by the observer (BpfRetval); otherwise worked out by attribution.
    pub bpf_retval: i32,
    pub verdict_from: VerdictSource,
    /// None when the access came from outside a traced open call (mknod, ...).
    pub open: Option<OpenCall>,
}

const EPERM: i32 = libc::EPERM;

impl DeviceAccess {
    pub fn decode(raw: &DeviceAccessEvent, verdict_from: VerdictSource) -> Self {
        let traced = raw.head.flags & FLAG_HAS_SYSCALL != 0;
        let open = (traced || raw.head.flags & FLAG_PATH_FROM_REGS != 0).then(|| OpenCall {
            syscall: match raw.head.syscall {
                SYSCALL_OPENAT => "openat",
                SYSCALL_OPENAT2 => "openat2",
                SYSCALL_OPEN => "open",
                SYSCALL_CREAT => "creat",
                SYSCALL_MKNOD => "mknod",
                SYSCALL_MKNODAT => "mknodat",
                SYSCALL_ACCESS => "access",
                SYSCALL_FACCESSAT => "faccessat",
                SYSCALL_FACCESSAT2 => "faccessat2",
                _ => "unknown",
            },
            path: until_nul(&raw.path).to_vec(),
            path_truncated: raw.head.flags & FLAG_PATH_TRUNCATED != 0,
            path_changed: raw.head.flags & FLAG_PATH_CHANGED != 0,
            ret: traced.then_some(raw.head.syscall_ret),
        });
        let device_seen = raw.head.flags & FLAG_DEVICE_SEEN != 0;
        // Where no device was seen, the kernel's fields hold the path's
        // digest (DeviceFields::of_unresolved_path), not a device.
        let device = if device_seen {
            raw.head.device
        } else {
            DeviceFields::NONE
        };
        let eperm = open.as_ref().is_some_and(|o| o.ret == Some(-EPERM));
        let eacces = open.as_ref().is_some_and(|o| o.ret == Some(-libc::EACCES));
        let by_bpf = verdict_from == VerdictSource::BpfRetval;
        let verdict = if !device_seen {
            Verdict::FailedBeforeDeviceCheck
        } else if by_bpf && raw.head.hook_verdict != 0 {
            Verdict::DeniedByBpfPolicy
        } else if by_bpf && eperm {
            Verdict::DeniedAfterBpf
        } else if raw.head.hook_verdict != 0 || eperm {
            Verdict::DeniedLayerUnknown
        } else if eacces {
            Verdict::DeniedAfterDeviceCheck
        } else {
            Verdict::Allowed
        };
        Self {
            boot_ns: raw.head.boot_ns,
            pid: raw.head.pid,
            tid: raw.head.tid,
            uid: raw.head.uid,
            comm: until_nul(&raw.comm).to_vec(),
            cgroup_id: raw.head.cgroup_id,
            v1_devices_cgroup: (raw.v1_devices_cgroup != 0).then_some(raw.v1_devices_cgroup),
            sighted_programs: raw.policy_programs,
            device_seen,
            path_digest: (!device_seen).then(|| raw.head.device.unresolved_path_digest()),
            block_device: device.dev_type == DEV_TYPE_BLOCK,
            major: device.major,
            minor: device.minor,
            access: device.access,
            verdict,
            bpf_retval: if by_bpf { raw.head.hook_verdict } else { 0 },
            verdict_from,
            open,
        }
    }

    /// "rw", "m", ... in the order of cgroup device rules.
    pub fn access_letters(&self) -> String {
        gpu_trace_policy::access_letters(self.access)
    }

    pub fn type_letter(&self) -> &'static str {
        if self.block_device {
            "b"
        } else {
            "c"
        }
    }
}

fn until_nul(bytes: &[u8]) -> &[u8] {
    bytes.split(|&b| b == 0).next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use gpu_trace_common::{DeviceFields, EventHead, ACCESS_READ, ACCESS_WRITE, DEV_TYPE_CHAR};

    use super::*;

    fn raw(hook_verdict: i32, ret: i32, with_syscall: bool) -> DeviceAccessEvent {
        let mut e = DeviceAccessEvent {
            head: EventHead {
                pid: 42,
                tid: 43,
                device: DeviceFields {
                    major: 511,
                    access: ACCESS_READ | ACCESS_WRITE,
                    dev_type: DEV_TYPE_CHAR,
                    ..DeviceFields::default()
                },
                hook_verdict,
                syscall_ret: ret,
                syscall: SYSCALL_OPENAT,
                flags: FLAG_DEVICE_SEEN | if with_syscall { FLAG_HAS_SYSCALL } else { 0 },
                ..EventHead::default()
            },
            v1_devices_cgroup: 0,
            policy_programs: [0; gpu_trace_common::SIGHTED_PROGRAMS],
            comm: [0; 16],
            path: [0; 256],
        };
        e.comm[..7].copy_from_slice(b"python3");
        e.path[..15].copy_from_slice(b"/dev/nvidia-uvm");
        e
    }

    #[test]
    fn bpf_denial_is_attributed_to_the_bpf_policy() {
        let access = DeviceAccess::decode(&raw(-1, -1, true), VerdictSource::BpfRetval);
        assert_eq!(access.verdict, Verdict::DeniedByBpfPolicy);
        assert_eq!(access.comm, b"python3");
        assert_eq!(access.access_letters(), "rw");
        assert_eq!(access.type_letter(), "c");
        let open = access.open.expect("open call");
        assert_eq!(open.path, b"/dev/nvidia-uvm");
        assert_eq!((open.syscall, open.errno()), ("openat", Some(libc::EPERM)));
    }

    #[test]
    fn a_failure_before_the_device_check_shows_no_device_and_keeps_the_path_digest() {
        let digest = 0x0123_4567_89ab_cdef;
        let mut event = raw(0, -libc::ENOENT, true);
        event.head.device = DeviceFields::of_unresolved_path(digest);
        event.head.flags &= !FLAG_DEVICE_SEEN;
        let access = DeviceAccess::decode(&event, VerdictSource::BpfRetval);
        assert_eq!(access.verdict, Verdict::FailedBeforeDeviceCheck);
        assert_eq!((access.major, access.minor), (0, 0));
        assert_eq!(access.path_digest, Some(digest));
        let seen = DeviceAccess::decode(&raw(-1, -1, true), VerdictSource::BpfRetval);
        assert_eq!(seen.path_digest, None);
    }

    #[test]
    fn eperm_after_bpf_allowed_is_not_blamed_on_bpf() {
        assert_eq!(
            DeviceAccess::decode(&raw(0, -1, true), VerdictSource::BpfRetval).verdict,
            Verdict::DeniedAfterBpf
        );
    }

    #[test]
    fn fexit_and_errno_denials_leave_the_layer_to_attribution() {
        // fexit: the kernel's final verdict, whatever the errno.
        let fexit = DeviceAccess::decode(&raw(-1, -1, true), VerdictSource::Fexit);
        assert_eq!(fexit.verdict, Verdict::DeniedLayerUnknown);
        assert_eq!(
            fexit.bpf_retval, 0,
            "not observed: attribution works it out"
        );
        // errno: no verdict in the event, EPERM from the open.
        let errno = DeviceAccess::decode(&raw(0, -1, true), VerdictSource::Errno);
        assert_eq!(errno.verdict, Verdict::DeniedLayerUnknown);
        assert!(errno.verdict.is_denied());
        let allowed = DeviceAccess::decode(&raw(0, 3, true), VerdictSource::Errno);
        assert_eq!(allowed.verdict, Verdict::Allowed);
    }

    #[test]
    fn enxio_after_allow_is_allowed() {
        let access = DeviceAccess::decode(&raw(0, -libc::ENXIO, true), VerdictSource::BpfRetval);
        assert_eq!(access.verdict, Verdict::Allowed);
        assert_eq!(access.open.and_then(|o| o.errno()), Some(libc::ENXIO));
    }

    #[test]
    fn failed_open_that_never_reached_the_hook_is_a_failure_not_a_denial() {
        let mut e = raw(0, -libc::ENOENT, true);
        e.head.flags = FLAG_HAS_SYSCALL;
        let access = DeviceAccess::decode(&e, VerdictSource::BpfRetval);
        assert_eq!(access.verdict, Verdict::FailedBeforeDeviceCheck);
        assert!(!access.device_seen && !access.verdict.is_denied() && access.verdict.is_problem());
    }

    #[test]
    fn access_outside_open_has_no_call() {
        let access = DeviceAccess::decode(&raw(-1, 0, false), VerdictSource::BpfRetval);
        assert_eq!(access.open, None);
        assert_eq!(access.verdict, Verdict::DeniedByBpfPolicy);
    }
}
