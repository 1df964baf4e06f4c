//! What the kernel programs drop, count instead of send, evict or cut,
//! said through aya-log for `--bpf-log`. Each record starts with its kind
//! (userspace rate-limits by it) and names the ids that match it to a
//! process: pid, cgroup id, major:minor.
//!
//! Userspace sets aya-log's level (`AYA_LOG_LEVEL`, read-only data) before
//! loading: at `off` each record's body is dead code to the verifier, what
//! is left a call that returns, and none of them is on the path of an
//! ordinary event.
//!
//! Each record is made in a function of its own (a BPF-to-BPF call), from
//! plain numbers: inlined into the device hook's large frame, aya-log's
//! copies read stack bytes that kernels before 6.4 take for uninitialised
//! (fexit on 5.10 was refused so).

use aya_log_ebpf::{debug, warn};
use gpu_trace_common::EventHead;

/// Records about one event: a wrapper the call sites use, and the record
/// made in a function of its own from the event's ids.
macro_rules! records_of_an_event {
    ($($(#[$doc:meta])* $name:ident => $level:ident!($text:literal);)*) => {
        $(
            $(#[$doc])*
            #[inline(always)]
            pub fn $name(head: &EventHead) {
                made::$name(head.pid, head.cgroup_id, head.device.major, head.device.minor);
            }
        )*

        mod made {
            use aya_log_ebpf::{debug, warn};

            $(
                #[inline(never)]
                pub fn $name(pid: u32, cgroup_id: u64, major: u32, minor: u32) {
                    $level!(&(), $text, pid, cgroup_id, major, minor);
                }
            )*
        }
    };
}

records_of_an_event! {
    /// The ring buffer was full: the event is lost (and counted).
    ring_full => warn!("ring-full: event lost: pid {} cgroup {} device {}:{}");
    /// Past its cgroup's budget, and no room left to count it by key: the
    /// problem is counted as lost for its cgroup.
    held_back_table_full => warn!("held-back-full: event lost: pid {} cgroup {} device {}:{}");
    /// A cgroup past its budget of first sightings for the window: its
    /// problems are counted by key from now on, not sent (said once per key).
    held_back => debug!("held-back: over its cgroup's budget, counted not sent: pid {} cgroup {} device {}:{}");
    /// The table of repeats is full: this problem's repeats will be sent
    /// one by one rather than counted.
    repeats_table_full => debug!("repeats-full: repeats sent, not counted: pid {} cgroup {} device {}:{}");
    /// The path filled the event's buffer: sent cut short.
    path_cut => debug!("path-cut: path cut to the event's 256 bytes: pid {} cgroup {} device {}:{}");
}

/// The path could not be read from the process's memory: sent without.
#[inline(always)]
pub fn path_unread(head: &EventHead, error: i64) {
    path_unread_record(
        error,
        head.pid,
        head.cgroup_id,
        head.device.major,
        head.device.minor,
    );
}

#[inline(never)]
fn path_unread_record(error: i64, pid: u32, cgroup_id: u64, major: u32, minor: u32) {
    debug!(
        &(),
        "path-unread: sent without a path (error {}): pid {} cgroup {} device {}:{}",
        error,
        pid,
        cgroup_id,
        major,
        minor
    );
}

/// Another thread rewrote the path between the device check and the
/// call's end: sent without a path.
#[inline(never)]
pub fn path_changed(pid: u32, cgroup_id: u64, major: u32, minor: u32) {
    debug!(
        &(),
        "path-changed: path rewritten during the call, sent without: pid {} cgroup {} device {}:{}",
        pid,
        cgroup_id,
        major,
        minor
    );
}

/// A cgroup made while tracing whose note could not be kept: it is named
/// by its id alone if it is gone before userspace asks.
#[inline(never)]
pub fn cgroup_note_lost(cgroup_id: u64) {
    debug!(
        &(),
        "cgroup-note-lost: no room for the note of cgroup {}", cgroup_id
    );
}
