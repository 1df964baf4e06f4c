//! The repeats each CPU counted in its own slot (gpu-trace-ebpf's
//! slot_count.rs) and has not yet handed to the repeats table: read before
//! and after the table, so that each is counted once.
//!
//! A CPU hands its count over inside its slot's sequence (odd meanwhile).
//! Where a slot reads even, and the same, before and after the table was
//! read, no hand-over happened in between: its count is not in the table
//! and is added (settled). Where it changed, its count may be in the table
//! or not: it is left out, and its key is not closed this time (it would
//! be counted short). A slot that never reads even before the table leaves
//! every key open this time: which key it is handing over is unknown.

use aya::maps::{MapData, PerCpuArray};
use gpu_trace_common::{held, RepeatCount, RepeatKey, ThreadLastFolded, SYSCALL_NONE};
use rustc_hash::{FxHashMap, FxHashSet};

/// Reads of the slots before the table's, to find each one even.
const READS_BEFORE: usize = 8;

/// What the slots add to the table, from one read before and one after.
#[derive(Default)]
pub struct Settled {
    /// Each key's repeats held in settled slots, with the latest of them.
    pub held: FxHashMap<RepeatKey, RepeatCount>,
    /// Keys of slots that changed around the table's read: not to be closed.
    pub unsettled: FxHashSet<RepeatKey>,
    /// A slot was being written at every read before: no key may be closed.
    pub unknown: bool,
}

impl Settled {
    /// Whether `key`'s count, the table's and these, is whole.
    pub fn may_close(&self, key: &RepeatKey) -> bool {
        !self.unknown && !self.unsettled.contains(key)
    }
}

/// Each CPU's slot (all CPUs, in order); empty if the map cannot be read.
pub fn read(slots: &PerCpuArray<MapData, ThreadLastFolded>) -> Vec<ThreadLastFolded> {
    slots
        .get(&0, 0)
        .map(|per_cpu| per_cpu.iter().copied().collect())
        .unwrap_or_default()
}

/// Each CPU's slot as first read even (not being written), in up to
/// READS_BEFORE reads; None for a CPU whose slot never was.
pub fn read_before(
    slots: &PerCpuArray<MapData, ThreadLastFolded>,
) -> Vec<Option<ThreadLastFolded>> {
    let mut found: Vec<Option<ThreadLastFolded>> = Vec::new();
    for _ in 0..READS_BEFORE {
        let now = read(slots);
        found.resize(now.len(), None);
        for (kept, slot) in found.iter_mut().zip(now) {
            if kept.is_none() && slot.sequence % 2 == 0 {
                *kept = Some(slot);
            }
        }
        if found.iter().all(Option::is_some) {
            break;
        }
    }
    found
}

/// What the slots hold that the table, read between `before` and `after`,
/// does not.
pub fn settled(before: &[Option<ThreadLastFolded>], after: &[ThreadLastFolded]) -> Settled {
    let mut out = Settled::default();
    for (cpu, first) in before.iter().enumerate() {
        let Some(first) = first else {
            out.unknown = true;
            continue;
        };
        let then = after.get(cpu);
        if then.is_none_or(|then| then.sequence != first.sequence) {
            // Handing over the first's key, or holding the next's already.
            out.unsettled.insert(first.key);
            out.unsettled.extend(then.map(|then| then.key));
            continue;
        }
        let repeats = held::count(first.held);
        if repeats == 0 || !held::armed_for(first.held, first.assignment) {
            continue;
        }
        let count = out.held.entry(first.key).or_default();
        count.repeats += repeats;
        if first.held_ns >= count.last_ns {
            count.last_ns = first.held_ns;
            count.last_pid = (first.pid_tgid >> 32) as u32;
            count.last_tid = first.pid_tgid as u32;
            count.last_uid = first.held_uid;
            count.last_syscall = SYSCALL_NONE;
        }
    }
    out
}

/// The table's count of a key with its slots' added: the sum, and the
/// latest of the two.
pub fn with_held(table: RepeatCount, held: Option<&RepeatCount>) -> RepeatCount {
    let Some(held) = held else {
        return table;
    };
    let latest = if held.last_ns >= table.last_ns {
        held
    } else {
        &table
    };
    RepeatCount {
        repeats: table.repeats + held.repeats,
        ..*latest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(cgroup_id: u64) -> RepeatKey {
        RepeatKey {
            cgroup_id,
            window: 7,
            device: Default::default(),
            flags: 0,
            _pad: 0,
            hook_verdict: -1,
            syscall_ret: 0,
            comm: [0; gpu_trace_common::COMM_LEN],
        }
    }

    fn slot(sequence: u64, key_of: u64, assignment: u64, held: u64) -> ThreadLastFolded {
        ThreadLastFolded {
            sequence,
            pid_tgid: (10 << 32) | 11,
            key: key(key_of),
            assignment,
            held,
            held_ns: 500,
            held_uid: 1000,
            ..Default::default()
        }
    }

    fn armed(assignment: u64, count: u64) -> u64 {
        held::unarmed(assignment) | held::ARMED | count
    }

    #[test]
    fn a_settled_armed_slot_adds_its_count_and_latest() {
        let s = slot(4, 1, 3, armed(3, 5));
        let out = settled(&[Some(s)], &[s]);
        let count = out.held[&key(1)];
        assert_eq!(
            (
                count.repeats,
                count.last_ns,
                count.last_pid,
                count.last_tid,
                count.last_uid
            ),
            (5, 500, 10, 11, 1000)
        );
        assert!(out.may_close(&key(1)));
    }

    #[test]
    fn an_unarmed_slot_or_one_of_another_assignment_adds_nothing() {
        let unarmed = slot(4, 1, 3, held::unarmed(3));
        let stale = slot(4, 1, 4, armed(3, 5));
        let out = settled(&[Some(unarmed), Some(stale)], &[unarmed, stale]);
        assert!(out.held.is_empty());
    }

    #[test]
    fn a_slot_that_changed_around_the_table_adds_nothing_and_keeps_both_keys_open() {
        let first = slot(4, 1, 3, armed(3, 5));
        let then = slot(6, 2, 4, held::unarmed(4));
        let out = settled(&[Some(first)], &[then]);
        assert!(out.held.is_empty());
        assert!(!out.may_close(&key(1)));
        assert!(!out.may_close(&key(2)));
        assert!(out.may_close(&key(3)));
    }

    #[test]
    fn a_slot_never_read_even_keeps_every_key_open() {
        let out = settled(&[None], &[slot(5, 1, 3, 0)]);
        assert!(!out.may_close(&key(9)));
    }

    #[test]
    fn two_cpus_on_one_key_add_up_and_the_table_keeps_the_later_latest() {
        let a = slot(2, 1, 1, armed(1, 3));
        let b = ThreadLastFolded {
            held_ns: 900,
            held_uid: 7,
            ..slot(8, 1, 9, armed(9, 4))
        };
        let out = settled(&[Some(a), Some(b)], &[a, b]);
        let table = RepeatCount {
            repeats: 10,
            last_ns: 1000,
            last_uid: 1,
            ..Default::default()
        };
        let whole = with_held(table, out.held.get(&key(1)));
        assert_eq!(
            (whole.repeats, whole.last_ns, whole.last_uid),
            (17, 1000, 1)
        );
        let older_table = RepeatCount {
            last_ns: 100,
            ..table
        };
        let whole = with_held(older_table, out.held.get(&key(1)));
        assert_eq!((whole.repeats, whole.last_ns, whole.last_uid), (17, 900, 7));
    }
}
