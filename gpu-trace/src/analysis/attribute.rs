//! Which policy refused a live denial: the same evaluator `check` uses, run
//! against the programs in force on the event's cgroup. Policies and their
//! answers are cached per cgroup and re-read when its set of programs changes.

use std::{
    path::{Path, PathBuf},
    rc::Rc,
    time::{Duration, Instant},
};

use gpu_trace_policy::{evaluate, Answer, DeviceQuery, Outcome, V1Answer};
use rustc_hash::FxHashMap;

use crate::{
    analysis::policy_source::{LiveHost, PolicySource, V1List},
    kernel::programs_in_force::CgroupPolicy,
    model::{
        access::{DeviceAccess, Verdict},
        denied_by::{AllowingProgram, DeniedBy},
        record::Record,
        rendered::Rendered,
    },
};

pub struct Attributor<S = LiveHost> {
    source: S,
    /// By cgroup id.
    policies: FxHashMap<u64, CachedPolicy>,
    /// v1 verdicts by process, cgroup and access, with when they were
    /// worked out: each costs three file reads, and a process retrying a
    /// denied open would otherwise pay them per event (26k events/s at most).
    v1_answers: FxHashMap<V1Key, Dated<Rc<Rendered<DeniedBy>>>>,
    /// Policies of cgroups whose children were asked about, by path: what
    /// a child without programs of its own runs (see `inherited`).
    parents: FxHashMap<PathBuf, Dated<(Vec<u32>, CgroupPolicy)>>,
    /// What `parents` holds, roughly, in bytes.
    parents_bytes: usize,
}

/// A cached answer and when it was worked out.
type Dated<T> = (Instant, T);
/// Process id, cgroup id, the v1 devices cgroup recorded at the sighting, access.
type V1Key = (u32, u64, Option<u64>, DeviceQuery);

/// Bounds on the caches a tenant can grow (cgroups, minors); past one, that
/// table starts afresh.
const V1_ANSWERS_CAPACITY: usize = 4096;
const POLICIES_CAPACITY: usize = 4096;
const ANSWERS_PER_POLICY: usize = 1024;
/// Parents' policies, in bytes (paths are up to 4 KiB, and a tenant picks
/// how many parents its cgroups have); emptied when full.
const PARENTS_BUDGET_BYTES: usize = 1 << 20;

impl Attributor<LiveHost> {
    pub fn new(mount: impl Into<std::path::PathBuf>) -> Self {
        Self::with_source(LiveHost::new(mount))
    }
}

impl<S: PolicySource> Attributor<S> {
    pub fn with_source(source: S) -> Self {
        Self {
            source,
            policies: FxHashMap::default(),
            v1_answers: FxHashMap::default(),
            parents: FxHashMap::default(),
            parents_bytes: 0,
        }
    }

    /// Drops what was cached for cgroups that are gone.
    pub fn forget_cgroups_except(&mut self, exists: impl Fn(u64) -> bool) {
        self.policies.retain(|id, _| exists(*id));
        self.v1_answers.retain(|(_, id, _, _), _| exists(*id));
        self.parents.clear();
        self.parents_bytes = 0;
        self.policies.shrink_to_fit();
        self.v1_answers.shrink_to_fit();
        self.parents.shrink_to_fit();
    }

    /// The first thing done with a denial read from the kernel: the
    /// programs in force at its sighting are read while they live (a
    /// launch's cgroup removed as its process exits frees them within
    /// milliseconds), so a culprit can still be named once the cgroup is
    /// gone. Cached by id; nothing is read while the cgroup's policy is
    /// fresh in the cache, since attribution reads nothing then either.
    pub fn read_sighted_programs(&mut self, access: &DeviceAccess) {
        let denied = matches!(
            access.verdict,
            Verdict::DeniedByBpfPolicy | Verdict::DeniedLayerUnknown
        );
        let fresh = || {
            self.policies
                .get(&access.cgroup_id)
                .is_some_and(|c| c.checked.elapsed() < RECHECK_AFTER)
        };
        if denied && !fresh() {
            self.source.read_sighted_now(&access.sighted_programs);
        }
    }

