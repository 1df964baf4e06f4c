//! Folding repeats and budgets: neither an application retrying the same
//! denied open in a loop nor a tenant varying its command name, path or
//! minor with every failed open may flood the log.
//!
//! The first occurrence of a problem is written at once; its repeats within
//! the window become one record with a count. Each window has a budget of
//! records, first occurrences and repeats alike, per cgroup and in all;
//! past it, a cgroup's problems become one summary record per window. A
//! problem that keeps repeating is forgotten after `KEY_LIFETIME_WINDOWS`,
//! and is a first occurrence again: no cgroup holds the table forever. Every written record carries the
//! exact number of accesses it stands for, so the sum of `count` over the
//! log is the number of problems the kernel reported.

use std::time::{Duration, Instant, SystemTime};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::model::{
    access::{OpenCall, VerdictSource},
    record::{Record, RecordKind},
};

/// What makes two problems "the same": cgroup, device, access, command and
/// outcome (the hook's verdict where it read one, the call's result, a
/// rewritten path): what the kernel's fold key (RepeatKey) holds. A
/// failure before any device check has no device: the kernel's digest of
/// its path stands in for one. Not the verdict as attribution settles it:
/// a repeat collected later may be settled differently (a policy changed,
/// a cgroup gone) from its first.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct FoldKey {
    cgroup_id: u64,
    device: (bool, bool, u32, u32),
    path_digest: Option<u64>,
    access: u16,
    comm: Vec<u8>,
    hook_verdict: Option<i32>,
    ret: Option<i32>,
    path_changed: bool,
}

impl FoldKey {
    fn of(record: &Record) -> Self {
        let a = &record.access;
        let open = a.open.as_ref();
        FoldKey {
            cgroup_id: a.cgroup_id,
            device: (a.device_seen, a.block_device, a.major, a.minor),
            path_digest: a.path_digest,
            access: a.access,
            comm: a.comm.clone(),
            // Read by the hook on this route, and left as read by attribution.
            hook_verdict: (a.verdict_from == VerdictSource::BpfRetval).then_some(a.bpf_retval),
            ret: open.and_then(|o| o.ret),
            path_changed: open.is_some_and(|o| o.path_changed),
        }
    }
}

struct Pending {
    /// The latest repeat, written with the count when the window closes.
    latest: Option<Record>,
    window_started: Instant,
    /// When the first occurrence was admitted.
    admitted: Instant,
    /// The first occurrence's open call: the kernel's repeats come without
    /// a path.
    first_open: Option<OpenCall>,
}

impl Pending {
    /// A repeat within the window: counted into the latest. Repeats do not
    /// arrive in time order: the kernel's counts are collected after the
    /// ring is drained, so a repeat still in the ring can be older than the
    /// newest counted one. The span only widens.
    fn add(&mut self, record: Record) {
        match &mut self.latest {
            Some(folded) => {
                folded.count += record.count;
                folded.first_seen = folded.first_seen.min(record.first_seen);
                folded.last_seen = folded.last_seen.max(record.last_seen);
            }
            None => self.latest = Some(record),
        }
    }
}

/// Records written at once per window: first occurrences, per cgroup and
/// in all. 0 means no limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub per_cgroup: u32,
    pub total: u32,
}

impl Budget {
    pub const UNLIMITED: Budget = Budget {
        per_cgroup: 0,
        total: 0,
    };

    fn allows(limit: u32, spent: u32) -> bool {
        limit == 0 || spent < limit
    }
}

/// Problems beyond the budget, waiting for the end of the window.
struct Summary {
    /// The last of them, written with the count.
    last: Record,
    count: u64,
    /// Their span (as in `Pending::add`, not in time order).
    first_seen: SystemTime,
    last_seen: SystemTime,
    cgroups: u64,
}

impl Summary {
    fn new(record: Record, cgroups: u64) -> Self {
        Self {
            count: record.count,
            first_seen: record.first_seen,
            last_seen: record.last_seen,
            last: record,
            cgroups,
        }
    }

    fn add(&mut self, record: Record) {
        self.count += record.count;
        self.first_seen = self.first_seen.min(record.first_seen);
        self.last_seen = self.last_seen.max(record.last_seen);
        self.last = record;
    }

