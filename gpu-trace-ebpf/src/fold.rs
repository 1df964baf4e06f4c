//! Folding in the kernel: a retry storm of the same denied open costs a map
//! update per repeat, not a ring-buffer record and a JSON line. The first
//! problem of a (cgroup, device, access, command, outcome) in a fold window
//! is sent; its repeats within the window are counted in REPEATS, which
//! userspace reads every second and writes as one record with the count.
//!
//! Every problem is either sent or counted, never both: the sum of the
//! events and the counted repeats is exactly what happened. A key is made
//! only once its first event is in the ring buffer, so a repeat is never
//! counted for a first that was lost.

use core::intrinsics::{atomic_xadd, AtomicOrdering};

use aya_ebpf::helpers::bpf_get_current_pid_tgid;
use gpu_trace_common::{EventHead, RepeatCount, RepeatKey, COMM_LEN};

use crate::maps::{FOLD_WINDOW_NS, REPEATS};

/// BPF_NOEXIST: insert only if the key is new (another CPU may have made it).
const NOEXIST: u64 = 1;

/// The key to fold `head` under, if it is a problem and folding is on.
#[inline(always)]
fn key(head: &EventHead, comm: &[u8; COMM_LEN]) -> Option<RepeatKey> {
    let window = FOLD_WINDOW_NS.load();
    (window != 0 && RepeatKey::is_problem(head)).then(|| RepeatKey::of(head, comm, window))
}

/// True when this problem was counted as a repeat and must not be sent.
#[inline(always)]
pub fn counted_as_repeat(head: &EventHead, comm: &[u8; COMM_LEN]) -> bool {
    let Some(key) = key(head, comm) else {
        return false;
    };
    let Some(count) = REPEATS.get_ptr_mut(&key) else {
        return false;
    };
    // SAFETY: a map value, alive until this program returns. Programs on
    // other CPUs (and, on preemptible kernels, other tasks on this one)
    // count the same key: the count goes up atomically (BPF's xadd); the
    // rest is "the latest", where a torn mix of two repeats does no harm.
    unsafe {
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*count).repeats, 1);
        let pid_tgid = bpf_get_current_pid_tgid();
        (*count).last_ns = head.boot_ns;
        (*count).last_pid = (pid_tgid >> 32) as u32;
        (*count).last_tid = pid_tgid as u32;
        (*count).last_uid = head.uid;
        (*count).last_syscall = head.syscall;
    }
    true
}

/// After a problem was put in the ring buffer: its repeats in this window
/// are counted from now on. A full table leaves them to be sent.
#[inline(always)]
pub fn sent(head: &EventHead, comm: &[u8; COMM_LEN]) {
    if let Some(key) = key(head, comm) {
        let _ = REPEATS.insert(&key, &RepeatCount::default(), NOEXIST);
    }
}