    /// For denials: names the policy that refused it in `record.denied_by`.
    /// A denial whose layer the event did not tell (fexit, errno) is settled
    /// here: a BPF policy that denies it is the culprit; if they all allow
    /// it, a check after them (cgroup v1) refused it. A policy that cannot be
    /// evaluated (or read) counts as BPF's, the usual layer on cgroup2 hosts.
    pub fn attribute(&mut self, record: &mut Record) {
        let a = &record.access;
        let query = DeviceQuery {
            dev_type: if a.block_device { 1 } else { 2 },
            major: a.major,
            minor: a.minor,
            access: a.access,
        };
        let (verdict, denied_by) = match a.verdict {
            Verdict::DeniedByBpfPolicy => (
                Verdict::DeniedByBpfPolicy,
                self.bpf_culprit(record, &query).unwrap_or_else(|| Rc::new(Rendered::new(DeniedBy::Unknown {
                    note: "the evaluator and the kernel disagree: the programs in force now allow this access (they may have changed since)".into(),
                }))),
            ),
            Verdict::DeniedLayerUnknown => match self.bpf_culprit(record, &query) {
                Some(culprit) => (Verdict::DeniedByBpfPolicy, culprit),
                None => (Verdict::DeniedAfterBpf, self.v1_culprit(record, &query)),
            },
            Verdict::DeniedAfterBpf => (Verdict::DeniedAfterBpf, self.v1_culprit(record, &query)),
            _ => return,
        };
        if record.access.verdict == Verdict::DeniedLayerUnknown
            && verdict == Verdict::DeniedByBpfPolicy
        {
            // What bpf_get_retval would have read.
            record.access.bpf_retval = -libc::EPERM;
        }
        record.access.verdict = verdict;
        record.denied_by = Some(denied_by);
    }

    fn v1_culprit(&mut self, record: &Record, query: &DeviceQuery) -> Rc<Rendered<DeniedBy>> {
        let captured = record.access.v1_devices_cgroup;
        let key = (record.access.pid, record.access.cgroup_id, captured, *query);
        if let Some((_, known)) = self
            .v1_answers
            .get(&key)
            .filter(|(at, _)| at.elapsed() < RECHECK_AFTER)
        {
            return known.clone();
        }
        let access = &record.access;
        let list = self
            .source
            .devices_list(access.pid, access.boot_ns, captured);
        let culprit = Rc::new(Rendered::new(v1_culprit(list, query)));
        // Not an answer worth keeping: the process was gone, or no v1 controller.
        if matches!(**culprit, DeniedBy::Unknown { .. }) {
            return culprit;
        }
        if self.v1_answers.len() >= V1_ANSWERS_CAPACITY {
            self.v1_answers.clear();
        }
        self.v1_answers
            .insert(key, (Instant::now(), culprit.clone()));
        culprit
    }

    /// The BPF program that denies the access, or None when the programs in
    /// force allow it (looked at twice, in case they just changed).
    fn bpf_culprit(
        &mut self,
        record: &Record,
        query: &DeviceQuery,
    ) -> Option<Rc<Rendered<DeniedBy>>> {
        let Some(cgroup) = &record.cgroup else {
            return Some(Rc::new(Rendered::new(DeniedBy::Unknown {
                note: "the cgroup is gone, so its policy cannot be read".into(),
            })));
        };
        let id = record.access.cgroup_id;
        // The common case, a repeated denial: one hash lookup.
        if let Some(known) = self
            .policies
            .get(&id)
            .filter(|c| c.checked.elapsed() < RECHECK_AFTER)
            .and_then(|c| c.answers.get(query))
        {
            return known.clone();
        }
        let sighted = &record.access.sighted_programs;
        let mut culprit = self.evaluate(id, cgroup, sighted, query, false);
        if matches!(culprit, Err(Disagreement)) {
            // The programs may have changed since the last look: look again.
            culprit = self.evaluate(id, cgroup, sighted, query, true);
        }
        let culprit = culprit.ok().map(|c| Rc::new(Rendered::new(c)));
        if let Some(cached) = self.policies.get_mut(&id) {
            if cached.answers.len() >= ANSWERS_PER_POLICY {
                cached.answers.clear();
            }
            cached.answers.insert(*query, culprit.clone());
        }
        culprit
    }

