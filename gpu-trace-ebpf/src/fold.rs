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
//!
//! A retry storm is one thread denied the same device over and over, on
//! one CPU. Each CPU remembers the key its latest folded thread counted
//! under (THREAD_LAST_FOLDED): that thread's next problem with the same
//! device and outcome, in the same window, counts under it without the
//! cgroup and command name reads that make a key (each helper call costs
//! tens of ns where returns are mitigated, the command name most). The
//! key holds while no thread anywhere was renamed, moved to another
//! cgroup or exited since it was read (thread_identity.rs): then the
//! thread still has the cgroup and command name of its key, and its id is
//! still its own. Where the device hook reports at once, a repeat does not
//! read the clock either (a clock source read, the dearest helper here):
//! finding the tick (jiffies) its key was remembered in tells that its
//! window is not over, and it is counted at the remembered time, less
//! than a tick early. With fexit alone, a denial inside an open is counted
//! that way at the device check too, under the key its open's exit made,
//! and the exit only takes the mark it left (device_check.rs). Where BPF
//! has compare-and-exchange, such a repeat is not even added to REPEATS
//! but to a count in the CPU's slot, handed over later (slot_count.rs).

use core::{
    intrinsics::{atomic_xadd, AtomicOrdering},
    ptr::{read_volatile, write_volatile},
};

use aya_ebpf::helpers::generated::bpf_jiffies64;
use gpu_trace_common::{
    bench_cut as cut, CgroupWindow, DeviceFields, EventHead, HeldBackCount, HeldBackKey,
    RepeatCount, RepeatKey, ThreadLastFolded, COMM_LEN, FLAG_DEVICE_SEEN,
    HELD_BACK_KEYS_PER_CGROUP, KERNEL_BUDGET_PER_CGROUP, OPEN_CALLS_BY_RESULT, SYSCALL_NONE,
};

use crate::maps::{
    add_one, count_lost_event, open_calls_traced, slot_counts, CGROUP_SENT, FOLD_WINDOW_NS,
    HELD_BACK, IDENTITY_GENERATION, NOEXIST, REPEATS, THREAD_LAST_FOLDED,
};
use crate::{bench_cut, slot_count, why_dropped};

/// Twice the longest tick (HZ 100): how much of its window a key must have
/// left for a repeat in the same tick to count under it unread.
const TICK_MARGIN_NS: u64 = 20_000_000;

/// A hash map's answer to an insert when it is full.
const E2BIG: i32 = 7;

/// The key to fold `head` under, if it is a problem and folding is on.
#[inline(always)]
fn key(head: &EventHead, comm: &[u8; COMM_LEN]) -> Option<RepeatKey> {
    let window = FOLD_WINDOW_NS.load();
    (window != 0 && RepeatKey::is_problem(head)).then(|| RepeatKey::of(head, comm, window))
}

/// Whether repeats are folded at all (`--fold` not 0).
#[inline(always)]
pub fn folding() -> bool {
    FOLD_WINDOW_NS.load() != 0
}

/// This CPU's slot (THREAD_LAST_FOLDED) if it remembers a key of thread
/// `pid_tgid`: the first thing the short way compares, looked at before
/// anything else is read for it, and handed to counted_in_slot (before
/// 6.10 each look at a per-CPU value is a helper call).
#[inline(always)]
pub fn slot_of_thread(pid_tgid: u64) -> Option<*mut ThreadLastFolded> {
    THREAD_LAST_FOLDED
        .get_ptr_mut(0)
        // SAFETY: this CPU's slot, one word read in place.
        .filter(|&slot| unsafe { read_volatile(&raw const (*slot).pid_tgid) } == pid_tgid)
}

/// The identity generation, to be read before the cgroup and command name
/// of a key are: 0 while nothing keeps it (then no key is remembered).
#[inline(always)]
pub fn identity_generation() -> u64 {
    IDENTITY_GENERATION
        .get_ptr(0)
        // SAFETY: a map value, read once (other CPUs bump it).
        .map_or(0, |generation| unsafe { read_volatile(generation) })
}

