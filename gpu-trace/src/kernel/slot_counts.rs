//! The repeats each CPU counted in its own slot (gpu-trace-ebpf's
//! slot_count.rs) and has not yet handed to the repeats table: read before
//! and after the table, so that each is counted once.
//!
//! A CPU hands its count over inside its slot's sequence (odd meanwhile).
//! Where a slot reads even, and the same, before and after the table was
//! read, no hand-over happened in between: its count is not in the table
//! and is added (settled). Where it changed, its count may be in the table
//! or not: it is left out this time, to be counted by a later read.
//!
//! A key is closed (removed from the table) only when no slot may still
//! hand repeats to it: none holds any of it, none changed around the read
//! while holding it, and none was mid-write at every read without a copy
//! from before that tells which key it was handing over.

use std::time::Duration;

use aya::maps::{MapData, PerCpuArray};
use gpu_trace_common::{held, RepeatCount, RepeatKey, ThreadLastFolded, SYSCALL_NONE};
use rustc_hash::{FxHashMap, FxHashSet};

/// Reads of the slots before the table's, to find each one even, and the
/// pause between two (a writer preempted mid-write gets to finish).
const READS_BEFORE: usize = 8;
const BETWEEN_READS: Duration = Duration::from_micros(200);

/// What the slots add to the table, from one read before and one after.
#[derive(Default)]
pub struct Settled {
    /// Each key's repeats held in settled slots, with the latest of them.
    pub held: FxHashMap<RepeatKey, RepeatCount>,
    /// Keys not to be closed this time: a slot changed around the table's
    /// read (its count may be in the table or not), or still holds repeats
    /// of it (their hand-over must find the key, not another's that took
    /// its place in the table).
    pub open: FxHashSet<RepeatKey>,
    /// A slot was being written at every read before, and which key it was
    /// handing over is unknown: no key may be closed.
    pub unknown: bool,
    /// A slot's count was left out this time (it changed around the table's
    /// read): the next read counts it.
    pub left_out: bool,
}

impl Settled {
    /// Whether `key`'s count, the table's and these, is whole and stays so.
    pub fn may_close(&self, key: &RepeatKey) -> bool {
        !self.unknown && !self.open.contains(key)
    }

    /// Whether every slot was settled: nothing left out this time.
    pub fn whole(&self) -> bool {
        !self.unknown && !self.left_out
    }
}

/// One CPU's slot as read before the table.
#[derive(Clone, Copy)]
pub enum Before {
    /// Read even: not being written.
    Even(ThreadLastFolded),
    /// Odd at every read, one write past the last even copy: handing over
    /// that copy's key, if anything.
    HandingOver(ThreadLastFolded),
    /// Odd at every read, with no even copy to tell its key.
    Unknown,
}

/// The slots of every CPU and what was last read of each.
pub struct Slots {
    map: PerCpuArray<MapData, ThreadLastFolded>,
    last_even: Vec<Option<ThreadLastFolded>>,
}

impl Slots {
    pub fn new(map: PerCpuArray<MapData, ThreadLastFolded>) -> Self {
        Self {
            map,
            last_even: Vec::new(),
        }
    }

    /// Each CPU's slot, in order; None if the map cannot be read.
    pub fn read(&self) -> Option<Vec<ThreadLastFolded>> {
        let per_cpu = self.map.get(&0, 0).ok()?;
        Some(per_cpu.iter().copied().collect())
    }

    /// Each CPU's slot as first read even in up to READS_BEFORE reads; None
    /// if the map cannot be read.
    pub fn before(&mut self) -> Option<Vec<Before>> {
        let mut found: Vec<Option<ThreadLastFolded>> = Vec::new();
        let mut odd: Vec<u64> = Vec::new();
        for read in 0..READS_BEFORE {
            if read > 0 {
                std::thread::sleep(BETWEEN_READS);
            }
            let now = self.read()?;
            found.resize(now.len(), None);
            odd.resize(now.len(), 0);
            for ((kept, odd), slot) in found.iter_mut().zip(&mut odd).zip(now) {
                if kept.is_some() {
                    continue;
                }
                if slot.sequence % 2 == 0 {
                    *kept = Some(slot);
                } else {
                    *odd = slot.sequence;
                }
            }
            if found.iter().all(Option::is_some) {
                break;
            }
        }
        self.last_even.resize(found.len(), None);
        let before = found
            .iter()
            .zip(&odd)
            .zip(&mut self.last_even)
            .map(|((found, &odd), last)| match (found, *last) {
                (Some(slot), _) => {
                    *last = Some(*slot);
                    Before::Even(*slot)
                }
                (None, Some(even)) if even.sequence + 1 == odd => Before::HandingOver(even),
                (None, _) => Before::Unknown,
            })
            .collect();
        Some(before)
    }

