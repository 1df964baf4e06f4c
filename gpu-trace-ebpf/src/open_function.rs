//! fexit on the kernel's open function (`do_sys_openat2`): the path and
//! result the open-family syscall tracepoints give, where the kernel has
//! BPF trampolines. Only opens pay for it, where an enabled syscall
//! tracepoint sends every syscall of every task down the slow path; and
//! nothing runs at the open's entry, so a successful open costs the exit
//! one comparison.

use aya_ebpf::{macros::fexit, programs::FExitContext};

use crate::open_calls::finish_by_result;

// long do_sys_openat2(int dfd, const char __user *filename, struct open_how *how);
// the name is gpu_trace_common::program::OPEN_FUNCTION (the macro wants a literal).
// open, openat, openat2 and creat all come here; which one it was is read
// from the saved registers when the call is reported.
#[fexit(function = "do_sys_openat2")]
pub fn open_function_exit(ctx: FExitContext) -> i32 {
    // The three arguments, then the return value (the fourth slot).
    finish_by_result(ctx.arg::<u64>(3) as i32, ctx.arg::<u64>(1));
    0
}