    fn into_record(self) -> Record {
        let mut record = self.last;
        record.count = self.count;
        record.first_seen = self.first_seen;
        record.last_seen = self.last_seen;
        record.kind = RecordKind::Summary {
            cgroups: self.cgroups,
        };
        record
    }
}

pub struct Folder {
    window: Duration,
    budget: Budget,
    pending: FxHashMap<FoldKey, Pending>,
    /// Where the budget's window started, and what it has spent.
    budget_window: Instant,
    spent_total: u32,
    spent_by_cgroup: FxHashMap<u64, u32>,
    /// Cgroups given their first record past the spent total.
    newcomers_past_total: u32,
    summaries: FxHashMap<u64, Summary>,
    /// Problems of cgroups beyond the cap on summaries: one record for all,
    /// and which cgroups it holds (counted up to `MAX_COUNTED_CGROUPS`).
    overflow: Option<Summary>,
    overflow_cgroups: FxHashSet<u64>,
}

/// Bounds on what one window may hold, whatever the budget: folds waiting
/// for repeats, and cgroups with a summary of their own.
const MAX_PENDING: usize = 65_536;
const MAX_SUMMARIES: usize = 1_024;
const MAX_COUNTED_CGROUPS: usize = 65_536;
/// Cgroups per window whose first record is written past the total budget.
const NEWCOMERS_PAST_TOTAL: u32 = 100;
/// Windows a problem stays folded, repeating or not.
const KEY_LIFETIME_WINDOWS: u32 = 10;

impl Folder {
    /// A zero window disables folding and budgets.
    pub fn new(window: Duration, budget: Budget) -> Self {
        Self {
            window,
            budget,
            pending: FxHashMap::default(),
            budget_window: Instant::now(),
            spent_total: 0,
            spent_by_cgroup: FxHashMap::default(),
            newcomers_past_total: 0,
            summaries: FxHashMap::default(),
            overflow: None,
            overflow_cgroups: FxHashSet::default(),
        }
    }

    /// Takes one record; returns it when it must be written now (a first
    /// occurrence within budget, or anything that is not a problem).
    pub fn admit(&mut self, record: Record) -> Option<Record> {
        if self.window.is_zero() || !record.access.verdict.is_problem() {
            return Some(record);
        }
        let key = FoldKey::of(&record);
        if let Some(pending) = self.pending.get_mut(&key) {
            pending.add(record);
            return None;
        }
        if self.pending.len() >= MAX_PENDING || !self.spend(key.cgroup_id) {
            self.summarize(record);
            return None;
        }
        self.pending.insert(
            key,
            Pending {
                latest: None,
                window_started: Instant::now(),
                admitted: Instant::now(),
                first_open: record.access.open.clone(),
            },
        );
        Some(record)
    }

    /// Takes the repeats the kernel counted for one problem (`record.count`
    /// of them, the latest one's details, no path): added to the fold its
    /// first occurrence opened, or, where that fold has closed meanwhile,
    /// admitted like a first occurrence that stands for them all.
    pub fn admit_repeats(&mut self, mut record: Record) -> Option<Record> {
        record.first_seen = record.time;
        record.last_seen = record.time;
        if let Some(pending) = self.pending.get_mut(&FoldKey::of(&record)) {
            if let (Some(open), Some(first)) = (&mut record.access.open, &pending.first_open) {
                open.path.clone_from(&first.path);
                open.path_truncated = first.path_truncated;
            }
            pending.add(record);
            return None;
        }
        record.kind = RecordKind::Repeats;
        self.admit(record)
    }

    /// Takes one record from the window's budget, if it has one left for
    /// `cgroup_id`. A cgroup's first record of the window may go past the
    /// total (up to NEWCOMERS_PAST_TOTAL of them): cgroups that spent theirs
    /// first must not leave another's new problem without a line.
    fn spend(&mut self, cgroup_id: u64) -> bool {
        let spent = self.spent_by_cgroup.get(&cgroup_id).copied().unwrap_or(0);
        let newcomer = spent == 0 && self.newcomers_past_total < NEWCOMERS_PAST_TOTAL;
        let total_left = Budget::allows(self.budget.total, self.spent_total);
        let within = (total_left || newcomer) && Budget::allows(self.budget.per_cgroup, spent);
        if within {
            if !total_left {
                self.newcomers_past_total += 1;
            }
            self.spent_total += 1;
            self.spent_by_cgroup.insert(cgroup_id, spent + 1);
        }
        within
    }

