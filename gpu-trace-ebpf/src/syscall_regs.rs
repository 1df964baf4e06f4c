//! The syscall the current thread is in, and its path argument, read from
//! the user registers the kernel saved at syscall entry: how an access seen
//! outside a traced open call (mknod, or every access with
//! --device-hook-only) still gets its path, and how the device hook knows
//! that an open's exit will come where nothing runs at its entry.
//!
//! x86_64 kernels only (64-bit, x32 and 32-bit processes). The registers
//! sit at the top of the task's kernel stack (`task_pt_regs()`); neither
//! helper that finds them (`bpf_task_pt_regs`) nor CO-RE is open to a
//! cgroup_device program, so userspace works out where they are from the
//! kernel's BTF (see kernel_btf.rs and tracer.rs).

use core::ptr::read_volatile;

use aya_ebpf::helpers::{bpf_get_current_task, bpf_probe_read_kernel};
use gpu_trace_common::{
    SYSCALL_ACCESS, SYSCALL_CREAT, SYSCALL_FACCESSAT, SYSCALL_FACCESSAT2, SYSCALL_MKNOD,
    SYSCALL_MKNODAT, SYSCALL_OPEN, SYSCALL_OPENAT, SYSCALL_OPENAT2,
};

use crate::{
    current_thread::{typed_task, CurrentThread},
    maps::{COMPAT_STATUS_OFFSET, PT_REGS_OFFSET, TASK_STACK_OFFSET},
};

/// Offsets in `struct pt_regs`.
const BX: u64 = 5 * 8;
const AX: u64 = 10 * 8;
const CX: u64 = 11 * 8;
const SI: u64 = 13 * 8;
const DI: u64 = 14 * 8;
const ORIG_AX: u64 = 15 * 8;
const CS: u64 = 17 * 8;
/// What the entry code puts in the saved ax while a syscall runs; its
/// result replaces it when the syscall returns.
const ENOSYS: u64 = -38i64 as u64;
/// The code segments of 64-bit (`__USER_CS`) and 32-bit (`__USER32_CS`)
/// user mode: they number their syscalls and pass their arguments
/// differently, and a wrong guess of where the registers are reads
/// something else here.
const USER_CS_64: u64 = 0x33;
const USER_CS_32: u64 = 0x23;
/// x32 processes run 64-bit code and set this bit in the syscall number.
const X32_SYSCALL_BIT: u64 = 0x4000_0000;
/// `thread_info.status` while a 32-bit syscall runs, whatever the code
/// segment: a 64-bit process may call `int $0x80`, which takes the 32-bit
/// table and registers while its saved code segment says 64-bit.
const TS_COMPAT: u32 = 0x0002;

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

/// The same for 32-bit processes (i386 numbers; bx, cx, dx carry the arguments).
#[inline(always)]
fn path_argument_32(nr: u64) -> Option<(u16, u64)> {
    match nr {
        5 => Some((SYSCALL_OPEN, BX)),
        8 => Some((SYSCALL_CREAT, BX)),
        14 => Some((SYSCALL_MKNOD, BX)),
        33 => Some((SYSCALL_ACCESS, BX)),
        295 => Some((SYSCALL_OPENAT, CX)),
        297 => Some((SYSCALL_MKNODAT, CX)),
        307 => Some((SYSCALL_FACCESSAT, CX)),
        437 => Some((SYSCALL_OPENAT2, CX)),
        439 => Some((SYSCALL_FACCESSAT2, CX)),
        _ => None,
    }
}

/// `struct pt_regs` from ax to cs, read in one go: each kernel read is a
/// helper call, and a device check inside an open needs most of them.
#[repr(C)]
struct CallRegisters {
    ax: u64,
    cx: u64,
    _dx: u64,
    si: u64,
    di: u64,
    orig_ax: u64,
    _ip: u64,
    cs: u64,
}

// The block's fields lie where `struct pt_regs` has them.
const _: () = {
    use core::mem::offset_of;
    assert!(AX + offset_of!(CallRegisters, cx) as u64 == CX);
    assert!(AX + offset_of!(CallRegisters, si) as u64 == SI);
    assert!(AX + offset_of!(CallRegisters, di) as u64 == DI);
    assert!(AX + offset_of!(CallRegisters, orig_ax) as u64 == ORIG_AX);
    assert!(AX + offset_of!(CallRegisters, cs) as u64 == CS);
};