    /// Repeats counted under their thread's remembered key, on every CPU
    /// (the short way, fold.rs).
    pub fn by_thread(&self) -> u64 {
        self.read()
            .unwrap_or_default()
            .iter()
            .map(|slot| slot.by_thread)
            .sum()
    }

    /// Of those, the repeats counted in their CPU's own count (held).
    pub fn in_slot(&self) -> u64 {
        self.read()
            .unwrap_or_default()
            .iter()
            .map(|slot| slot.in_slot)
            .sum()
    }
}

/// The key of `slot` if it holds repeats that a hand-over would add to it.
fn holds(slot: &ThreadLastFolded) -> Option<RepeatKey> {
    (held::count(slot.held) != 0 && held::armed_for(slot.held, slot.assignment)).then_some(slot.key)
}

/// What the slots hold that the table, read between `before` and `after`,
/// does not (either read None: nothing known, nothing closed).
pub fn settled(before: Option<&[Before]>, after: Option<&[ThreadLastFolded]>) -> Settled {
    let mut out = Settled::default();
    let (Some(before), Some(after)) = (before, after) else {
        out.unknown = true;
        return out;
    };
    out.open.extend(after.iter().filter_map(holds));
    for (cpu, first) in before.iter().enumerate() {
        let first = match first {
            Before::Even(first) => first,
            Before::HandingOver(last) => {
                out.open.insert(last.key);
                out.left_out = true;
                continue;
            }
            Before::Unknown => {
                out.unknown = true;
                continue;
            }
        };
        let then = after.get(cpu);
        if then.is_none_or(|then| then.sequence != first.sequence) {
            // Handing over the first's key, or holding the next's already.
            out.open.insert(first.key);
            out.open.extend(then.map(|then| then.key));
            out.left_out = true;
            continue;
        }
        let Some(key) = holds(first) else {
            continue;
        };
        out.open.insert(key);
        let count = out.held.entry(key).or_default();
        count.repeats += held::count(first.held);
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

    fn between(before: &[Before], after: &[ThreadLastFolded]) -> Settled {
        settled(Some(before), Some(after))
    }

    #[test]
    fn a_settled_armed_slot_adds_its_count_and_latest_and_keeps_its_key() {
        let s = slot(4, 1, 3, armed(3, 5));
        let out = between(&[Before::Even(s)], &[s]);
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
        assert!(out.whole());
        assert!(!out.may_close(&key(1)), "its hand-over is still to come");
    }

    #[test]
    fn an_unarmed_slot_or_one_of_another_assignment_adds_nothing_and_closes_freely() {
        let unarmed = slot(4, 1, 3, held::unarmed(3));
        let stale = slot(4, 2, 4, armed(3, 5));
        let out = between(
            &[Before::Even(unarmed), Before::Even(stale)],
            &[unarmed, stale],
        );
        assert!(out.held.is_empty());
        assert!(out.may_close(&key(1)) && out.may_close(&key(2)));
    }

    #[test]
    fn a_slot_that_changed_around_the_table_adds_nothing_and_keeps_both_keys_open() {
        let first = slot(4, 1, 3, armed(3, 5));
        let then = slot(6, 2, 4, held::unarmed(4));
        let out = between(&[Before::Even(first)], &[then]);
        assert!(out.held.is_empty());
        assert!(!out.whole());
        assert!(!out.may_close(&key(1)));
        assert!(!out.may_close(&key(2)));
        assert!(out.may_close(&key(3)));
    }

    #[test]
    fn a_slot_handing_over_keeps_only_that_key_open() {
        let last = slot(4, 1, 3, armed(3, 5));
        let out = between(&[Before::HandingOver(last)], &[slot(6, 2, 4, 0)]);
        assert!(!out.whole());
        assert!(!out.may_close(&key(1)));
        assert!(out.may_close(&key(2)));
    }

    #[test]
    fn a_slot_never_read_even_or_an_unread_map_keeps_every_key_open() {
        let out = between(&[Before::Unknown], &[slot(5, 1, 3, 0)]);
        assert!(!out.may_close(&key(9)));
        assert!(!settled(None, Some(&[])).may_close(&key(9)));
        assert!(!settled(Some(&[]), None).may_close(&key(9)));
    }

    #[test]
    fn two_cpus_on_one_key_add_up_and_the_table_keeps_the_later_latest() {
        let a = slot(2, 1, 1, armed(1, 3));
        let b = ThreadLastFolded {
            held_ns: 900,
            held_uid: 7,
            ..slot(8, 1, 9, armed(9, 4))
        };
        let out = between(&[Before::Even(a), Before::Even(b)], &[a, b]);
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