    /// Takes what the kernel held back past a cgroup's budget (`record.count`
    /// of them, the latest one's details, no path): that cgroup's summary.
    pub fn admit_held_back(&mut self, mut record: Record) -> Option<Record> {
        if self.window.is_zero() {
            return Some(record);
        }
        record.first_seen = record.time;
        record.last_seen = record.time;
        self.summarize(record);
        None
    }

    fn summarize(&mut self, record: Record) {
        let cgroup_id = record.access.cgroup_id;
        if let Some(summary) = self.summaries.get_mut(&cgroup_id) {
            summary.add(record);
        } else if self.summaries.len() < MAX_SUMMARIES {
            self.summaries.insert(cgroup_id, Summary::new(record, 1));
        } else {
            if self.overflow_cgroups.len() < MAX_COUNTED_CGROUPS {
                self.overflow_cgroups.insert(cgroup_id);
            }
            match &mut self.overflow {
                Some(all) => all.add(record),
                None => self.overflow = Some(Summary::new(record, 1)),
            }
        }
    }

    /// Folded records whose window has closed, and the summaries of a
    /// budget window that has closed (all of them with `everything`, at
    /// shutdown). A folded record spends from the budget like a first
    /// occurrence; past it, it joins its cgroup's summary. A key that saw
    /// no repeat, or has lived `KEY_LIFETIME_WINDOWS`, is forgotten, so its
    /// next occurrence is a first occurrence again.
    pub fn due(&mut self, everything: bool) -> Vec<Record> {
        let window = self.window;
        let lifetime = window.saturating_mul(KEY_LIFETIME_WINDOWS);
        let mut folded = Vec::new();
        self.pending.retain(|_, pending| {
            if !everything && pending.window_started.elapsed() < window {
                return true;
            }
            match pending.latest.take() {
                Some(mut repeats) => {
                    repeats.kind = RecordKind::Repeats;
                    folded.push(repeats);
                    pending.window_started = Instant::now();
                    !everything && pending.admitted.elapsed() < lifetime
                }
                None => false,
            }
        });
        let mut out = Vec::new();
        for repeats in folded {
            if self.spend(repeats.access.cgroup_id) {
                out.push(repeats);
            } else {
                self.summarize(repeats);
            }
        }
        if everything || self.budget_window.elapsed() >= window {
            self.budget_window = Instant::now();
            self.spent_total = 0;
            self.newcomers_past_total = 0;
            // Fresh tables: a flood's high-water mark is not kept.
            self.spent_by_cgroup = FxHashMap::default();
            out.extend(self.summaries.drain().map(|(_, s)| s.into_record()));
            if let Some(mut all) = self.overflow.take() {
                all.cgroups = self.overflow_cgroups.len() as u64;
                self.overflow_cgroups = FxHashSet::default();
                out.push(all.into_record());
            }
        }
        if self.pending.capacity() > 4 * self.pending.len().max(64) {
            self.pending.shrink_to_fit();
        }
        out.sort_by_key(|r| r.first_seen);
        out
    }
}

/// "5s", "500ms", "2m", "0": the --fold window.
pub fn parse_window(text: &str) -> Result<Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 5s, 500ms or 2m"))?;
    Ok(match unit {
        "" if number == 0 => Duration::ZERO,
        "ms" => Duration::from_millis(number),
        "s" => Duration::from_secs(number),
        "m" => Duration::from_secs(number * 60),
        _ => return Err(format!("{text:?} is not a duration like 5s, 500ms or 2m")),
    })
}

#[cfg(test)]
mod tests {
    use std::{rc::Rc, time::SystemTime};

    use super::*;
    use crate::{
        cgroup::identity::identify,
        model::{
            access::{DeviceAccess, Verdict, VerdictSource},
            rendered::Rendered,
        },
        runtime::NameSources,
    };

    /// `records` are one, standing for `count` problems from second
    /// `span.0` to `span.1`.
    fn assert_one_spanning(records: &[Record], count: u64, span: (u64, u64)) {
        assert_eq!(records.len(), 1, "{records:?}");
        assert_eq!(records[0].count, count);
        assert_eq!(records[0].first_seen, at(span.0));
        assert_eq!(records[0].last_seen, at(span.1));
    }

