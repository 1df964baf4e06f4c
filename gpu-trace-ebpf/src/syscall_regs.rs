//! The syscall the current thread is in, and its path argument, read from
//! the user registers the kernel saved at syscall entry: how an access seen
//! outside a traced open call (mknod, or every access with
//! --device-hook-only) still gets its path.
//!
//! x86_64 only. The registers sit at the top of the task's kernel stack
//! (`task_pt_regs()`); neither helper that finds them (`bpf_task_pt_regs`)
//! nor CO-RE is open to a cgroup_device program, so userspace reads where
//! `task_struct.stack` is from the kernel's BTF.

use aya_ebpf::helpers::{bpf_get_current_task, bpf_probe_read_kernel};
use gpu_trace_common::{
    SYSCALL_CREAT, SYSCALL_MKNOD, SYSCALL_MKNODAT, SYSCALL_OPEN, SYSCALL_OPENAT, SYSCALL_OPENAT2,
};

use crate::maps::task_stack_offset;

/// x86_64's kernel stack: 16 KiB (32 KiB only with KASAN, which no
/// distribution kernel enables).
const THREAD_SIZE: u64 = 16 << 10;
/// `sizeof(struct pt_regs)`, and the offsets of the fields used.
const PT_REGS_SIZE: u64 = 21 * 8;
const SI: u64 = 13 * 8;
const DI: u64 = 14 * 8;
const ORIG_AX: u64 = 15 * 8;
/// Room the kernel keeps above `pt_regs` (TOP_OF_KERNEL_STACK_PADDING): none,
/// or 16 bytes with FRED (6.9+). The saved syscall number tells which.
const STACK_PADDINGS: [u64; 2] = [0, 16];

/// Which argument register holds the path, by x86_64 syscall number.
#[inline(always)]
fn path_argument(nr: u64) -> Option<(u16, u64)> {
    match nr {
        2 => Some((SYSCALL_OPEN, DI)),
        85 => Some((SYSCALL_CREAT, DI)),
        133 => Some((SYSCALL_MKNOD, DI)),
        257 => Some((SYSCALL_OPENAT, SI)),
        259 => Some((SYSCALL_MKNODAT, SI)),
        437 => Some((SYSCALL_OPENAT2, SI)),
        _ => None,
    }
}

/// The current syscall (`SYSCALL_*`) and the user address of its path
/// argument; None when the thread is in none of the path-taking syscalls
/// above (io_uring, a 32-bit process) or the offset is unknown.
#[inline(always)]
pub fn syscall_path_argument() -> Option<(u16, u64)> {
    let stack_offset = task_stack_offset();
    if stack_offset == 0 {
        return None;
    }
    // SAFETY: a helper without arguments.
    let task = unsafe { bpf_get_current_task() };
    // SAFETY: kernel memory read with the fault-tolerant helper.
    let stack: u64 = unsafe { bpf_probe_read_kernel((task + stack_offset) as *const u64) }.ok()?;
    for padding in STACK_PADDINGS {
        let regs = stack + THREAD_SIZE - padding - PT_REGS_SIZE;
        // SAFETY: as above.
        let Ok(nr) = (unsafe { bpf_probe_read_kernel((regs + ORIG_AX) as *const u64) }) else {
            continue;
        };
        let Some((syscall, register)) = path_argument(nr) else {
            continue;
        };
        // SAFETY: as above.
        let pointer: u64 =
            unsafe { bpf_probe_read_kernel((regs + register) as *const u64) }.ok()?;
        return Some((syscall, pointer));
    }
    None
}