    /// Evaluates the cgroup's policy, re-reading it when the kernel's list of
    /// programs changed (checked at most every RECHECK_AFTER, or now if `recheck`).
    fn evaluate(
        &mut self,
        id: u64,
        cgroup: &Path,
        sighted: &[u32],
        query: &DeviceQuery,
        recheck: bool,
    ) -> Result<DeniedBy, Disagreement> {
        let stale = self
            .policies
            .get(&id)
            .is_none_or(|c| recheck || c.checked.elapsed() >= RECHECK_AFTER);
        if stale {
            // A cgroup removed since (a launch's, within the millisecond its
            // process exited): the programs the kernel saw in force.
            let refreshed = self.refresh(id, cgroup).or_else(|e| {
                // Both reasons: the cgroup's, and why the sighting's record
                // could not stand in (a program freed with its cgroup, say).
                self.refresh_from_sighting(id, cgroup, sighted)
                    .map_err(|at_sighting| {
                        anyhow::anyhow!("{e:#}; nor from the sighting's programs: {at_sighting:#}")
                    })
            });
            if let Err(e) = refreshed {
                return Ok(DeniedBy::Unknown {
                    note: format!(
                        "cannot read the device policy of {}: {e:#}",
                        cgroup.display()
                    ),
                });
            }
        }
        let policy = &self.policies[&id].policy;
        match policy.answer(query) {
            Answer::DeniedBy(i) => {
                let p = &policy.programs[i];
                let allowed_by = policy
                    .programs
                    .iter()
                    .filter(|other| {
                        other.id != p.id
                            && matches!(evaluate(&other.insns, query), Ok(Outcome::Allow))
                    })
                    .map(|other| AllowingProgram {
                        id: other.id,
                        name: other.name.clone(),
                        attached_at: other.attached_at.clone(),
                    })
                    .collect();
                Ok(DeniedBy::Program {
                    allowed_by,
                    id: p.id,
                    name: p.name.clone(),
                    tag: p.tag.clone(),
                    attached_at: p.attached_at.clone(),
                    loaded_at: p.loaded_at.clone(),
                    loaded_boot_ns: p.loaded_boot_ns,
                    // Filled in by the pipeline, once per program.
                    writer: None,
                })
            }
            Answer::Unknown(i, why) => Ok(DeniedBy::Unknown {
                note: format!("cannot evaluate program {}: {why}", policy.programs[i].id),
            }),
            Answer::Allowed => Err(Disagreement),
        }
    }

    /// Re-queries the cgroup's programs; re-reads the policy only if they
    /// changed. A cgroup seen for the first time may inherit its parent's.
    fn refresh(&mut self, id: u64, cgroup: &Path) -> anyhow::Result<()> {
        let inherited = if self.policies.contains_key(&id) {
            None
        } else {
            self.inherited(cgroup)?
        };
        let (ids, policy, checked) = match inherited {
            Some(inherited) => inherited,
            None => {
                let current = self.source.program_ids(cgroup)?;
                if let Some(cached) = self.policies.get_mut(&id).filter(|c| c.ids == current) {
                    cached.checked = Instant::now();
                    return Ok(());
                }
                let policy = self.source.policy(cgroup, &current)?;
                (current, policy, Instant::now())
            }
        };
        if self.policies.len() >= POLICIES_CAPACITY {
            self.policies.clear();
        }
        self.policies.insert(
            id,
            CachedPolicy {
                ids,
                policy,
                checked,
                answers: FxHashMap::default(),
            },
        );
        Ok(())
    }

