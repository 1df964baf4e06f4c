//! A repeat counted in its CPU's slot (THREAD_LAST_FOLDED), where BPF has
//! compare-and-exchange (5.12; the loader's SLOT_COUNTS). A retry storm's
//! threads on several CPUs then each add to their own cache line, not all
//! to the one count in REPEATS, and a repeat makes no hash lookup.
//!
//! Exact as REPEATS alone was: `held` carries the tag of the key it counts
//! for (the slot's assignment), so a repeat's add is one compare-and-exchange
//! that fails once the slot has taken another key, even from a program
//! preempted between its compare and its add. Taking another key exchanges
//! `held` for the next tag, adds the old count to REPEATS, and only then
//! writes the next assignment and key (fold.rs): userspace, comparing a
//! slot's tag before and after it reads the table, counts each repeat in
//! one place or the other, never both (gpu-trace's kernel/slot_counts.rs).
//! A slot counts only once its key is known to be in REPEATS (armed):
//! nothing is counted for a first that was lost.

use core::{
    intrinsics::{atomic_cxchg, atomic_xadd, atomic_xchg, AtomicOrdering},
    ptr::{read_volatile, write_volatile},
};

use gpu_trace_common::{held, ThreadLastFolded, SYSCALL_NONE};

use crate::maps::REPEATS;

/// Tries left to a repeat's add when other programs on this CPU add too.
const ADD_TRIES: u32 = 3;

/// Adds one repeat to `slot`'s count if it still counts for `assignment`.
/// `slot` is this CPU's THREAD_LAST_FOLDED value, as for every function here.
#[inline(always)]
pub fn added(slot: *mut ThreadLastFolded, assignment: u64) -> bool {
    // SAFETY: a map value, alive until this program returns; other
    // programs on this CPU change it only atomically.
    unsafe {
        let cell = &raw mut (*slot).held;
        let mut seen = read_volatile(cell);
        for _ in 0..ADD_TRIES {
            if !held::armed_for(seen, assignment) || held::count(seen) == held::COUNT_LIMIT {
                return false;
            }
            let (was, swapped) = atomic_cxchg::<
                u64,
                { AtomicOrdering::SeqCst },
                { AtomicOrdering::SeqCst },
            >(cell, seen, seen + 1);
            if swapped {
                return true;
            }
            seen = was;
        }
    }
    false
}

/// Lets `slot` count for `assignment` from now on: its key was just found
/// in REPEATS. Does nothing if the slot has taken another key since.
#[inline(always)]
pub fn arm(slot: *mut ThreadLastFolded, assignment: u64) {
    let unarmed = held::unarmed(assignment);
    // SAFETY: as in `added`.
    let _ = unsafe {
        atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(
            &raw mut (*slot).held,
            unarmed,
            unarmed | held::ARMED,
        )
    };
}

/// Makes `slot`'s sequence odd if it still is `sequence`: this program
/// alone writes the slot until it makes it even again.
#[inline(always)]
pub fn claimed(slot: *mut ThreadLastFolded, sequence: u64) -> bool {
    // SAFETY: as in `added`.
    unsafe {
        atomic_cxchg::<u64, { AtomicOrdering::SeqCst }, { AtomicOrdering::SeqCst }>(
            &raw mut (*slot).sequence,
            sequence,
            sequence + 1,
        )
        .1
    }
}

/// With the slot claimed, before it takes its next key (assignment + 1):
/// its count goes to its key in REPEATS. A key no longer there was over and
/// collected, its count with it (userspace reads the slots too). Returns
/// the assignment to write with the next key.
#[inline(always)]
pub fn hand_over(slot: *mut ThreadLastFolded) -> u64 {
    // SAFETY: as in `added`; the slot is claimed (odd), so only this
    // program writes its key and latest fields.
    unsafe {
        let assignment = read_volatile(&raw const (*slot).assignment);
        let next = assignment.wrapping_add(1);
        let old = atomic_xchg::<u64, { AtomicOrdering::SeqCst }>(
            &raw mut (*slot).held,
            held::unarmed(next),
        );
        let repeats = held::count(old);
        if repeats != 0 && held::armed_for(old, assignment) {
            if let Some(count) = REPEATS.get_ptr_mut(&(*slot).key) {
                atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(
                    &raw mut (*count).repeats,
                    repeats,
                );
                // "The latest", as in fold.rs's add_repeat: a torn mix does no harm.
                let held_ns = read_volatile(&raw const (*slot).held_ns);
                if held_ns >= (*count).last_ns {
                    let pid_tgid = read_volatile(&raw const (*slot).pid_tgid);
                    (*count).last_ns = held_ns;
                    (*count).last_pid = (pid_tgid >> 32) as u32;
                    (*count).last_tid = pid_tgid as u32;
                    (*count).last_uid = read_volatile(&raw const (*slot).held_uid);
                    (*count).last_syscall = SYSCALL_NONE;
                }
            }
        }
        write_volatile(&raw mut (*slot).held_ns, 0);
        next
    }
}