/// What a repeat's short way compares with its thread's remembered key:
/// a head whose time and cgroup may be 0 (not read: the tick then tells
/// the window, the generation vouches for the cgroup), and its uid, asked
/// for only once the key matched (the latest uid goes with the count).
pub trait Sighting {
    fn head(&self) -> &EventHead;

    #[inline(always)]
    fn boot_ns(&self) -> u64 {
        self.head().boot_ns
    }

    #[inline(always)]
    fn cgroup_id(&self) -> u64 {
        self.head().cgroup_id
    }

    #[inline(always)]
    fn uid(&self) -> u32 {
        self.head().uid
    }
}

/// A head read whole (the open's exit).
impl Sighting for EventHead {
    #[inline(always)]
    fn head(&self) -> &EventHead {
        self
    }
}

/// True when `sighting` repeats the problem its thread last had folded on
/// this CPU, in the same window, under the same `generation`: counted under
/// that key, as `counted_as_repeat` would have counted it, and not to be
/// sent. False sends it the long way (which then decides).
#[inline(always)]
pub fn counted_as_thread_repeat(sighting: &impl Sighting, generation: u64) -> bool {
    // Checked again there; here before the lookup (a helper call before
    // 6.10) that every first sighting would pay with --fold 0.
    if generation == 0 || !folding() {
        return false;
    }
    THREAD_LAST_FOLDED
        .get_ptr_mut(0)
        .is_some_and(|slot| counted_in_slot(slot, sighting, generation))
}

/// counted_as_thread_repeat with this CPU's slot already in hand. The
/// sighting's time, cgroup and uid are read through `Sighting` alone: the
/// device hook's head holds placeholders there until its long way reads them.
#[inline(always)]
pub fn counted_in_slot(
    slot: *mut ThreadLastFolded,
    sighting: &impl Sighting,
    generation: u64,
) -> bool {
    let window = FOLD_WINDOW_NS.load();
    if generation == 0 || window == 0 {
        return false;
    }
    let head = sighting.head();
    let pid_tgid = pid_tgid_of(head);
    // SAFETY: this CPU's slot, read in place (volatile: in the order
    // written) between two reads of its sequence (see ThreadLastFolded).
    unsafe {
        let sequence = read_volatile(&raw const (*slot).sequence);
        let key = &raw const (*slot).key;
        let cgroup_differs = || read_volatile(&raw const (*key).cgroup_id) != sighting.cgroup_id();
        // Without the time (the device hook reads no clock for a repeat),
        // the tick tells that the window has not ended.
        let other_window = || {
            if sighting.boot_ns() == 0 {
                read_volatile(&raw const (*slot).tick) != bpf_jiffies64()
            } else {
                read_volatile(&raw const (*key).window) != sighting.boot_ns() / window
            }
        };
        if sequence & 1 != 0
            || read_volatile(&raw const (*slot).pid_tgid) != pid_tgid
            || read_volatile(&raw const (*slot).generation) != generation
            || other_window()
            || read_volatile(&raw const (*key).device) != head.device
            || read_volatile(&raw const (*key).hook_verdict) != head.hook_verdict
            || read_volatile(&raw const (*key).syscall_ret) != head.syscall_ret
            || read_volatile(&raw const (*key).flags) != head.flags
            || (sighting.cgroup_id() != 0 && cgroup_differs())
        {
            return false;
        }
        if bench_cut::after(cut::SHORT_WAY) {
            return true;
        }
        let boot_ns = if sighting.boot_ns() == 0 {
            read_volatile(&raw const (*slot).remembered_ns)
        } else {
            sighting.boot_ns()
        };
        let assignment = read_volatile(&raw const (*slot).assignment);
        if read_volatile(&raw const (*slot).sequence) != sequence {
            return false;
        }
        let uid = sighting.uid();
        if slot_counts() && slot_count::added(slot, assignment) {
            // Its latest; the thread is the slot's. (Should the slot take
            // another key meanwhile, these land with that key's count:
            // only "the latest" can mix so, as in add_repeat.)
            write_volatile(&raw mut (*slot).held_ns, boot_ns);
            write_volatile(&raw mut (*slot).held_uid, uid);
            let in_slot = &raw mut (*slot).in_slot;
            write_volatile(in_slot, read_volatile(in_slot) + 1);
        } else {
            // The lookup reads the key where it lies; the add waits until
            // the sequence shows nobody rewrote it meanwhile.
            let Some(count) = REPEATS.get_ptr_mut(&*key) else {
                return false;
            };
            if read_volatile(&raw const (*slot).sequence) != sequence {
                return false;
            }
            add_repeat(count, boot_ns, pid_tgid, uid, SYSCALL_NONE);
            // The key is in REPEATS: the next repeats count in the slot.
            if slot_counts() {
                slot_count::arm(slot, assignment);
            }
        }
        let by_thread = &raw mut (*slot).by_thread;
        write_volatile(by_thread, read_volatile(by_thread) + 1);
        // With fexit alone the device check counts the next repeat by the
        // tick (device_check::counted_at_check): once the tick moved on,
        // a repeat counted here, at the open's exit, keeps that going.
        // The time goes with the tick: the check's repeats are counted at it.
        // Rewritten only while the slot is still this thread's, unchanged
        // since it was read (a program preempting this one may have
        // remembered another key meanwhile).
        if sighting.boot_ns() != 0 && open_calls_traced() == OPEN_CALLS_BY_RESULT {
            let tick =
                tick_to_remember(read_volatile(&raw const (*key).window), sighting.boot_ns());
            if read_volatile(&raw const (*slot).tick) != tick
                && read_volatile(&raw const (*slot).sequence) == sequence
                && read_volatile(&raw const (*slot).pid_tgid) == pid_tgid
                && claimed(slot, sequence)
            {
                write_volatile(&raw mut (*slot).remembered_ns, sighting.boot_ns());
                write_volatile(&raw mut (*slot).tick, tick);
                write_volatile(&raw mut (*slot).sequence, sequence + 2);
            }
        }
    }
    true
}

