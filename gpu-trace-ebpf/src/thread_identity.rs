//! What makes a thread's folded key stale: its command name (exec, or a
//! rename), its cgroup, or its exit (after which its thread id may be
//! another's). Any of them, anywhere, bumps one generation; a thread's
//! remembered key (fold.rs) holds only while the generation it was read
//! under is current. None of these is a syscall tracepoint: the host's
//! other syscalls pay nothing, an exec or an exit an atomic add. Raw
//! tracepoints, not trace events: a trace event's detach waits out grace
//! periods (about 75 ms each here), a raw one's at most one, and the
//! program reads nothing of the record.

use core::intrinsics::{atomic_xadd, AtomicOrdering};

use aya_ebpf::{macros::raw_tracepoint, programs::RawTracePointContext};

use crate::maps::IDENTITY_GENERATION;

/// On task:task_rename, cgroup:cgroup_attach_task and sched:sched_process_exit.
#[raw_tracepoint]
pub fn identity_changed(_ctx: RawTracePointContext) -> u32 {
    if let Some(generation) = IDENTITY_GENERATION.get_ptr_mut(0) {
        // SAFETY: a map value; 0 stays 0 (userspace starts it at 1 once
        // this program is attached to all three).
        unsafe {
            if *generation != 0 {
                atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(generation, 1);
            }
        }
    }
    0
}
