//! Following one process tree (`gpu-trace run`): forks of a followed
//! process join the FOLLOWED table, exits leave it. Attached only in that mode.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{raw_tracepoint, tracepoint},
    programs::{RawTracePointContext, TracePointContext},
};

use crate::maps::{FOLLOWED, FORK_CHILD_PID_OFFSET};

/// sched:sched_process_fork runs in the parent; the child's id is in the record.
#[tracepoint]
pub fn follow_fork(ctx: TracePointContext) -> u32 {
    let parent_tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    // SAFETY: the value is a u8 flag, read at once.
    if unsafe { FOLLOWED.get(parent_tgid).is_none() } {
        return 0;
    }
    // SAFETY: userspace set the offset from this tracepoint's format file.
    if let Ok(child) = unsafe { ctx.read_at::<u32>(FORK_CHILD_PID_OFFSET.load() as usize) } {
        // A full table (16384 live threads in one tree) drops the newcomer.
        let _ = FOLLOWED.insert(child, 1, 0);
    }
    0
}

/// sched:sched_process_exit runs in the exiting thread. A raw tracepoint:
/// it reads nothing of the record, and its detach waits out no grace
/// periods (at most one, since identity_changed shares the tracepoint).
#[raw_tracepoint]
pub fn follow_exit(_ctx: RawTracePointContext) -> u32 {
    let tid = bpf_get_current_pid_tgid() as u32;
    let _ = FOLLOWED.remove(tid);
    0
}
