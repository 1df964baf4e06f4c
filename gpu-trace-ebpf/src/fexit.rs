//! fexit on the kernel's device permission check: its return value is the
//! final verdict of BPF policies and cgroup v1 devices.list alike. Preferred
//! wherever the kernel loads it (it needs BTF and trampolines).

use aya_ebpf::{macros::fexit, programs::FExitContext};
use gpu_trace_common::{bench_cut as cut, DeviceFields, PROGRAM_CHECK_PERMISSION_EXIT};

use crate::{
    bench_cut,
    device_check::{self, DeviceCheck},
};

// int devcgroup_check_permission(short type, u32 major, u32 minor, short access);
// the name is gpu_trace_common::program::FEXIT_TARGET (the macro wants a literal).
#[fexit(function = "devcgroup_check_permission")]
pub fn check_permission_exit(ctx: FExitContext) -> i32 {
    if bench_cut::after(cut::ENTRY) {
        return 0;
    }
    // The four arguments, then the return value (read as the fifth slot, which
    // unlike FExitContext::ret works before kernel 5.17).
    device_check::record(&DeviceCheck {
        device: DeviceFields {
            dev_type: ctx.arg::<u64>(0) as u16,
            major: ctx.arg::<u64>(1) as u32,
            minor: ctx.arg::<u64>(2) as u32,
            access: ctx.arg::<u64>(3) as u16,
        },
        verdict: ctx.arg::<u64>(4) as i32,
        program: PROGRAM_CHECK_PERMISSION_EXIT,
    });
    0
}