    /// Caches the policy the kernel recorded at the sighting, for a cgroup
    /// whose own can no longer be read; an error when nothing was recorded
    /// or its programs are gone too.
    fn refresh_from_sighting(
        &mut self,
        id: u64,
        cgroup: &Path,
        sighted: &[u32],
    ) -> anyhow::Result<()> {
        anyhow::ensure!(sighted.iter().any(|&p| p != 0), "nothing recorded");
        if self.source.cgroup_exists(cgroup) {
            anyhow::bail!("the cgroup is there: its own policy stands");
        }
        let policy = self.source.policy_at_sighting(cgroup, sighted)?;
        if self.policies.len() >= POLICIES_CAPACITY {
            self.policies.clear();
        }
        self.policies.insert(
            id,
            CachedPolicy {
                ids: sighted.to_vec(),
                policy,
                checked: Instant::now(),
                answers: FxHashMap::default(),
            },
        );
        Ok(())
    }

    /// The policy of a cgroup with no device programs of its own: exactly
    /// its parent's, as the kernel computes what is in force. One query of
    /// the cgroup instead of one per level up to the root: each waits on the
    /// kernel's cgroup lock, which a tenant making cgroups fast holds most
    /// of the time, and its new cgroups must not cost more than they cost
    /// the tenant. The parent's policy is trusted for RECHECK_AFTER, like
    /// any cgroup's, from when it was read: the child's is as old.
    fn inherited(
        &mut self,
        cgroup: &Path,
    ) -> anyhow::Result<Option<(Vec<u32>, CgroupPolicy, Instant)>> {
        let Some(parent) = cgroup.parent() else {
            return Ok(None);
        };
        if !self.source.own_program_ids(cgroup)?.is_empty() {
            return Ok(None);
        }
        let fresh = self
            .parents
            .get(parent)
            .is_some_and(|(at, _)| at.elapsed() < RECHECK_AFTER);
        if !fresh {
            let ids = self.source.program_ids(parent)?;
            let policy = self.source.policy(parent, &ids)?;
            let bytes = parent.as_os_str().len() + policy_bytes(&policy);
            if self.parents_bytes + bytes > PARENTS_BUDGET_BYTES {
                self.parents.clear();
                self.parents_bytes = 0;
            }
            self.parents_bytes += bytes;
            let old = self
                .parents
                .insert(parent.to_path_buf(), (Instant::now(), (ids, policy)));
            if let Some((_, (_, old))) = old {
                self.parents_bytes -= parent.as_os_str().len() + policy_bytes(&old);
            }
        }
        let (read_at, (ids, policy)) = &self.parents[parent];
        let policy = CgroupPolicy {
            cgroup: cgroup.to_string_lossy().into_owned(),
            programs: policy.programs.clone(),
        };
        Ok(Some((ids.clone(), policy, *read_at)))
    }
}

/// Roughly what a policy holds on the heap (its instructions are shared).
fn policy_bytes(policy: &CgroupPolicy) -> usize {
    let programs: usize = policy
        .programs
        .iter()
        .map(|p| 96 + p.name.len() + p.tag.len() + p.attached_at.len() + p.loaded_at.len())
        .sum();
    policy.cgroup.len() + programs
}

/// The programs in force allow what the kernel denied.
struct Disagreement;

/// How long a cgroup's list of programs is trusted before it is queried
/// again. A change inside this window shows up as a disagreement between
/// the evaluator and the kernel, which re-reads at once.
const RECHECK_AFTER: Duration = Duration::from_secs(1);

