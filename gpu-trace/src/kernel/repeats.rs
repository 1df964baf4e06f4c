//! The repeats the kernel counted instead of sending (gpu-trace-ebpf's
//! fold.rs): read every second, each key's new repeats handed on as one
//! access with a count. A key's count only grows while its fold window
//! lasts; what was handed on is remembered, so each repeat is counted once.
//! A window over for a whole window more gets no more repeats: its keys'
//! last counts are taken and the keys removed.

use std::time::{Duration, Instant};

use aya::maps::{HashMap, MapData, PerCpuArray};
use gpu_trace_common::{
    DeviceAccessEvent, EventHead, RepeatCount, RepeatKey, ThreadLastFolded, FLAG_PATH_FROM_REGS,
    FLAG_PATH_TRUNCATED, PATH_LEN, REPEATS_CAPACITY, SYSCALL_NONE,
};
use rustc_hash::FxHashMap;

use crate::{
    host::clock::since_boot,
    kernel::slot_counts::{self, Slots},
    model::access::{DeviceAccess, VerdictSource},
};

/// Reads at the last collect, and the pause between two, while a slot's
/// count is left out: a slot changes only while its CPU is denied.
const LAST_READS: usize = 20;
const BETWEEN_LAST_READS: Duration = Duration::from_millis(5);

pub struct KernelRepeats {
    map: HashMap<MapData, RepeatKey, RepeatCount>,
    /// Each CPU's latest folded thread's key, and the repeats counted
    /// there and not yet handed to `map` (slot_counts.rs).
    slots: Slots,
    /// Whether the programs count repeats in the slots (global::SLOT_COUNTS).
    slot_counts: bool,
    /// Repeats already handed on, by key.
    handed_on: FxHashMap<RepeatKey, u64>,
    /// The path of each problem's latest sent event, by key without its
    /// window: the kernel keeps none for the repeats, and without it a
    /// repeat would be diagnosed apart from its first (a node is often known
    /// by its name only). Kept while the kernel has the key, or for two
    /// windows after the event.
    paths: FxHashMap<RepeatKey, SentPath>,
    window: Duration,
}

struct SentPath {
    path: Box<[u8]>,
    truncated: bool,
    /// The first's syscall and whether it came from the saved registers:
    /// the kernel counts repeats before it reads them.
    from_regs: bool,
    syscall: u16,
    /// The first's v1 devices cgroup and programs in force: repeats are
    /// not read that far.
    v1_devices_cgroup: u64,
    policy_programs: [u32; gpu_trace_common::SIGHTED_PROGRAMS],
    sent: Instant,
}

impl KernelRepeats {
    pub fn new(
        map: HashMap<MapData, RepeatKey, RepeatCount>,
        slots: PerCpuArray<MapData, ThreadLastFolded>,
        slot_counts: bool,
        window: Duration,
    ) -> Self {
        Self {
            map,
            slots: Slots::new(slots),
            slot_counts,
            handed_on: FxHashMap::default(),
            paths: FxHashMap::default(),
            window,
        }
    }

    fn window_ns(&self) -> u64 {
        self.window.as_nanos() as u64
    }

    /// Remembers the path of a problem the kernel sent: its repeats will
    /// come without one. Bounded like the kernel's table.
    pub fn note_sent(&mut self, event: &DeviceAccessEvent) {
        let head = &event.head;
        if !RepeatKey::is_problem(head) {
            return; // never folded
        }
        let key = without_window(RepeatKey::of(head, &event.comm, self.window_ns()));
        if self.paths.len() >= REPEATS_CAPACITY as usize && !self.paths.contains_key(&key) {
            return;
        }
        let path = event.path.split(|&b| b == 0).next().unwrap_or_default();
        let sent = SentPath {
            path: path.into(),
            truncated: head.flags & FLAG_PATH_TRUNCATED != 0,
            from_regs: head.flags & FLAG_PATH_FROM_REGS != 0,
            syscall: head.syscall,
            v1_devices_cgroup: event.v1_devices_cgroup,
            policy_programs: event.policy_programs,
            sent: Instant::now(),
        };
        self.paths.insert(key, sent);
    }

    /// Each key's repeats since the last call, as (the latest repeat, how
    /// many). The last call (`last`) reads again, a few times, while a
    /// slot's count was left out (slot_counts.rs): nothing follows it.
    pub fn collect(&mut self, verdict_from: VerdictSource, last: bool) -> Vec<(DeviceAccess, u64)> {
        let mut out = Vec::new();
        for _ in 0..LAST_READS {
            let whole = self.collect_once(verdict_from, &mut out);
            if whole || !last {
                break;
            }
            std::thread::sleep(BETWEEN_LAST_READS);
        }
        out
    }