    /// A folder with this window and budget.
    fn budgeted(window: Duration, per_cgroup: u32, total: u32) -> Folder {
        Folder::new(window, Budget { per_cgroup, total })
    }

    /// `seconds` after the epoch: the tests' clock.
    fn at(seconds: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(seconds)
    }

    fn denial(comm: &[u8], seconds: u64) -> Record {
        let time = at(seconds);
        Record {
            access: DeviceAccess {
                boot_ns: 0,
                pid: 1,
                tid: 1,
                uid: 0,
                comm: comm.to_vec(),
                cgroup_id: 7,
                v1_devices_cgroup: None,
                sighted_programs: [0; gpu_trace_common::SIGHTED_PROGRAMS],
                device_seen: true,
                path_digest: None,
                block_device: false,
                major: 511,
                minor: 0,
                access: 6,
                verdict: Verdict::DeniedByBpfPolicy,
                bpf_retval: -1,
                verdict_from: VerdictSource::BpfRetval,
                open: None,
            },
            time,
            count: 1,
            first_seen: time,
            last_seen: time,
            cgroup: None,
            // No owner checks (cgroup2_mount None): the default reads
            // mountinfo, once per record of these 60 000-record floods.
            container: Rc::new(Rendered::new(identify("/", &NameSources::nowhere()))),
            driver: None,
            device: None,
            node: None,
            nic: None,
            gpu: None,
            mig: None,
            allocation: None,
            vendor: None,
            role: None,
            denied_by: None,
            diagnosis: None,
            kind: RecordKind::Event,
        }
    }

    #[test]
    fn first_occurrence_at_once_repeats_folded_with_exact_counts() {
        let mut folder = Folder::new(Duration::from_secs(3600), Budget::UNLIMITED);
        assert!(
            folder.admit(denial(b"python3", 1)).is_some(),
            "the first is written at once"
        );
        for at in 2..=10 {
            assert!(folder.admit(denial(b"python3", at)).is_none());
        }
        assert!(
            folder.admit(denial(b"other", 5)).is_some(),
            "another command is another denial"
        );
        assert!(folder.due(false).is_empty(), "the window is still open");
        assert_one_spanning(&folder.due(true), 9, (2, 10));
    }

    /// A failed open of `path` that reached no device check, ending `ret`;
    /// the kernel's digest of the path stood in for by its std hash.
    fn failed_before_check(path: &[u8], ret: i32) -> Record {
        use std::hash::{DefaultHasher, Hash, Hasher};
        let mut digest = DefaultHasher::new();
        path.hash(&mut digest);
        let mut record = denial(b"cuda", 1);
        let a = &mut record.access;
        (a.device_seen, a.major, a.access) = (false, 0, 0);
        a.path_digest = Some(digest.finish());
        a.verdict = Verdict::FailedBeforeDeviceCheck;
        a.open = Some(OpenCall {
            syscall: "openat",
            path: path.to_vec(),
            path_truncated: false,
            path_changed: false,
            ret: Some(ret),
        });
        record
    }

    #[test]
    fn another_outcome_or_another_unresolved_path_is_another_problem() {
        let mut folder = Folder::new(Duration::from_secs(3600), Budget::UNLIMITED);
        let uvm = failed_before_check(b"/dev/nvidia-uvm", -libc::ENOENT);
        assert!(folder.admit(uvm.clone()).is_some());
        assert!(folder.admit(uvm).is_none(), "its repeat");
        let tools = failed_before_check(b"/dev/nvidia-uvm-tools", -libc::ENOENT);
        assert!(folder.admit(tools).is_some(), "another missing node");
        let refused = failed_before_check(b"/dev/nvidia-uvm", -libc::EACCES);
        assert!(folder.admit(refused).is_some(), "another errno");
        // With a device, the path is not the problem's: a link to a node
        // and the node are one device.
        let mut denied = denial(b"cuda", 1);
        denied.access.open = failed_before_check(b"/dev/a", -libc::EPERM).access.open;
        assert!(folder.admit(denied.clone()).is_some());
        let mut by_link = denied.clone();
        by_link.access.open.as_mut().expect("open").path = b"/dev/b".to_vec();
        assert!(folder.admit(by_link).is_none(), "the same device");
        let mut rewritten = denied.clone();
        rewritten.access.open.as_mut().expect("open").path_changed = true;
        assert!(
            folder.admit(rewritten).is_some(),
            "a rewritten path is told"
        );
        // Where the hook read its verdict: a BPF policy's denial, then one
        // after the policies allowed (cgroup v1) are two causes.
        let mut after_bpf = denied;
        (after_bpf.access.bpf_retval, after_bpf.access.verdict) = (0, Verdict::DeniedAfterBpf);
        assert!(folder.admit(after_bpf).is_some(), "another layer denied it");
        assert_eq!(written(&folder.due(true)), (2, 2));
    }