/// A cgroup's policy as last read, and the answers worked out from it.
struct CachedPolicy {
    /// The effective program ids as the kernel lists them (observers included).
    ids: Vec<u32>,
    policy: CgroupPolicy,
    checked: Instant,
    /// None: the BPF programs allow it.
    answers: FxHashMap<DeviceQuery, Option<Rc<Rendered<DeniedBy>>>>,
}

fn v1_culprit(list: V1List, query: &DeviceQuery) -> DeniedBy {
    let unknown = |note: &str| DeniedBy::Unknown { note: note.into() };
    match list {
        V1List::Found(list, found_by) => {
            let note = match list.answer(query) {
                V1Answer::Denied => format!("no rule allows c {}:{}", query.major, query.minor),
                V1Answer::AllowedByDefault => "a devices.deny exception, which devices.list does not show".into(),
                V1Answer::Allowed(line) => format!("it lists `{line}`, yet the kernel denied: another check refused it"),
            };
            DeniedBy::DevicesList { cgroup: list.cgroup, note, found_by }
        }
        V1List::NoController => unknown("EPERM after the BPF policies allowed it, and no cgroup v1 devices controller: another check (an LSM?)"),
        V1List::CgroupGone => unknown("EPERM after the BPF policies allowed it; the v1 devices cgroup recorded at the sighting was removed, and the process is gone"),
        V1List::ProcessGone => unknown("EPERM after the BPF policies allowed it; the process is gone, so its v1 devices cgroup cannot be read"),
    }
}

#[cfg(test)]
mod tests {
    use std::{cell::Cell, path::Path};

    use gpu_trace_policy::DevicesList;

    use super::*;
    use crate::{
        analysis::test_support::{lxc_program, record},
        kernel::programs_in_force::PolicyProgram,
        model::denied_by::V1CgroupFoundBy,
        scenario::denylist_program,
    };

    /// Recorded programs and a recorded devices.list, counting the reads.
    struct Recorded {
        programs: Vec<PolicyProgram>,
        v1: Option<Vec<&'static str>>,
        policy_reads: Cell<u32>,
        /// The cgroup was removed, and its programs with it: only those
        /// read before (`read_early`) can still be evaluated.
        removed: bool,
        read_early: Vec<u32>,
    }

    impl Recorded {
        /// One program, id 920, attached at /lxc/200, denying `major` for rw.
        fn denying(major: u32) -> Self {
            Self {
                programs: vec![lxc_program(denylist_program(&[(major, 6)]))],
                v1: None,
                policy_reads: Cell::new(0),
                removed: false,
                read_early: Vec::new(),
            }
        }
    }

    impl PolicySource for Recorded {
        fn program_ids(&mut self, _: &Path) -> anyhow::Result<Vec<u32>> {
            anyhow::ensure!(!self.removed, "No such file or directory (os error 2)");
            Ok(self.programs.iter().map(|p| p.id).collect())
        }
        fn own_program_ids(&mut self, cgroup: &Path) -> anyhow::Result<Vec<u32>> {
            let own = self
                .programs
                .iter()
                .filter(|p| Path::new(&p.attached_at) == cgroup);
            Ok(own.map(|p| p.id).collect())
        }
        fn policy(&mut self, cgroup: &Path, _: &[u32]) -> anyhow::Result<CgroupPolicy> {
            self.policy_reads.set(self.policy_reads.get() + 1);
            Ok(CgroupPolicy {
                cgroup: cgroup.display().to_string(),
                programs: self.programs.clone(),
            })
        }
        fn policy_at_sighting(
            &mut self,
            cgroup: &Path,
            sighted: &[u32],
        ) -> anyhow::Result<CgroupPolicy> {
            let programs = sighted.iter().filter(|&&id| id != 0).map(|id| {
                let read = self.programs.iter().find(|p| p.id == *id);
                match read.filter(|_| self.read_early.contains(id)) {
                    Some(program) => Ok(PolicyProgram {
                        attached_at: format!("{} (removed)", cgroup.display()),
                        ..program.clone()
                    }),
                    None => Err(anyhow::anyhow!(
                        "program {id}, in force at the sighting, was unloaded with the cgroup"
                    )),
                }
            });
            Ok(CgroupPolicy {
                cgroup: cgroup.display().to_string(),
                programs: programs.collect::<anyhow::Result<_>>()?,
            })
        }
        fn read_sighted_now(&mut self, sighted: &[u32]) {
            self.read_early
                .extend(sighted.iter().filter(|&&id| id != 0));
        }
        fn cgroup_exists(&mut self, _: &Path) -> bool {
            !self.removed
        }
        fn devices_list(&mut self, _: u32, _: u64, captured: Option<u64>) -> V1List {
            let Some(lines) = self.v1.as_ref() else {
                return V1List::NoController;
            };
            let list = DevicesList {
                cgroup: "/lxc/200".into(),
                lines: lines.iter().map(|l| l.to_string()).collect(),
            };
            let found_by = match captured {
                Some(_) => V1CgroupFoundBy::Sighting,
                None => V1CgroupFoundBy::ProcPid,
            };
            V1List::Found(list, found_by)
        }
    }

