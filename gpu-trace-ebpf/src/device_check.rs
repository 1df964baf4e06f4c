//! What a device hook saw, whichever hook it was (the observer reading
//! `bpf_get_retval()`, or fexit on the kernel's check): handed to the open
//! call in flight on this thread, or reported at once outside one.

use aya_ebpf::helpers::{
    bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_get_current_uid_gid,
    bpf_ktime_get_boot_ns,
};
use gpu_trace_common::{
    EventHead, FLAG_DEVICE_SEEN, FLAG_PATH_FROM_REGS, SEEN_DEVICE, SEEN_WATCHED, SYSCALL_NONE,
};

use crate::{
    events,
    maps::{current_is_followed, is_watched, open_calls_traced, report_allowed, IN_FLIGHT},
    syscall_regs::syscall_path_argument,
};

/// One device permission check, in the cgroup device hook's terms.
pub struct DeviceCheck {
    /// `DEV_TYPE_*`.
    pub dev_type: u16,
    pub major: u32,
    pub minor: u32,
    /// `ACCESS_*` bits.
    pub access: u16,
    /// 0 allowed, negative errno denied.
    pub verdict: i32,
}

#[inline(always)]
pub fn record(check: &DeviceCheck) {
    // Without an open route no call is ever in flight: skip the hash
    // lookup, which every device open would pay.
    if open_calls_traced() && handed_to_open_call(check) {
        return;
    }
    if !is_watched(check.dev_type, check.major) || !current_is_followed() {
        return;
    }
    report_now(check);
}

/// Inside a traced open call: leaves the details for its exit; false outside one.
#[inline(always)]
fn handed_to_open_call(check: &DeviceCheck) -> bool {
    let tid = bpf_get_current_pid_tgid() as u32;
    // Inside a traced open call (of a followed process): leave the details
    // for its exit, which knows the path and the errno. Unwatched devices are
    // recorded too: a failed open of a /dev/nvidia* node with a stale major
    // is reported with its device number.
    // (An entry whose call has finished stays in the table, marked SYSCALL_NONE.)
    let in_call = IN_FLIGHT
        .get_ptr_mut(tid)
        // SAFETY: the entry belongs to this thread, which is running here.
        .filter(|call| unsafe { (**call).syscall } != SYSCALL_NONE);
    if let Some(call) = in_call {
        // SAFETY: as above.
        let call = unsafe { &mut *call };
        call.major = check.major;
        call.minor = check.minor;
        call.access = check.access;
        call.dev_type = check.dev_type;
        call.hook_verdict = check.verdict;
        call.seen = SEEN_DEVICE;
        // The rest only for watched devices: every char device open (a tty,
        // /dev/null) passes here, and each helper call costs.
        if is_watched(check.dev_type, check.major) {
            // SAFETY: helpers without arguments.
            call.boot_ns = unsafe { bpf_ktime_get_boot_ns() };
            call.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
            call.uid = bpf_get_current_uid_gid() as u32;
            call.seen |= SEEN_WATCHED;
        }
        return true;
    }
    false
}

#[inline(always)]
fn report_now(check: &DeviceCheck) {
    // Outside a traced open (mknod, io_uring, or every access when no open
    // route is attached): report it now.
    if check.verdict == 0 && !report_allowed() {
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let (syscall, path, flags) = match syscall_path_argument() {
        Some((syscall, path)) => (syscall, path, FLAG_DEVICE_SEEN | FLAG_PATH_FROM_REGS),
        None => (SYSCALL_NONE, 0, FLAG_DEVICE_SEEN),
    };
    let head = EventHead {
        // SAFETY: helpers without arguments.
        boot_ns: unsafe { bpf_ktime_get_boot_ns() },
        cgroup_id: unsafe { bpf_get_current_cgroup_id() },
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        uid: bpf_get_current_uid_gid() as u32,
        major: check.major,
        minor: check.minor,
        access: check.access,
        dev_type: check.dev_type,
        hook_verdict: check.verdict,
        syscall_ret: 0,
        syscall,
        flags,
        _pad: 0,
    };
    events::send(head, path);
}