    /// One read of the table and the slots around it; whether no slot's
    /// count was left out.
    fn collect_once(
        &mut self,
        verdict_from: VerdictSource,
        out: &mut Vec<(DeviceAccess, u64)>,
    ) -> bool {
        let current = since_boot().as_nanos() as u64 / self.window_ns();
        let before = self.slot_counts.then(|| self.slots.read());
        let keys: Vec<RepeatKey> = self.map.keys().filter_map(Result::ok).collect();
        // A key removed meanwhile is skipped.
        let table: Vec<(RepeatKey, RepeatCount)> = keys
            .iter()
            .filter_map(|key| Some((*key, self.map.get(key, 0).ok()?)))
            .collect();
        let in_slots = match before {
            Some(before) => slot_counts::settled(before.as_deref(), self.slots.read().as_deref()),
            // The programs count nothing there.
            None => slot_counts::Settled::default(),
        };
        for (key, count) in &table {
            let count = slot_counts::with_held(*count, in_slots.held.get(key));
            let handed = self.handed_on.get(key).copied().unwrap_or(0);
            let (new, handed) = newly_counted(count.repeats, handed);
            if new > 0 {
                let path = self.paths.get(&without_window(*key));
                out.push((access_of(key, &count, path, verdict_from), new));
            }
            // Over for a whole window: no program still counts into it
            // (one takes microseconds), so its count is final, once no
            // slot may still hand repeats to it.
            if key.window + 2 <= current && in_slots.may_close(key) && self.map.remove(key).is_ok()
            {
                self.handed_on.remove(key);
            } else {
                self.handed_on.insert(*key, handed);
            }
        }
        let live: rustc_hash::FxHashSet<RepeatKey> =
            keys.iter().map(|k| without_window(*k)).collect();
        let keep_for = 2 * self.window;
        self.paths
            .retain(|key, sent| live.contains(key) || sent.sent.elapsed() < keep_for);
        in_slots.whole()
    }
}

impl KernelRepeats {
    /// Repeats counted under their thread's remembered key, on every CPU
    /// (the short way, fold.rs).
    pub fn folded_by_thread(&self) -> u64 {
        self.slots.by_thread()
    }

    /// Of those, the repeats counted in their CPU's own count, where BPF
    /// has compare-and-exchange (slot_count.rs).
    pub fn folded_in_slot(&self) -> u64 {
        self.slots.in_slot()
    }
}

/// A key's repeats not yet handed on, of `total` read now with `handed`
/// handed on before, and what has been handed on after. A total read short
/// (a slot's count left out this time, slot_counts.rs) hands on nothing
/// and forgets nothing: the next read, whole again, hands on the rest.
fn newly_counted(total: u64, handed: u64) -> (u64, u64) {
    (total.saturating_sub(handed), total.max(handed))
}

fn without_window(key: RepeatKey) -> RepeatKey {
    RepeatKey { window: 0, ..key }
}

/// The latest repeat as the access it was: the key's fields, the latest
/// process and time, and the path its first event had.
fn access_of(
    key: &RepeatKey,
    latest: &RepeatCount,
    path: Option<&SentPath>,
    verdict_from: VerdictSource,
) -> DeviceAccess {
    let mut flags = key.flags;
    let mut syscall = latest.last_syscall;
    let mut path_bytes = [0; PATH_LEN];
    if let Some(sent) = path {
        let len = sent.path.len().min(PATH_LEN - 1);
        path_bytes[..len].copy_from_slice(&sent.path[..len]);
        if sent.truncated {
            flags |= FLAG_PATH_TRUNCATED;
        }
        if sent.from_regs {
            flags |= FLAG_PATH_FROM_REGS;
        }
        if syscall == SYSCALL_NONE {
            syscall = sent.syscall;
        }
    }
    let event = DeviceAccessEvent {
        head: EventHead {
            boot_ns: latest.last_ns,
            cgroup_id: key.cgroup_id,
            pid: latest.last_pid,
            tid: latest.last_tid,
            uid: latest.last_uid,
            device: key.device,
            hook_verdict: key.hook_verdict,
            syscall_ret: key.syscall_ret,
            syscall,
            flags,
            // Not kept with the counts: the repeats were only counted.
            program: 0,
        },
        v1_devices_cgroup: path.map_or(0, |sent| sent.v1_devices_cgroup),
        policy_programs: path.map_or([0; gpu_trace_common::SIGHTED_PROGRAMS], |sent| {
            sent.policy_programs
        }),
        comm: key.comm,
        path: path_bytes,
    };
    DeviceAccess::decode(&event, verdict_from)
}

#[cfg(test)]
mod tests {
    use super::newly_counted;

    #[test]
    fn a_total_read_short_hands_on_nothing_and_the_next_read_the_rest() {
        let mut handed = 0;
        let mut sum = 0;
        // Whole, short (a slot left out), whole again, then unchanged.
        for total in [10, 7, 15, 15] {
            let (new, now) = newly_counted(total, handed);
            sum += new;
            handed = now;
        }
        assert_eq!((sum, handed), (15, 15));
    }
}
