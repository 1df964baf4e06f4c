//! Which policy refused a live denial: the same evaluator `check` uses, run
//! against the programs in force on the event's cgroup. Policies are cached
//! per cgroup and reused while its set of programs stays the same.

use std::{collections::HashMap, fs::File, path::PathBuf};

use serde::Serialize;

use crate::{
    bpf_sys::device_programs,
    devices_list::{DevicesList, V1Answer},
    enrich::Record,
    evaluator::DeviceQuery,
    event::Verdict,
    policy::{Answer, CgroupPolicy, ProgramCache},
};

/// What refused an access, as far as gpu-trace can show.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum DeniedBy {
    /// This cgroup_device program.
    Program {
        id: u32,
        name: String,
        tag: String,
        attached_at: String,
    },
    /// cgroup v1's devices controller of this (v1) cgroup.
    DevicesList { cgroup: String, note: String },
    /// The evaluator could not say; never a guess.
    Unknown { note: String },
}

impl DeniedBy {
    pub fn describe(&self) -> String {
        match self {
            DeniedBy::Program {
                id,
                name,
                attached_at,
                ..
            } if name.is_empty() => format!("prog {id} at {attached_at}"),
            DeniedBy::Program {
                id,
                name,
                attached_at,
                ..
            } => format!("prog {id} ({name}) at {attached_at}"),
            DeniedBy::DevicesList { cgroup, note } => {
                format!("devices.list of v1 cgroup {cgroup} ({note})")
            }
            DeniedBy::Unknown { note } => note.clone(),
        }
    }
}

pub struct Attributor {
    mount: PathBuf,
    programs: ProgramCache,
    /// By cgroup id: the effective program ids as the kernel lists them
    /// (observers included) and the policy read for them.
    policies: HashMap<u64, (Vec<u32>, CgroupPolicy)>,
}

impl Attributor {
    pub fn new(mount: impl Into<PathBuf>) -> Self {
        Self {
            mount: mount.into(),
            programs: ProgramCache::default(),
            policies: HashMap::new(),
        }
    }

    /// For denials only; None for anything else.
    pub fn denied_by(&mut self, record: &Record) -> Option<DeniedBy> {
        let a = &record.access;
        let query = DeviceQuery {
            dev_type: if a.block_device { 1 } else { 2 },
            major: a.major,
            minor: a.minor,
            access: a.access,
        };
        match a.verdict {
            Verdict::DeniedByBpfPolicy => Some(self.bpf_culprit(record, &query)),
            Verdict::DeniedAfterBpf => Some(v1_culprit(a.pid, &query)),
            _ => None,
        }
    }

    fn bpf_culprit(&mut self, record: &Record, query: &DeviceQuery) -> DeniedBy {
        let unknown = |note: String| DeniedBy::Unknown { note };
        let Some(cgroup) = &record.cgroup else {
            return unknown("the cgroup is gone, so its policy cannot be read".into());
        };
        let policy = match self.policy(record.access.cgroup_id, cgroup) {
            Ok(policy) => policy,
            Err(e) => {
                return unknown(format!(
                    "cannot read the device policy of {}: {e:#}",
                    cgroup.display()
                ))
            }
        };
        match policy.answer(query) {
            Answer::DeniedBy(i) => {
                let p = &policy.programs[i];
                DeniedBy::Program { id: p.id, name: p.name.clone(), tag: p.tag.clone(), attached_at: p.attached_at.clone() }
            }
            Answer::Unknown(i, why) => unknown(format!("cannot evaluate program {}: {why}", policy.programs[i].id)),
            Answer::Allowed => unknown(
                "the evaluator and the kernel disagree: the programs in force now allow this access (they may have changed since)".into(),
            ),
        }
    }

    /// The cached policy of a cgroup, re-read when its programs changed.
    fn policy(
        &mut self,
        cgroup_id: u64,
        cgroup: &std::path::Path,
    ) -> anyhow::Result<&CgroupPolicy> {
        let dir = self.mount.join(cgroup.strip_prefix("/").unwrap_or(cgroup));
        let current = device_programs(File::open(&dir)?, true)?.program_ids;
        let fresh = self
            .policies
            .get(&cgroup_id)
            .is_some_and(|(ids, _)| *ids == current);
        if !fresh {
            let policy = CgroupPolicy::read(&self.mount, cgroup, &mut self.programs)?;
            self.policies.insert(cgroup_id, (current, policy));
        }
        Ok(&self.policies[&cgroup_id].1)
    }
}

fn v1_culprit(pid: u32, query: &DeviceQuery) -> DeniedBy {
    match DevicesList::for_pid(pid) {
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
