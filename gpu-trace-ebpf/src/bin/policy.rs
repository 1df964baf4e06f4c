//! A stand-in container device policy, for selftest and the kernel tests.
//!
//! Denies the access bits listed for a char major in DENY_RULES and allows
//! everything else, as runc or LXC policies do for majors they do not list.
#![no_std]
#![no_main]

use aya_ebpf::{
    macros::{cgroup_device, map},
    maps::HashMap,
    programs::DeviceContext,
};
use gpu_trace_common::DEV_TYPE_CHAR;

const ALLOW: i32 = 1;
const DENY: i32 = 0;

/// Char major -> access bits to deny.
#[map]
static DENY_RULES: HashMap<u32, u32> = HashMap::with_max_entries(64, 0);

#[cgroup_device]
pub fn scratch_policy(ctx: DeviceContext) -> i32 {
    // SAFETY: the kernel hands every cgroup_device program a valid context.
    let dev = unsafe { &*ctx.device };
    if (dev.access_type & 0xffff) as u16 != DEV_TYPE_CHAR {
        return ALLOW;
    }
    let access = dev.access_type >> 16;
    // SAFETY: plain u32 value, read at once.
    match unsafe { DENY_RULES.get(dev.major) } {
        Some(denied) if denied & access != 0 => DENY,
        _ => ALLOW,
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}
