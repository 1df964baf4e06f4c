//! gpu-trace's kernel side.
//!
//! Data flows one way: the device hook sees a device check and its verdict
//! (`device_check`, from `fexit` or an `observer`); an open call's exit
//! joins what it saw with the path and the errno into one event on the ring
//! buffer (`open_calls`). With the syscall tracepoints, the call's entry
//! stashes its path pointer per thread and the device hook fills that in;
//! with fexit on the kernel's open function (`open_function`), nothing runs
//! at entry and the device hook leaves what is worth reporting by thread.
//! Without an open route the device hook reports at once, the path read
//! from the syscall's saved registers (`syscall_regs`). Userspace loads one
//! device hook: the first of fexit, the observer, the errno observer that
//! the kernel accepts.
#![no_std]
#![no_main]
// The atomics of fold.rs and slot_count.rs: the BPF target offers no
// core::sync::atomic read-modify-write, but BPF has had xadd all along and
// compare-and-exchange since 5.12 (used only where the loader says so).
#![allow(internal_features)]
#![feature(core_intrinsics)]

mod bench_cut;
mod cgroup_names;
mod current_thread;
mod device_check;
mod events;
mod fexit;
mod fold;
mod maps;
mod observer;
mod open_calls;
mod open_function;
mod policy_programs;
mod process_tree;
mod slot_count;
mod syscall_regs;
mod thread_identity;
mod tracepoint_record;
mod unresolved_path;
mod v1_devices;
mod why_dropped;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // Never reached: the verifier rejects programs that could panic.
    loop {}
}
