//! Sending one event to userspace: the one place that writes the ring buffer.
//!
//! The record is filled field by field where it lies, never cleared first:
//! clearing its 328 bytes compiled to a memset subprogram that cost more
//! than everything else a denied open does in our programs.

use aya_ebpf::helpers::generated::{bpf_get_current_comm, bpf_probe_read_user_str};
use gpu_trace_common::{
    bench_cut as cut, DeviceAccessEvent, EventHead, COMM_LEN, FLAG_PATH_TRUNCATED, PATH_LEN,
};

use crate::{
    bench_cut, fold,
    maps::{count_lost_event, EVENTS},
    open_calls::EPERM,
    policy_programs, v1_devices, why_dropped,
};

/// The current command name, unless `head` is a repeat, which is counted
/// here and goes no further. A repeat is decided from the head and the
/// command name alone: whatever else a first sighting needs (the saved
/// registers' walk, the path) is read after this, so that a retry storm
/// pays a hash lookup and an add per denial.
#[inline(always)]
pub fn first_sighting(head: &EventHead, generation: u64) -> Option<[u8; COMM_LEN]> {
    let mut comm = [0u8; COMM_LEN];
    // SAFETY: a buffer of COMM_LEN bytes on our stack; the helper zeroes it
    // when it fails.
    unsafe { bpf_get_current_comm(comm.as_mut_ptr().cast(), COMM_LEN as u32) };
    if fold::counted_as_repeat(head, &comm, generation) {
        return None;
    }
    fold::remember_for_thread(head, &comm, generation);
    Some(comm)
}

/// Sends a first sighting that `first_sighting` let through (its head
/// completed since), its command name and the NUL-terminated path at the
/// user address `path` (0: none); counts the event as lost when the ring
/// buffer is full.
#[inline(always)]
pub fn send_first(head: &mut EventHead, comm: [u8; COMM_LEN], path: u64) {
    if fold::held_back(head, &comm) {
        return;
    }
    let Some(mut entry) = EVENTS.reserve::<DeviceAccessEvent>(0) else {
        count_lost_event(head.cgroup_id);
        why_dropped::ring_full(head);
        return;
    };
    if bench_cut::after(cut::RING_RESERVE) {
        entry.discard(0);
        return;
    }
    let event = entry.as_mut_ptr();
    // SAFETY: `event` is our reserved record; each field is written through
    // a raw pointer, never read, before it is submitted.
    unsafe {
        let path_buf = (&raw mut (*event).path).cast::<u8>();
        path_buf.write(0);
        if path != 0 {
            let copied =
                bpf_probe_read_user_str(path_buf.cast(), PATH_LEN as u32, path as *const _);
            // A copy that filled the buffer was cut (or fit exactly, which
            // it cannot tell apart).
            if copied >= PATH_LEN as i64 {
                head.flags |= FLAG_PATH_TRUNCATED;
                why_dropped::path_cut(head);
            } else if copied < 0 {
                why_dropped::path_unread(head, copied);
            }
        }
        if bench_cut::after(cut::PATH) {
            entry.discard(0);
            return;
        }
        // Denials only: the programs are what attribution evaluates. Its
        // reads pass through the v1 field, written after.
        let denied = head.hook_verdict < 0 || head.syscall_ret == EPERM;
        policy_programs::write_in_force(
            (&raw mut (*event).policy_programs).cast(),
            &raw mut (*event).v1_devices_cgroup,
            denied,
        );
        if bench_cut::after(cut::PROGRAMS_IN_FORCE) {
            entry.discard(0);
            return;
        }
        (&raw mut (*event).v1_devices_cgroup).write(v1_devices::current_cgroup());
        (&raw mut (*event).comm).write(comm);
        (&raw mut (*event).head).write(*head);
    }
    entry.submit(0);
    fold::sent(head, &comm);
}
