//! The observer on the cgroup device hook.
//!
//! Attached at the cgroup2 root, it runs after every policy attached below
//! it and reads their combined verdict with `bpf_get_retval()`. It never
//! decides: every path returns ALLOW.

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_current_uid_gid, bpf_ktime_get_boot_ns, generated::bpf_get_retval,
    },
    macros::cgroup_device,
    programs::DeviceContext,
};
use gpu_trace_common::{
    DeviceAccessEvent, DEV_TYPE_CHAR, FLAG_SEEN_BY_OBSERVER, SEEN_DEVICE, SEEN_WATCHED,
    SYSCALL_NONE,
};

use crate::maps::{
    count_lost_event, current_is_followed, report_allowed, watch_all_devices, EVENTS, IN_FLIGHT,
    WATCHED_MAJORS,
};

/// Return value of a cgroup_device program that lets the access through.
const ALLOW: i32 = 1;

#[cgroup_device]
pub fn observe_device(ctx: DeviceContext) -> i32 {
    // SAFETY: the kernel hands every cgroup_device program a valid context.
    let dev = unsafe { &*ctx.device };
    let dev_type = (dev.access_type & 0xffff) as u16;
    let access = (dev.access_type >> 16) as u16;
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
        // SAFETY: as above; bpf_get_retval is available from kernel 5.18,
        // which the loader checks.
        let call = unsafe { &mut *call };
        call.major = dev.major;
        call.minor = dev.minor;
        call.access = access;
        call.dev_type = dev_type;
        call.bpf_retval = unsafe { bpf_get_retval() };
        call.seen = SEEN_DEVICE;
        // The rest only for watched devices: every char device open (a tty,
        // /dev/null) passes here, and each helper call costs.
        if is_watched(dev_type, dev.major) {
            call.boot_ns = unsafe { bpf_ktime_get_boot_ns() };
            call.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
            call.uid = bpf_get_current_uid_gid() as u32;
            call.seen |= SEEN_WATCHED;
        }
        return ALLOW;
    }

    if !is_watched(dev_type, dev.major) || !current_is_followed() {
        return ALLOW;
    }
    // SAFETY: as above.
    let bpf_retval = unsafe { bpf_get_retval() };

    // Any other way to reach a device (mknod, io_uring, ...): report it now.
    if bpf_retval == 0 && !report_allowed() {
        return ALLOW;
    }
    let Some(mut entry) = EVENTS.reserve::<DeviceAccessEvent>(0) else {
        count_lost_event();
        return ALLOW;
    };
    let pid_tgid = bpf_get_current_pid_tgid();
    let event = entry.write(DeviceAccessEvent::zeroed());
    event.boot_ns = unsafe { bpf_ktime_get_boot_ns() };
    event.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    event.pid = (pid_tgid >> 32) as u32;
    event.tid = pid_tgid as u32;
    event.uid = bpf_get_current_uid_gid() as u32;
    event.major = dev.major;
    event.minor = dev.minor;
    event.access = access;
    event.dev_type = dev_type;
    event.bpf_retval = bpf_retval;
    event.flags = FLAG_SEEN_BY_OBSERVER;
    if let Ok(comm) = bpf_get_current_comm() {
        event.comm = comm;
    }
    entry.submit(0);
    ALLOW
}

#[inline(always)]
fn is_watched(dev_type: u16, major: u32) -> bool {
    if watch_all_devices() {
        return true;
    }
    // SAFETY: the value is a u8 flag, read at once.
    dev_type == DEV_TYPE_CHAR && unsafe { WATCHED_MAJORS.get(major).is_some() }
}