    #[test]
    fn repeats_out_of_time_order_widen_the_span_and_never_invert_it() {
        let mut folder = Folder::new(Duration::from_secs(3600), Budget::UNLIMITED);
        assert!(folder.admit(denial(b"a", 1)).is_some());
        // The kernel's counted repeats up to second 9, then a repeat from
        // second 5 that was still in the ring, then one more counted batch.
        let mut counted = denial(b"a", 9);
        counted.count = 40;
        assert!(folder.admit_repeats(counted).is_none());
        assert!(folder.admit(denial(b"a", 5)).is_none());
        let mut counted = denial(b"a", 7);
        counted.count = 2;
        assert!(folder.admit_repeats(counted).is_none());
        assert_one_spanning(&folder.due(true), 43, (5, 9));
    }

    #[test]
    fn a_summary_spans_its_records_whatever_their_order() {
        let mut folder = budgeted(Duration::from_secs(3600), 1, 0);
        assert!(folder.admit(denial(b"a", 1)).is_some());
        for (comm, at) in [(b"b", 8), (b"c", 3), (b"d", 6)] {
            assert!(folder.admit(denial(comm, at)).is_none());
        }
        let summary: Vec<Record> = folder
            .due(true)
            .into_iter()
            .filter(|r| matches!(r.kind, RecordKind::Summary { .. }))
            .collect();
        assert_one_spanning(&summary, 3, (3, 8));
    }

    #[test]
    fn a_quiet_window_forgets_the_key() {
        let mut folder = Folder::new(Duration::from_millis(1), Budget::UNLIMITED);
        assert!(folder.admit(denial(b"a", 1)).is_some());
        std::thread::sleep(Duration::from_millis(5));
        assert!(folder.due(false).is_empty(), "nothing was repeated");
        assert!(
            folder.admit(denial(b"a", 2)).is_some(),
            "written at once again"
        );
    }

    #[test]
    fn zero_window_writes_everything() {
        let mut folder = budgeted(Duration::ZERO, 1, 1);
        assert!(folder.admit(denial(b"a", 1)).is_some());
        assert!(folder.admit(denial(b"a", 1)).is_some());
    }

    /// Sum of `count` over what was written, and how many records.
    fn written(records: &[Record]) -> (u64, usize) {
        (records.iter().map(|r| r.count).sum(), records.len())
    }

    #[test]
    fn a_flood_of_distinct_commands_is_bounded_and_counted_exactly() {
        let mut folder = budgeted(Duration::from_secs(3600), 10, 25);
        let mut out = Vec::new();
        // Three cgroups, 20 000 distinct command names each.
        for cgroup in [7, 8, 9] {
            for n in 0..20_000u32 {
                let mut r = denial(format!("c{n}").as_bytes(), 1);
                r.access.cgroup_id = cgroup;
                out.extend(folder.admit(r));
            }
        }
        assert_eq!(out.len(), 25, "10 + 10 + 5 first occurrences");
        out.extend(folder.due(true));
        let summaries: Vec<_> = out
            .iter()
            .filter(|r| matches!(r.kind, RecordKind::Summary { .. }))
            .collect();
        assert_eq!(summaries.len(), 3, "one summary per cgroup");
        assert_eq!(written(&out), (60_000, 28));
        let of_9 = summaries
            .iter()
            .find(|r| r.access.cgroup_id == 9)
            .expect("cgroup 9's summary");
        assert_eq!(of_9.count, 19_995);
    }

