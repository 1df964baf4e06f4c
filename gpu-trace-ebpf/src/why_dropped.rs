//! What the kernel programs drop, count instead of send, evict or cut,
//! said through aya-log for `--bpf-log`. Each record starts with its kind
//! (userspace rate-limits by it), says which program made it ("in program
//! N", a `PROGRAM_*` number userspace prints by name), and names the ids
//! that match it to a process: pid, cgroup id, major:minor.
//!
//! Userspace sets the level (`DROP_RECORD_LEVEL`, and aya-log's own
//! `AYA_LOG_LEVEL`; read-only data) before loading: at `off` each record's
//! body is dead code to the verifier, what is left a call that returns,
//! and none of them is on the path of an ordinary event. Each kind makes
//! at most `DROP_RECORDS_PER_SECOND` records, the rest counted: aya-log's
//! ring (128 KiB) is never the flood, and its reader never falls behind.
//!
//! Each record is made in a function of its own (a BPF-to-BPF call), from
//! plain numbers: inlined into the device hook's large frame, aya-log's
//! copies read stack bytes that kernels before 6.4 take for uninitialised
//! (fexit on 5.10 was refused so).

use core::intrinsics::{atomic_xadd, AtomicOrdering};

use aya_ebpf::{helpers::bpf_ktime_get_boot_ns, macros::map, maps::Array, Global};
use aya_log_ebpf::{debug, warn};
use gpu_trace_common::{DropRecordBudget, EventHead, DROP_RECORDS_PER_SECOND, DROP_RECORD_KINDS};

/// `--bpf-log`'s level (aya-log's numbers; 0: off). Set by userspace
/// before loading, like aya-log's own: at 0 the verifier drops the rest of
/// every record function.
#[unsafe(no_mangle)]
static DROP_RECORD_LEVEL: Global<u8> = Global::new(0);

/// Each kind's budget of records a second, and the count of those left out.
#[map]
static DROP_RECORD_BUDGET: Array<DropRecordBudget> =
    Array::with_max_entries(DROP_RECORD_KINDS.len() as u32, 0);

const WARN: u8 = 2;
const DEBUG: u8 = 4;

/// Whether a record of `kind` at `level` is made now: the level is on and
/// the kind's budget for this second is not spent (else it is counted).
/// The budget is shared by all CPUs without a lock: two may both take the
/// last place, which only lets a record more through.
#[inline(always)]
fn admitted(kind: u32, level: u8) -> bool {
    if DROP_RECORD_LEVEL.load() < level {
        return false;
    }
    let Some(budget) = DROP_RECORD_BUDGET.get_ptr_mut(kind) else {
        return false;
    };
    // SAFETY: a helper without arguments; `budget` is a map value, alive
    // until this program returns.
    unsafe {
        let second = bpf_ktime_get_boot_ns() / 1_000_000_000;
        if (*budget).second != second {
            (*budget).second = second;
            (*budget).made = 0;
        }
        if (*budget).made < DROP_RECORDS_PER_SECOND {
            (*budget).made += 1;
            return true;
        }
        atomic_xadd::<u64, u64, { AtomicOrdering::Relaxed }>(&raw mut (*budget).left_out, 1);
    }
    false
}

/// The device as one number: BPF-to-BPF calls take five arguments at most.
/// 0:0 where there is none (type 0: the fields hold a path's digest,
/// unresolved_path.rs).
#[inline(always)]
fn device_of(head: &EventHead) -> u64 {
    if head.device.dev_type == 0 {
        return 0;
    }
    (u64::from(head.device.major) << 32) | u64::from(head.device.minor)
}

/// Records about one event: a wrapper the call sites use, and the record
/// made in a function of its own from the event's ids.
macro_rules! records_of_an_event {
    ($($(#[$doc:meta])* $name:ident ($kind:expr, $number:expr) => $level:ident!($text:literal);)*) => {
        $(
            $(#[$doc])*
            #[inline(always)]
            pub fn $name(head: &EventHead) {
                made::$name(head.program, head.pid, head.cgroup_id, device_of(head));
            }
        )*

        mod made {
            use aya_log_ebpf::{debug, warn};

            use super::*;

            $(
                #[inline(never)]
                pub fn $name(program: u32, pid: u32, cgroup_id: u64, device: u64) {
                    if admitted($kind, $number) {
                        let (major, minor) = ((device >> 32) as u32, device as u32);
                        $level!(&(), $text, program, pid, cgroup_id, major, minor);
                    }
                }
            )*
        }
    };
}

records_of_an_event! {
    /// The ring buffer was full: the event is lost (and counted).
    ring_full(0, WARN) => warn!("ring-full: event lost in program {}: pid {} cgroup {} device {}:{}");
    /// Past its cgroup's budget, and no room left to count it by key: the
    /// problem is counted as lost for its cgroup.
    held_back_table_full(1, WARN) => warn!("held-back-full: event lost in program {}: pid {} cgroup {} device {}:{}");
    /// A cgroup past its budget of first sightings for the window: its
    /// problems are counted by key from now on, not sent (said once per key).
    held_back(2, DEBUG) => debug!("held-back: over its cgroup's budget, counted not sent in program {}: pid {} cgroup {} device {}:{}");
    /// The table of repeats is full: this problem's repeats will be sent
    /// one by one rather than counted.
    repeats_table_full(3, DEBUG) => debug!("repeats-full: repeats sent, not counted in program {}: pid {} cgroup {} device {}:{}");
    /// The path filled the event's buffer: sent cut short.
    path_cut(4, DEBUG) => debug!("path-cut: path cut to the event's 256 bytes in program {}: pid {} cgroup {} device {}:{}");
}

/// The path could not be read from the process's memory: sent without.
#[inline(always)]
pub fn path_unread(head: &EventHead, error: i64) {
    path_unread_record(
        error,
        head.program,
        head.pid,
        head.cgroup_id,
        device_of(head),
    );
}

#[inline(never)]
fn path_unread_record(error: i64, program: u32, pid: u32, cgroup_id: u64, device: u64) {
    if admitted(5, DEBUG) {
        let (major, minor) = ((device >> 32) as u32, device as u32);
        debug!(
            &(),
            "path-unread: sent without a path (error {}) in program {}: pid {} cgroup {} device {}:{}",
            error,
            program,
            pid,
            cgroup_id,
            major,
            minor
        );
    }
}

/// Another thread rewrote the path between the device check and the
/// call's end: sent without a path.
#[inline(never)]
pub fn path_changed(program: u32, pid: u32, cgroup_id: u64, major: u32, minor: u32) {
    if admitted(6, DEBUG) {
        debug!(
            &(),
            "path-changed: path rewritten during the call, sent without in program {}: pid {} cgroup {} device {}:{}",
            program,
            pid,
            cgroup_id,
            major,
            minor
        );
    }
}

/// An open call's entry was gone at its exit: evicted from the full table
/// of calls in flight (more threads than it holds opened files since), or
/// the call began before gpu-trace attached. Its result is not seen.
#[inline(never)]
pub fn in_flight_evicted(program: u32, pid: u32, tid: u32) {
    if admitted(7, DEBUG) {
        debug!(
            &(),
            "in-flight-evicted: an open call's entry was gone at its exit, its result unseen in program {}: pid {} tid {}",
            program,
            pid,
            tid
        );
    }
}
