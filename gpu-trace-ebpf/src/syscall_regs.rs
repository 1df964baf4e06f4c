//! The syscall the current thread is in, and its path argument, read from
//! the user registers the kernel saved at syscall entry: how an access seen
//! outside a traced open call (mknod, or every access with
//! --device-hook-only) still gets its path.
//!
//! x86_64 only. The registers sit at the top of the task's kernel stack
//! (`task_pt_regs()`); neither helper that finds them (`bpf_task_pt_regs`)
//! nor CO-RE is open to a cgroup_device program, so userspace works out
//! where they are from the kernel's BTF (see kernel_btf.rs and tracer.rs).

use aya_ebpf::helpers::{bpf_get_current_task, bpf_probe_read_kernel};
use gpu_trace_common::{
    SYSCALL_ACCESS, SYSCALL_CREAT, SYSCALL_FACCESSAT, SYSCALL_FACCESSAT2, SYSCALL_MKNOD,
    SYSCALL_MKNODAT, SYSCALL_OPEN, SYSCALL_OPENAT, SYSCALL_OPENAT2,
};

use crate::maps::{PT_REGS_OFFSET, TASK_STACK_OFFSET};

/// Offsets in `struct pt_regs`.
const SI: u64 = 13 * 8;
const DI: u64 = 14 * 8;
const ORIG_AX: u64 = 15 * 8;
const CS: u64 = 17 * 8;
/// The code segment of 64-bit user mode (`__USER_CS`). A 32-bit process
/// (0x23) numbers its syscalls and passes its arguments differently, and a
/// wrong guess of where the registers are reads something else here.
const USER_CS_64: u64 = 0x33;

/// Which argument register holds the path, by x86_64 syscall number: the
/// calls that can reach the device check with a path.
#[inline(always)]
fn path_argument(nr: u64) -> Option<(u16, u64)> {
    match nr {
        2 => Some((SYSCALL_OPEN, DI)),
        21 => Some((SYSCALL_ACCESS, DI)),
        85 => Some((SYSCALL_CREAT, DI)),
        133 => Some((SYSCALL_MKNOD, DI)),
        257 => Some((SYSCALL_OPENAT, SI)),
        259 => Some((SYSCALL_MKNODAT, SI)),
        269 => Some((SYSCALL_FACCESSAT, SI)),
        437 => Some((SYSCALL_OPENAT2, SI)),
        439 => Some((SYSCALL_FACCESSAT2, SI)),
        _ => None,
    }
}

/// The current syscall (`SYSCALL_*`) and the user address of its path
/// argument; None when the thread is in none of the syscalls above
/// (io_uring), is a 32-bit process, or the registers cannot be found.
#[inline(always)]
pub fn syscall_path_argument() -> Option<(u16, u64)> {
    let stack_offset = u64::from(TASK_STACK_OFFSET.load());
    if stack_offset == 0 {
        return None;
    }
    // SAFETY: a helper without arguments.
    let task = unsafe { bpf_get_current_task() };
    // SAFETY (all reads below): kernel memory read with the fault-tolerant helper.
    let stack: u64 = unsafe { bpf_probe_read_kernel((task + stack_offset) as *const u64) }.ok()?;
    let regs = stack + u64::from(PT_REGS_OFFSET.load());
    let read = |field: u64| unsafe { bpf_probe_read_kernel((regs + field) as *const u64) }.ok();
    if read(CS)? & 0xffff != USER_CS_64 {
        return None;
    }
    let (syscall, register) = path_argument(read(ORIG_AX)?)?;
    Some((syscall, read(register)?))
}
