//! Folding in the kernel: a retry storm of the same denied open costs a map
//! update per repeat, not a ring-buffer record and a JSON line. The first
//! problem of a (cgroup, device, access, command, outcome) in a fold window
//! is sent; its repeats within the window are counted in REPEATS, which
//! userspace reads every second and writes as one record with the count.
//!
//! Every problem is either sent or counted, never both: the sum of the
//! events and the counted repeats is exactly what happened.

use aya_ebpf::helpers::{bpf_get_current_pid_tgid, bpf_ktime_get_boot_ns};
use gpu_trace_common::{EventHead, RepeatCount, RepeatKey};

use crate::maps::{FOLD_WINDOW_NS, REPEATS};

/// BPF_NOEXIST: insert only if the key is new (another CPU may have made it).
const NOEXIST: u64 = 1;

/// True when this problem was counted as a repeat and must not be sent.
#[inline(always)]
pub fn counted_as_repeat(head: &EventHead, comm: &[u8; 16]) -> bool {
    let window = FOLD_WINDOW_NS.load();
    let problem = head.hook_verdict != 0 || head.syscall_ret < 0;
    if window == 0 || !problem {
        return false;
    }
    let key = RepeatKey::of(head, comm);
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_boot_ns() };
    let Some(count) = REPEATS.get_ptr_mut(&key) else {
        let first = RepeatCount {
            window_start_ns: now,
            ..RepeatCount::default()
        };
        // A full table (or a race with another CPU's first): sent anyway.
        let _ = REPEATS.insert(&key, &first, NOEXIST);
        return false;
    };
    // SAFETY: this CPU's slot of a per-CPU map value: no other CPU writes
    // it, and nothing else runs on this CPU while this program does. (A
    // CPU whose slot is still zero starts its own window: each CPU sends
    // its first, and the counts stay exact without atomics, which the BPF
    // target of this toolchain does not offer.)
    let count = unsafe { &mut *count };
    if now.wrapping_sub(count.window_start_ns) >= window {
        count.window_start_ns = now;
        return false;
    }
    count.repeats += 1;
    let pid_tgid = bpf_get_current_pid_tgid();
    count.last_ns = now;
    count.last_pid = (pid_tgid >> 32) as u32;
    count.last_tid = pid_tgid as u32;
    count.last_uid = head.uid;
    count.last_syscall = head.syscall;
    true
}
