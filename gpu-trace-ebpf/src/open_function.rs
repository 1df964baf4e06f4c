//! fentry and fexit on the kernel's open function (`do_sys_openat2`): the
//! same path and result as the open-family syscall tracepoints, where the
//! kernel has BPF trampolines. Only opens pay for these, where an enabled
//! syscall tracepoint sends every syscall of every task down the slow path.

use aya_ebpf::{
    macros::{fentry, fexit},
    programs::{FEntryContext, FExitContext},
};
use gpu_trace_common::SYSCALL_OPENAT;

use crate::open_calls::{finish_call, stash_call, SyscallKnown};

// long do_sys_openat2(int dfd, const char __user *filename, struct open_how *how);
// the name is gpu_trace_common::program::OPEN_FUNCTION (the macro wants a literal).
#[fentry(function = "do_sys_openat2")]
pub fn open_function_entry(ctx: FEntryContext) -> i32 {
    // open, openat, openat2 and creat all come here; which one it was is
    // read from the saved registers when the call is reported.
    stash_call(ctx.arg::<u64>(1), SYSCALL_OPENAT);
    0
}

#[fexit(function = "do_sys_openat2")]
pub fn open_function_exit(ctx: FExitContext) -> i32 {
    // The three arguments, then the return value (the fourth slot).
    finish_call(ctx.arg::<u64>(3) as i32, SyscallKnown::FromRegisters);
    0
}
