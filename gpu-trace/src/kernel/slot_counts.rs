//! The repeats each CPU counted in its own slot (gpu-trace-ebpf's
//! slot_count.rs) and has not yet handed to the repeats table: read before
//! and after the table, so that each is counted once.
//!
//! A slot takes another key in this order: it exchanges its count for the
//! next assignment's tag, adds the count to the table, then writes the
//! next assignment and the next key. So where a slot's tag is the same in
//! the copy before the table's read and the copy after, no hand-over
//! happened in between, and the count before is not in the table: it is
//! added (settled). Where the tag changed, or a copy's tag is not its
//! assignment's (a hand-over under way, its add perhaps still to come), the
//! count is left out this time, to be counted by a later read; the slot's
//! other writes (the remembered tick, the latest repeat) change no tag.
//!
//! A key is closed (removed from the table) only when no slot may still
//! hand repeats to it: none holds any of it, and none was handing it over
//! or changed its tag around the read.

use aya::maps::{MapData, PerCpuArray};
use gpu_trace_common::{held, RepeatCount, RepeatKey, ThreadLastFolded, SYSCALL_NONE};
use rustc_hash::{FxHashMap, FxHashSet};

/// What the slots add to the table, from one read before and one after.
#[derive(Default)]
pub struct Settled {
    /// Each key's repeats held in settled slots, with the latest of them.
    pub held: FxHashMap<RepeatKey, RepeatCount>,
    /// Keys not to be closed this time: a slot still holds repeats of one
    /// (their hand-over must find the key, not another's that took its
    /// place in the preallocated table), or was handing it over.
    pub open: FxHashSet<RepeatKey>,
    /// A slot's count was left out this time (a hand-over around the
    /// table's read): a later read counts it.
    pub left_out: bool,
    /// The slots could not be read: no key may be closed.
    pub unread: bool,
}

impl Settled {
    /// Whether `key`'s count, the table's and these, is whole and stays so.
    pub fn may_close(&self, key: &RepeatKey) -> bool {
        !self.unread && !self.open.contains(key)
    }

    /// Whether no slot's count was left out.
    pub fn whole(&self) -> bool {
        !self.unread && !self.left_out
    }
}

/// The slots of every CPU.
pub struct Slots {
    map: PerCpuArray<MapData, ThreadLastFolded>,
}

impl Slots {
    pub fn new(map: PerCpuArray<MapData, ThreadLastFolded>) -> Self {
        Self { map }
    }

    /// Each CPU's slot, in order; None if the map cannot be read.
    pub fn read(&self) -> Option<Vec<ThreadLastFolded>> {
        let per_cpu = self.map.get(&0, 0).ok()?;
        Some(per_cpu.iter().copied().collect())
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

/// Whether `slot` was copied in a hand-over: its count exchanged away, the
/// add to the table perhaps still to come, its key still the one handed.
fn handing_over(slot: &ThreadLastFolded) -> bool {
    !held::tagged(slot.held, slot.assignment)
}

/// What the slots hold that the table, read between `before` and `after`,
/// does not (either unread: nothing known, nothing closed).
pub fn settled(before: Option<&[ThreadLastFolded]>, after: Option<&[ThreadLastFolded]>) -> Settled {
    let mut out = Settled::default();
    let (Some(before), Some(after)) = (before, after) else {
        out.unread = true;
        return out;
    };
    for (first, then) in before.iter().zip(after) {
        out.open.extend(holds(then));
        if handing_over(then) {
            out.open.insert(then.key);
        }
        if handing_over(first) || held::tag(first.held) != held::tag(then.held) {
            out.open.insert(first.key);
            out.open.insert(then.key);
            out.left_out |= holds(first).is_some() || handing_over(first);
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

    fn between(before: &[ThreadLastFolded], after: &[ThreadLastFolded]) -> Settled {
        settled(Some(before), Some(after))
    }

    #[test]
    fn a_settled_armed_slot_adds_its_count_and_latest_and_keeps_its_key() {
        let s = slot(4, 1, 3, armed(3, 5));
        let out = between(&[s], &[s]);
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
    fn the_remembered_tick_or_more_repeats_around_the_read_leave_it_settled() {
        // The tick's rewrite moves the sequence on; repeats raise the count.
        let first = slot(4, 1, 3, armed(3, 5));
        let then = slot(6, 1, 3, armed(3, 9));
        let out = between(&[first], &[then]);
        assert_eq!(out.held[&key(1)].repeats, 5);
        assert!(out.whole());
    }

    #[test]
    fn an_unarmed_slot_or_one_of_another_assignment_adds_nothing_and_closes_freely() {
        let unarmed = slot(4, 1, 3, held::unarmed(3));
        let other = slot(4, 2, 4, armed(3, 5));
        let out = between(&[unarmed], &[unarmed]);
        assert!(out.held.is_empty() && out.may_close(&key(1)));
        // A tag not its assignment's: copied mid hand-over.
        let out = between(&[other], &[other]);
        assert!(out.held.is_empty() && !out.may_close(&key(2)) && !out.whole());
    }

    #[test]
    fn a_hand_over_around_the_read_adds_nothing_and_keeps_both_keys_open() {
        let first = slot(4, 1, 3, armed(3, 5));
        let then = slot(6, 2, 4, held::unarmed(4));
        let out = between(&[first], &[then]);
        assert!(out.held.is_empty());
        assert!(!out.whole());
        assert!(!out.may_close(&key(1)));
        assert!(!out.may_close(&key(2)));
        assert!(out.may_close(&key(3)));
    }

    #[test]
    fn a_hand_over_under_way_after_keeps_its_key_open() {
        // Exchanged (the next tag), the add perhaps still to come, the key
        // and assignment not yet rewritten.
        let first = slot(4, 1, 3, held::unarmed(3));
        let then = slot(5, 1, 3, held::unarmed(4));
        let out = between(&[first], &[then]);
        assert!(!out.may_close(&key(1)));
    }

    #[test]
    fn unread_slots_keep_every_key_open() {
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
        let out = between(&[a, b], &[a, b]);
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
