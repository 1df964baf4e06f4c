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
//!
//! Each cgroup sends at most KERNEL_BUDGET_PER_CGROUP first sightings per
//! window; past them its new problems are held back: counted in HELD_BACK
//! per (cgroup, major, access), never sent. A tenant cycling through minors
//! or command names then fills neither the fold table nor the ring buffer
//! that every other cgroup's problems go through.

use core::intrinsics::{atomic_xadd, AtomicOrdering};

use gpu_trace_common::{
    CgroupWindow, DeviceFields, EventHead, HeldBackCount, HeldBackKey, RepeatCount, RepeatKey,
    COMM_LEN, HELD_BACK_KEYS_PER_CGROUP, KERNEL_BUDGET_PER_CGROUP,
};

use crate::maps::{
    add_one, count_lost_event, CGROUP_SENT, FOLD_WINDOW_NS, HELD_BACK, NOEXIST, REPEATS,
};
use crate::why_dropped;

/// A hash map's answer to an insert when it is full.
const E2BIG: i32 = 7;

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
        (*count).last_ns = head.boot_ns;
        (*count).last_pid = head.pid;
        (*count).last_tid = head.tid;
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
        // EEXIST: another CPU counted it first, as it should.
        if REPEATS.insert(&key, &RepeatCount::default(), NOEXIST) == Err(-E2BIG) {
            why_dropped::repeats_table_full(head);
        }
    }
}

/// True when this problem, a first sighting, is past its cgroup's budget
/// for the window: it is counted in HELD_BACK (or, with that table full, as
/// lost for its cgroup) and must not be sent.
#[inline(always)]
pub fn held_back(head: &EventHead, comm: &[u8; COMM_LEN]) -> bool {
    let window = FOLD_WINDOW_NS.load();
    if window == 0 || !RepeatKey::is_problem(head) {
        return false;
    }
    let window = head.boot_ns / window;
    let sent = CgroupWindow {
        cgroup_id: head.cgroup_id,
        window,
    };
    // A table that cannot count it leaves it to be sent, as before.
    let Some(after) = add_one(&CGROUP_SENT, &sent).filter(|&n| n > KERNEL_BUDGET_PER_CGROUP) else {
        return false;
    };
    // A cgroup varying the device (a new major made with every mknod)
    // gets a few keys of its own, then one for the rest of the window.
    let own_key = after <= KERNEL_BUDGET_PER_CGROUP + HELD_BACK_KEYS_PER_CGROUP;
    let device = if own_key {
        head.device
    } else {
        DeviceFields::NONE
    };
    let key = HeldBackKey {
        cgroup_id: head.cgroup_id,
        window,
        major: device.major,
        access: device.access,
        dev_type: device.dev_type,
        hook_verdict: head.hook_verdict,
        syscall_ret: head.syscall_ret,
    };
    if HELD_BACK.get_ptr_mut(&key).is_none()
        && HELD_BACK
            .insert(&key, &HeldBackCount::default(), NOEXIST)
            .is_ok()
    {
        why_dropped::held_back(head);
    }
    let Some(held) = HELD_BACK.get_ptr_mut(&key) else {
        count_lost_event(head.cgroup_id);
        why_dropped::held_back_table_full(head);
        return true;
    };
    // SAFETY: a map value, alive until this program returns; the count
    // goes up atomically, the rest is "the latest" (see counted_as_repeat).
    unsafe {
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*held).count, 1);
        (*held).latest = *head;
        (*held).latest_comm = *comm;
    }
    true
}