/// True when this problem was counted as a repeat and must not be sent.
#[inline(always)]
pub fn counted_as_repeat(head: &EventHead, comm: &[u8; COMM_LEN], generation: u64) -> bool {
    let Some(key) = key(head, comm) else {
        return false;
    };
    let Some(count) = REPEATS.get_ptr_mut(&key) else {
        return false;
    };
    add_repeat(
        count,
        head.boot_ns,
        pid_tgid_of(head),
        head.uid,
        head.syscall,
    );
    remember_key_for_thread(head, &key, generation);
    true
}

/// One more repeat in `count`, this one the latest.
#[inline(always)]
fn add_repeat(count: *mut RepeatCount, boot_ns: u64, pid_tgid: u64, uid: u32, syscall: u16) {
    // SAFETY: a map value, alive until this program returns. Programs on
    // other CPUs (and, on preemptible kernels, other tasks on this one)
    // count the same key: the count goes up atomically (BPF's xadd); the
    // rest is "the latest", where a torn mix of two repeats does no harm.
    unsafe {
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*count).repeats, 1);
        (*count).last_ns = boot_ns;
        (*count).last_pid = (pid_tgid >> 32) as u32;
        (*count).last_tid = pid_tgid as u32;
        (*count).last_uid = uid;
        (*count).last_syscall = syscall;
    }
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

/// Makes the key of `head`, a first sighting about to be sent, this CPU's
/// latest folded thread's (see counted_as_thread_repeat), before it is
/// made: should the event be held back or lost, no key is made, and the
/// short way's lookup finds none.
#[inline(always)]
pub fn remember_for_thread(head: &EventHead, comm: &[u8; COMM_LEN], generation: u64) {
    if let Some(key) = key(head, comm) {
        remember_key_for_thread(head, &key, generation);
    }
}

