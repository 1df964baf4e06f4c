//! gpu-trace's kernel side.
//!
//! Data flows one way: an open call's entry stashes its path pointer per
//! thread (`open_calls`, entered from the syscall tracepoints or from
//! fentry/fexit on the kernel's open function, `open_function`), the device
//! hook fills in what it saw and its verdict (`device_check`, from `fexit`
//! or an `observer`), and the call's exit joins both with the errno into
//! one event on the ring buffer. Without an open route the device hook
//! reports at once, the path read from the syscall's saved registers
//! (`syscall_regs`). Userspace loads one device hook: the first of fexit, the observer, the
//! errno observer that the kernel accepts.
#![no_std]
#![no_main]
// The atomic add of fold.rs: the BPF target has no core atomics with
// read-modify-write (no compare-and-swap), but BPF has had xadd all along.
#![allow(internal_features)]
#![feature(core_intrinsics)]

mod cgroup_names;
mod device_check;
mod events;
mod fexit;
mod fold;
mod maps;
mod observer;
mod open_calls;
mod open_function;
mod process_tree;
mod syscall_regs;
mod tracepoint_record;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // Never reached: the verifier rejects programs that could panic.
    loop {}
}