    #[test]
    fn the_summaries_of_many_cgroups_are_capped_too() {
        let mut folder = budgeted(Duration::from_secs(3600), 1, 1);
        let mut out = Vec::new();
        let cgroups = MAX_SUMMARIES as u64 + 500;
        for cgroup in 0..cgroups {
            let mut r = denial(b"x", 1);
            r.access.cgroup_id = cgroup;
            out.extend(folder.admit(r));
        }
        // The first within the total, then NEWCOMERS_PAST_TOTAL more, each
        // a cgroup's first of the window.
        let newcomers = NEWCOMERS_PAST_TOTAL as usize;
        assert_eq!(out.len(), 1 + newcomers);
        out.extend(folder.due(true));
        assert_eq!(written(&out), (cgroups, 1 + newcomers + MAX_SUMMARIES + 1));
        let last = out
            .iter()
            .map(|r| r.kind)
            .find(|k| matches!(k, RecordKind::Summary { cgroups } if *cgroups > 1));
        assert_eq!(
            last,
            Some(RecordKind::Summary {
                cgroups: cgroups - 1 - (newcomers + MAX_SUMMARIES) as u64
            })
        );
    }

    #[test]
    fn a_cgroups_first_record_gets_a_line_when_others_spent_the_total() {
        let mut folder = budgeted(Duration::from_secs(3600), 50, 100);
        // Two cgroups spend the whole total.
        for cgroup in [1, 2] {
            for n in 0..60u32 {
                let mut r = denial(format!("c{n}").as_bytes(), 1);
                r.access.cgroup_id = cgroup;
                let _ = folder.admit(r);
            }
        }
        let mut newcomer = denial(b"victim", 2);
        newcomer.access.cgroup_id = 3;
        assert!(folder.admit(newcomer.clone()).is_some(), "its own line");
        newcomer.access.comm = b"second".to_vec();
        assert!(folder.admit(newcomer).is_none(), "one past the total only");
    }

    #[test]
    fn the_budget_is_renewed_each_window() {
        let mut folder = budgeted(Duration::from_millis(1), 1, 0);
        assert!(folder.admit(denial(b"a", 1)).is_some());
        assert!(folder.admit(denial(b"b", 1)).is_none(), "over budget");
        std::thread::sleep(Duration::from_millis(5));
        let due = folder.due(false);
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].kind, RecordKind::Summary { cgroups: 1 });
        assert!(folder.admit(denial(b"c", 2)).is_some(), "a new window");
    }

    #[test]
    fn repeats_spend_the_budget_and_past_it_join_the_summary() {
        let mut folder = budgeted(Duration::from_secs(3600), 2, 0);
        assert!(folder.admit(denial(b"a", 1)).is_some());
        assert!(folder.admit(denial(b"b", 1)).is_some());
        for at in 2..5 {
            assert!(folder.admit(denial(b"a", at)).is_none());
            assert!(folder.admit(denial(b"b", at)).is_none());
        }
        let out = folder.due(true);
        assert_eq!(out.len(), 1, "the budget was spent: {out:?}");
        assert_eq!(out[0].kind, RecordKind::Summary { cgroups: 1 });
        assert_eq!(out[0].count, 6, "exact all the same");
    }

    #[test]
    fn a_problem_that_keeps_repeating_is_forgotten_after_its_lifetime() {
        let window = Duration::from_millis(1);
        let mut folder = Folder::new(window, Budget::UNLIMITED);
        let admitted = Instant::now();
        assert!(folder.admit(denial(b"a", 1)).is_some());
        let mut windows = 0;
        let again = loop {
            windows += 1;
            std::thread::sleep(Duration::from_millis(2));
            if let Some(first) = folder.admit(denial(b"a", 2)) {
                break first;
            }
            assert_eq!(folder.due(false).len(), 1, "one repeats record per window");
            assert!(windows < 100, "never forgotten");
        };
        assert_eq!(again.kind, RecordKind::Event);
        let lived = admitted.elapsed();
        assert!(
            lived >= window * KEY_LIFETIME_WINDOWS,
            "kept for its lifetime: {lived:?}, {windows} windows"
        );
    }

    #[test]
    fn parses_windows() {
        assert_eq!(parse_window("5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse_window("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_window("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_window("0"), Ok(Duration::ZERO));
        assert!(parse_window("5").is_err() && parse_window("fast").is_err());
    }
}