impl CallRegisters {
    /// The register at `offset` in `struct pt_regs`, if this block holds it.
    #[inline(always)]
    fn at(&self, offset: u64) -> Option<u64> {
        match offset {
            CX => Some(self.cx),
            SI => Some(self.si),
            DI => Some(self.di),
            _ => None,
        }
    }
}

/// Words of the running task's own task_struct (its stack pointer, its
/// syscall status): loads the verifier checks against BTF where the task
/// is typed (current_thread.rs), else the fault-tolerant helper (a call
/// each, and one to find the task).
enum TaskWords {
    Typed(*const u8),
    Probed(u64),
}

impl TaskWords {
    #[inline(always)]
    fn of(task: Option<*const u8>) -> Self {
        match task {
            Some(task) => TaskWords::Typed(task),
            // SAFETY: a helper without arguments.
            None => TaskWords::Probed(unsafe { bpf_get_current_task() }),
        }
    }

    /// The `T` at `offset` in the task_struct, a member of that type.
    #[inline(always)]
    fn read<T>(&self, offset: u64) -> Option<T> {
        match *self {
            // SAFETY: the running task, typed by BTF: the verifier checks
            // the load against the member at `offset`.
            TaskWords::Typed(task) => {
                Some(unsafe { read_volatile(task.add(offset as usize).cast()) })
            }
            // SAFETY: kernel memory read with the fault-tolerant helper.
            TaskWords::Probed(task) => {
                unsafe { bpf_probe_read_kernel((task + offset) as *const T) }.ok()
            }
        }
    }
}

/// The current syscall (`SYSCALL_*`) and the user address of its path
/// argument; None when the thread is in none of the syscalls above, is an
/// io_uring worker, is past its syscall's end, or the registers cannot be found.
#[inline(always)]
pub fn syscall_path_argument(thread: &CurrentThread) -> Option<(u16, u64)> {
    path_argument_of(|| thread.typed_task())
}

/// syscall_path_argument where no CurrentThread was needed.
#[inline(always)]
pub fn running_syscall_path_argument() -> Option<(u16, u64)> {
    path_argument_of(typed_task)
}

/// `typed_task`: the running task typed by BTF, asked for only once the
/// registers can be found.
#[inline(always)]
fn path_argument_of(typed_task: impl FnOnce() -> Option<*const u8>) -> Option<(u16, u64)> {
    let stack_offset = u64::from(TASK_STACK_OFFSET.load());
    if stack_offset == 0 {
        return None;
    }
    let task = TaskWords::of(typed_task());
    let stack: u64 = task.read(stack_offset)?;
    let regs = stack + u64::from(PT_REGS_OFFSET.load());
    // SAFETY (all reads below): kernel memory read with the fault-tolerant helper.
    let call: CallRegisters =
        unsafe { bpf_probe_read_kernel((regs + AX) as *const CallRegisters) }.ok()?;
    // Registers that hold a syscall only while it runs: once it returned,
    // the thread may still check a device on its way out (io_uring's task
    // work issuing an open inline, as 6.1 does), and io_uring's workers
    // (io-wq, SQPOLL) start with a copy of their creator's registers, ax
    // cleared. Either way the registers name a call that is not this
    // check's, and whose exit has come and gone.
    if call.ax != ENOSYS {
        return None;
    }
    let nr = call.orig_ax;
    let compat = match COMPAT_STATUS_OFFSET.load() {
        0 => match call.cs & 0xffff {
            USER_CS_64 => false,
            USER_CS_32 => true,
            _ => return None,
        },
        offset => {
            let status: u32 = task.read(u64::from(offset))?;
            status & TS_COMPAT != 0
        }
    };
    if compat {
        let (syscall, register) = path_argument_32(nr)?;
        let path = match call.at(register) {
            Some(value) => value,
            // SAFETY: as above (bx lies below the block).
            None => unsafe { bpf_probe_read_kernel((regs + register) as *const u64) }.ok()?,
        };
        // A 32-bit call's argument is a 32-bit address.
        Some((syscall, path & 0xffff_ffff))
    } else {
        let (syscall, register) = path_argument(nr & !X32_SYSCALL_BIT)?;
        Some((syscall, call.at(register)?))
    }
}