    fn attribute(attributor: &mut Attributor<Recorded>, verdict: Verdict) -> Record {
        let mut r = record("/lxc/200", "/dev/nvidia-uvm", 509, 0, verdict, -libc::EPERM);
        attributor.attribute(&mut r);
        r
    }

    #[test]
    fn a_denial_of_unknown_layer_goes_to_the_program_that_denies_it() {
        let mut attributor = Attributor::with_source(Recorded::denying(509));
        let r = attribute(&mut attributor, Verdict::DeniedLayerUnknown);
        assert_eq!(r.access.verdict, Verdict::DeniedByBpfPolicy);
        assert_eq!(r.access.bpf_retval, -libc::EPERM);
        assert_eq!(
            **r.denied_by.expect("a culprit"),
            DeniedBy::Program {
                id: 920,
                name: "lxc_devices".into(),
                tag: "ab12".into(),
                attached_at: "/lxc/200".into(),
                loaded_at: "2026-11-30T06:00:00Z".into(),
                loaded_boot_ns: 1_000_000_000,
                writer: None,
                allowed_by: Vec::new(),
            }
        );
    }

    #[test]
    fn programs_that_allow_leave_the_denial_to_v1_devices_list() {
        let mut source = Recorded::denying(195);
        source.v1 = Some(vec!["c 195:* rwm", "c 1:3 rwm"]);
        let mut attributor = Attributor::with_source(source);
        let r = attribute(&mut attributor, Verdict::DeniedLayerUnknown);
        assert_eq!(r.access.verdict, Verdict::DeniedAfterBpf);
        assert_eq!(
            **r.denied_by.expect("a culprit"),
            DeniedBy::DevicesList {
                cgroup: "/lxc/200".into(),
                note: "no rule allows c 509:0".into(),
                found_by: V1CgroupFoundBy::ProcPid,
            }
        );
    }

    #[test]
    fn a_kernel_denial_the_programs_allow_is_a_disagreement_read_twice() {
        let mut attributor = Attributor::with_source(Recorded::denying(195));
        let r = attribute(&mut attributor, Verdict::DeniedByBpfPolicy);
        assert_eq!(r.access.verdict, Verdict::DeniedByBpfPolicy);
        assert!(matches!(
            &**r.denied_by.expect("a note"),
            DeniedBy::Unknown { note } if note.starts_with("the evaluator and the kernel disagree")
        ));
        // The ids did not change between the two looks: the policy was read once.
        assert_eq!(attributor.source.policy_reads.get(), 1);
    }

    #[test]
    fn a_repeated_denial_is_answered_from_the_cache() {
        let mut attributor = Attributor::with_source(Recorded::denying(509));
        let first = attribute(&mut attributor, Verdict::DeniedLayerUnknown);
        let again = attribute(&mut attributor, Verdict::DeniedLayerUnknown);
        assert_eq!(attributor.source.policy_reads.get(), 1);
        assert!(Rc::ptr_eq(
            first.denied_by.as_ref().expect("culprit"),
            again.denied_by.as_ref().expect("culprit")
        ));
    }

