//! The observers on the cgroup device hook, used where fexit is refused.
//!
//! Attached at the cgroup2 root, an observer runs after every policy
//! attached below it. It never decides: every path returns ALLOW.

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_uid_gid, bpf_ktime_get_boot_ns,
        generated::bpf_get_retval,
    },
    macros::cgroup_device,
    programs::DeviceContext,
};
use gpu_trace_common::{bench_cut as cut, DeviceFields, LastDeviceCheck, PROGRAM_OBSERVE_DEVICE};

use crate::{
    bench_cut,
    device_check::{self, DeviceCheck},
    maps::LAST_DEVICE_CHECK,
};

/// Return value of a cgroup_device program that lets the access through.
const ALLOW: i32 = 1;

/// Kernel 6.1 and later: reads the combined verdict of the policies before
/// it with `bpf_get_retval()` (5.18) and its thread id (6.1).
#[cgroup_device]
pub fn observe_device(ctx: DeviceContext) -> i32 {
    if bench_cut::after(cut::ENTRY) {
        return ALLOW;
    }
    device_check::record(&DeviceCheck {
        device: device_of(&ctx),
        // SAFETY: a helper without arguments; the verifier refuses this
        // program where it is missing, and the loader falls back.
        verdict: unsafe { bpf_get_retval() } as i32,
        program: PROGRAM_OBSERVE_DEVICE,
    });
    ALLOW
}

/// Older kernels: neither the verdict nor the thread id is available here,
/// so this observer only notes what it saw, by cgroup; the open call's exit
/// claims it and takes the verdict from the call's errno.
#[cgroup_device]
pub fn observe_device_errno(ctx: DeviceContext) -> i32 {
    // SAFETY: a helper without arguments.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    let check = LastDeviceCheck {
        // SAFETY: as above.
        boot_ns: unsafe { bpf_ktime_get_boot_ns() },
        cgroup_id,
        uid: bpf_get_current_uid_gid() as u32,
        device: device_of(&ctx),
    };
    // A full table evicts the least recently used cgroup's entry.
    let _ = LAST_DEVICE_CHECK.insert(&cgroup_id, &check, 0);
    ALLOW
}

/// Type, major, minor and access bits from the hook's context.
#[inline(always)]
fn device_of(ctx: &DeviceContext) -> DeviceFields {
    // SAFETY: the kernel hands every cgroup_device program a valid context.
    let dev = unsafe { &*ctx.device };
    DeviceFields {
        major: dev.major,
        minor: dev.minor,
        access: (dev.access_type >> 16) as u16,
        dev_type: (dev.access_type & 0xffff) as u16,
    }
}