/// Makes `key`, `head`'s, this CPU's latest folded thread's. A BPF
/// function of its own: inlined, it took the open exits past the
/// verifier's 512 bytes of stack for a chain of calls.
#[inline(never)]
fn remember_key_for_thread(head: &EventHead, key: &RepeatKey, generation: u64) {
    if generation == 0 {
        return;
    }
    let Some(slot) = THREAD_LAST_FOLDED.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's slot, written in order (volatile) between two
    // writes of its sequence; left alone while another write is under way.
    unsafe {
        let sequence = read_volatile(&raw const (*slot).sequence);
        if sequence & 1 != 0 || !claimed(slot, sequence) {
            return;
        }
        if slot_counts() {
            // The hand-over first, then the assignment, then the key: the
            // order userspace's reading of the slots relies on.
            let assignment = slot_count::hand_over(slot);
            write_volatile(&raw mut (*slot).assignment, assignment);
        }
        write_volatile(&raw mut (*slot).pid_tgid, pid_tgid_of(head));
        copy_key(key, &raw mut (*slot).key);
        write_volatile(&raw mut (*slot).generation, generation);
        write_volatile(&raw mut (*slot).remembered_ns, head.boot_ns);
        write_volatile(
            &raw mut (*slot).tick,
            tick_to_remember(key.window, head.boot_ns),
        );
        write_volatile(&raw mut (*slot).sequence, sequence + 2);
    }
}

/// Copies `key` into a slot a word at a time (volatile, in the slot's
/// order of writes). Copied whole, the key went through a stack copy of
/// its own, which 5.10 counts against the 512 bytes of a chain of calls.
///
/// # Safety
/// `to` is a slot's key, claimed by this program (its sequence odd).
#[inline(always)]
unsafe fn copy_key(key: &RepeatKey, to: *mut RepeatKey) {
    const WORDS: usize = size_of::<RepeatKey>() / size_of::<u64>();
    let from = (key as *const RepeatKey).cast::<u64>();
    let to = to.cast::<u64>();
    for word in 0..WORDS {
        // SAFETY: both are RepeatKeys (8-aligned, WORDS words long).
        unsafe { write_volatile(to.add(word), read_volatile(from.add(word))) };
    }
}

/// The tick to remember a key of `window` in, at `boot_ns`: the current
/// one (read after that time; a tick is at most 10 ms, HZ >= 100) while the
/// window has TICK_MARGIN_NS left, else one no repeat finds.
#[inline(always)]
fn tick_to_remember(window: u64, boot_ns: u64) -> u64 {
    let window_end = (window + 1).wrapping_mul(FOLD_WINDOW_NS.load());
    if window_end.saturating_sub(boot_ns) > TICK_MARGIN_NS {
        // SAFETY: a helper without arguments.
        unsafe { bpf_jiffies64() }
    } else {
        u64::MAX
    }
}

/// Makes the slot's sequence odd (it was `sequence`): this program alone
/// writes the slot until it is even again. Where BPF has no
/// compare-and-exchange, a plain write: two programs on one CPU may then
/// both write (one preempted between its look and its write).
#[inline(always)]
fn claimed(slot: *mut ThreadLastFolded, sequence: u64) -> bool {
    if slot_counts() {
        return slot_count::claimed(slot, sequence);
    }
    // SAFETY: this CPU's slot, a map value alive until this program returns.
    unsafe { write_volatile(&raw mut (*slot).sequence, sequence + 1) };
    true
}

#[inline(always)]
fn pid_tgid_of(head: &EventHead) -> u64 {
    ((head.pid as u64) << 32) | head.tid as u64
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
    // A failure before any device check goes under that one at once: its
    // device fields hold a path's digest (unresolved_path.rs), and a
    // summary shows no path.
    let own_key = after <= KERNEL_BUDGET_PER_CGROUP + HELD_BACK_KEYS_PER_CGROUP
        && head.flags & FLAG_DEVICE_SEEN != 0;
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