    #[test]
    fn cgroups_without_programs_of_their_own_run_their_parents_read_once() {
        let mut attributor = Attributor::with_source(Recorded::denying(509));
        for (n, child) in ["/lxc/200/a", "/lxc/200/b"].into_iter().enumerate() {
            let mut r = record(
                child,
                "/dev/nvidia-uvm",
                509,
                0,
                Verdict::DeniedLayerUnknown,
                -libc::EPERM,
            );
            r.access.cgroup_id = 7_000 + n as u64;
            attributor.attribute(&mut r);
            assert!(matches!(
                &**r.denied_by.expect("a culprit"),
                DeniedBy::Program { id: 920, attached_at, .. } if attached_at == "/lxc/200"
            ));
        }
        assert_eq!(attributor.source.policy_reads.get(), 1);
    }

    /// A denial by program 920, recorded at the sighting, in a cgroup
    /// removed since: the attributor and the record.
    fn denied_in_a_removed_cgroup() -> (Attributor<Recorded>, Record) {
        let mut source = Recorded::denying(509);
        source.removed = true;
        let mut r = record(
            "/lxc/200",
            "/dev/nvidia-uvm",
            509,
            0,
            Verdict::DeniedByBpfPolicy,
            -libc::EPERM,
        );
        r.access.sighted_programs[0] = 920;
        (Attributor::with_source(source), r)
    }

    #[test]
    fn a_removed_cgroup_whose_program_is_gone_too_says_both_reasons() {
        let (mut attributor, mut r) = denied_in_a_removed_cgroup();
        attributor.attribute(&mut r);
        assert!(matches!(
            &**r.denied_by.expect("a note"),
            DeniedBy::Unknown { note } if note.ends_with(
                "No such file or directory (os error 2); nor from the sighting's programs: \
                 program 920, in force at the sighting, was unloaded with the cgroup"
            )
        ));
    }

    #[test]
    fn a_program_read_at_once_names_the_culprit_after_its_cgroup_and_it_are_gone() {
        let (mut attributor, mut r) = denied_in_a_removed_cgroup();
        attributor.read_sighted_programs(&r.access);
        attributor.attribute(&mut r);
        assert!(matches!(
            &**r.denied_by.expect("a culprit"),
            DeniedBy::Program { id: 920, attached_at, .. } if attached_at == "/lxc/200 (removed)"
        ));
    }

    #[test]
    fn a_denial_in_a_cgroup_whose_policy_is_fresh_reads_no_programs_ahead() {
        let mut attributor = Attributor::with_source(Recorded::denying(509));
        let mut r = attribute(&mut attributor, Verdict::DeniedByBpfPolicy);
        r.access.sighted_programs[0] = 920;
        attributor.read_sighted_programs(&r.access);
        assert!(attributor.source.read_early.is_empty());
    }

    #[test]
    fn an_allowed_access_reads_no_programs_ahead() {
        let mut attributor = Attributor::with_source(Recorded::denying(509));
        let mut r = record("/lxc/200", "/dev/nvidia0", 195, 0, Verdict::Allowed, 0);
        r.access.sighted_programs[0] = 920;
        attributor.read_sighted_programs(&r.access);
        assert!(attributor.source.read_early.is_empty());
    }

    #[test]
    fn without_a_v1_controller_the_layer_is_unknown() {
        let mut attributor = Attributor::with_source(Recorded::denying(195));
        let r = attribute(&mut attributor, Verdict::DeniedAfterBpf);
        assert!(matches!(
            &**r.denied_by.expect("a note"),
            DeniedBy::Unknown { note } if note.contains("no cgroup v1 devices controller")
        ));
    }
}
