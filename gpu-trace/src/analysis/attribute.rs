//! Which policy refused a live denial: the same evaluator `check` uses, run
//! against the programs in force on the event's cgroup. Policies and their
//! answers are cached per cgroup and re-read when its set of programs changes.

use crate::model::denied_by::DeniedBy;

use std::{
    fs::File,
    path::{Path, PathBuf},
    rc::Rc,
    time::{Duration, Instant},
};

use rustc_hash::FxHashMap;

use crate::{
    kernel::bpf_sys::device_programs, kernel::programs_in_force::CgroupPolicy,
    kernel::programs_in_force::ProgramCache, model::access::Verdict, model::record::Record,
    model::rendered::Rendered,
};
use gpu_trace_policy::{Answer, DeviceQuery, V1Answer};

pub struct Attributor {
    mount: PathBuf,
    programs: ProgramCache,
    /// By cgroup id.
    policies: FxHashMap<u64, CachedPolicy>,
    /// v1 verdicts by process, cgroup and access, with when they were
    /// worked out: each costs three file reads, and a process retrying a
    /// denied open would otherwise pay them per event (26k events/s at most).
    v1_answers: FxHashMap<V1Key, Dated<Rc<Rendered<DeniedBy>>>>,
}

/// A cached answer and when it was worked out.
type Dated<T> = (Instant, T);
/// Process id, cgroup id, access.
type V1Key = (u32, u64, DeviceQuery);

/// Bound on `v1_answers`; past it the table starts afresh.
const V1_ANSWERS_CAPACITY: usize = 4096;

impl Attributor {
    pub fn new(mount: impl Into<PathBuf>) -> Self {
        Self {
            mount: mount.into(),
            programs: ProgramCache::default(),
            policies: FxHashMap::default(),
            v1_answers: FxHashMap::default(),
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
            Verdict::Denied => match self.bpf_culprit(record, &query) {
                Some(culprit) => (Verdict::DeniedByBpfPolicy, culprit),
                None => (Verdict::DeniedAfterBpf, self.v1_culprit(record, &query)),
            },
            Verdict::DeniedAfterBpf => (Verdict::DeniedAfterBpf, self.v1_culprit(record, &query)),
            _ => return,
        };
        if record.access.verdict == Verdict::Denied && verdict == Verdict::DeniedByBpfPolicy {
            // What bpf_get_retval would have read.
            record.access.bpf_retval = -libc::EPERM;
        }
        record.access.verdict = verdict;
        record.denied_by = Some(denied_by);
    }

    fn v1_culprit(&mut self, record: &Record, query: &DeviceQuery) -> Rc<Rendered<DeniedBy>> {
        let key = (record.access.pid, record.access.cgroup_id, *query);
        if let Some((_, known)) = self
            .v1_answers
            .get(&key)
            .filter(|(at, _)| at.elapsed() < RECHECK_AFTER)
        {
            return known.clone();
        }
        let culprit = Rc::new(Rendered::new(v1_culprit(record.access.pid, query)));
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
        let mut culprit = self.evaluate(id, cgroup, query, false);
        if matches!(culprit, Err(Disagreement)) {
            // The programs may have changed since the last look: look again.
            culprit = self.evaluate(id, cgroup, query, true);
        }
        let culprit = culprit.ok().map(|c| Rc::new(Rendered::new(c)));
        if let Some(cached) = self.policies.get_mut(&id) {
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
        query: &DeviceQuery,
        recheck: bool,
    ) -> Result<DeniedBy, Disagreement> {
        let stale = self
            .policies
            .get(&id)
            .is_none_or(|c| recheck || c.checked.elapsed() >= RECHECK_AFTER);
        if stale {
            if let Err(e) = self.refresh(id, cgroup) {
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
                Ok(DeniedBy::Program {
                    id: p.id,
                    name: p.name.clone(),
                    tag: p.tag.clone(),
                    attached_at: p.attached_at.clone(),
                })
            }
            Answer::Unknown(i, why) => Ok(DeniedBy::Unknown {
                note: format!("cannot evaluate program {}: {why}", policy.programs[i].id),
            }),
            Answer::Allowed => Err(Disagreement),
        }
    }

    /// Re-queries the cgroup's programs; re-reads the policy only if they changed.
    fn refresh(&mut self, id: u64, cgroup: &Path) -> anyhow::Result<()> {
        let dir = self.mount.join(cgroup.strip_prefix("/").unwrap_or(cgroup));
        let current = device_programs(File::open(&dir)?, true)?.program_ids;
        match self.policies.get_mut(&id) {
            Some(cached) if cached.ids == current => cached.checked = Instant::now(),
            _ => {
                let policy = CgroupPolicy::read(&self.mount, cgroup, &mut self.programs)?;
                self.policies.insert(
                    id,
                    CachedPolicy {
                        ids: current,
                        policy,
                        checked: Instant::now(),
                        answers: FxHashMap::default(),
                    },
                );
            }
        }
        Ok(())
    }
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

fn v1_culprit(pid: u32, query: &DeviceQuery) -> DeniedBy {
    match crate::host::proc_pid::devices_list_of(pid) {
        Ok(Some(list)) => {
            let note = match list.answer(query) {
                V1Answer::Denied => format!("no rule allows c {}:{}", query.major, query.minor),
                V1Answer::AllowedByDefault => "a devices.deny exception, which devices.list does not show".into(),
                V1Answer::Allowed(line) => format!("it lists `{line}`, yet the kernel denied: another check refused it"),
            };
            DeniedBy::DevicesList { cgroup: list.cgroup, note }
        }
        Ok(None) => DeniedBy::Unknown { note: "EPERM after the BPF policies allowed it, and no cgroup v1 devices controller: another check (an LSM?)".into() },
        Err(_) => DeniedBy::Unknown { note: "EPERM after the BPF policies allowed it; the process is gone, so its v1 devices cgroup cannot be read".into() },
    }
}
