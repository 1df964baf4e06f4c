//! From what was seen to why it failed and what to change: a named root
//! cause and a fix in the words of the container's runtime.
//!
//! `causes` is the catalogue, in the order causes are tried (documented in
//! docs/root-causes.md). A cause reads `Facts`, which is the cache key, and
//! a `Context` whose change empties the cache; the host is read through
//! `host::Host`, the seam the tests fake.

mod causes;
mod facts;
mod host;
mod neighbour_modules;
mod phrasing;
mod symptoms;
#[cfg(test)]
mod testing;

use std::rc::Rc;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::{
    analysis::diagnose::{
        facts::{Context, Facts},
        host::Host,
    },
    cgroup::first_process::FirstProcess,
    host::proc_devices::CharMajors,
    model::{access::Verdict, diagnosis::Diagnosis, record::Record},
};

/// Remembers which (cgroup, device) pairs were allowed, to recognise rules
/// rewritten while a container runs, and caches diagnoses: a denial
/// retried in a loop is diagnosed once.
#[derive(Debug, Default)]
pub struct Diagnoser {
    allowed: FxHashSet<(u64, u32, u32)>,
    /// cgroups in which the NVIDIA frontend (195) was seen allowed.
    frontend_allowed: FxHashSet<u64>,
    cache: FxHashMap<Facts, Option<Rc<Diagnosis>>>,
    /// Which /proc/devices snapshot (its generation) the cache was filled against.
    majors_seen: Option<u64>,
    host: Host,
}

/// Enough for every distinct problem a host shows at once; a flood of
/// distinct paths only empties it more often.
const CACHE_LIMIT: usize = 4096;
/// What was seen allowed, bounded the same way: forgetting costs only a
/// `rules-rewritten` named as the cause that explains it without history.
const ALLOWED_LIMIT: usize = 65_536;

impl Diagnoser {
    /// The diagnoser of a live host: what it reads in the background (the
    /// CDI specs) is read once now, before the first event.
    pub fn live() -> Self {
        host::read_cdi_specs_in_background();
        Self::default()
    }

    /// Learns from every record; returns a diagnosis for problems.
    /// `majors_generation` changes whenever `majors` does; `device_allow`
    /// is the DeviceAllow= list of the systemd unit whose program denied it.
    pub fn diagnose(
        &mut self,
        record: &Record,
        majors: &CharMajors,
        majors_generation: u64,
        started: Option<FirstProcess>,
        device_allow: Option<&Rc<[String]>>,
    ) -> Option<Rc<Diagnosis>> {
        // The context changed: what was cached may no longer hold.
        let learned = self.learn(record);
        if learned || self.majors_seen != Some(majors_generation) || self.cache.len() >= CACHE_LIMIT
        {
            self.cache.clear();
            self.majors_seen = Some(majors_generation);
        }
        let facts = Facts::of(record, started, device_allow);
        if let Some(known) = self.cache.get(&facts) {
            return known.clone();
        }
        let context = Context {
            majors,
            opened_before: self
                .allowed
                .contains(&(facts.cgroup_id, facts.major, facts.minor)),
            frontend_allowed: self.frontend_allowed.contains(&facts.cgroup_id),
            host: &self.host,
        };
        let diagnosis = causes::first_fitting(&facts, &context).map(Rc::new);
        self.cache.insert(facts, diagnosis.clone());
        diagnosis
    }

    /// Drops what was learned and cached for cgroups that are gone.
    pub fn forget_cgroups_except(&mut self, exists: impl Fn(u64) -> bool) {
        self.allowed.retain(|(id, _, _)| exists(*id));
        self.frontend_allowed.retain(|id| exists(*id));
        self.cache.retain(|facts, _| exists(facts.cgroup_id));
        self.allowed.shrink_to_fit();
        self.frontend_allowed.shrink_to_fit();
        self.cache.shrink_to_fit();
    }

    /// Records allowed accesses; true when that changes what is known.
    fn learn(&mut self, record: &Record) -> bool {
        let a = &record.access;
        if a.verdict != Verdict::Allowed {
            return false;
        }
        if self.allowed.len() >= ALLOWED_LIMIT || self.frontend_allowed.len() >= ALLOWED_LIMIT {
            self.allowed.clear();
            self.frontend_allowed.clear();
        }
        let new_pair = self.allowed.insert((a.cgroup_id, a.major, a.minor));
        let new_frontend = record.node.is_some_and(|n| !n.has_dynamic_major())
            && self.frontend_allowed.insert(a.cgroup_id);
        new_pair || new_frontend
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use crate::{
        analysis::{
            diagnose::{host::NodeGroup, testing::*},
            test_support::PROC_DEVICES,
        },
        cgroup::first_process::FirstProcess,
        host::proc_devices::CharMajors,
        model::{denied_by::DeniedBy, rendered::Rendered},
    };

    /// The cache key is the facts themselves: an input a cause reads
    /// cannot be left out of it, so a cached answer never stands for
    /// another.
    #[test]
    fn an_access_that_differs_in_what_a_cause_reads_is_diagnosed_anew() {
        let majors = CharMajors::parse(PROC_DEVICES);
        let mut d = Diagnoser::default();
        // The same denial, first without the cgroup's start, then with a
        // start long before the program was written.
        let mut denied = denied(DOCKER_SCOPE, "/dev/nvidia0", 195, 0);
        denied.denied_by = Some(Rc::new(Rendered::new(DeniedBy::Program {
            id: 4120,
            name: "sd_devices".into(),
            tag: "ab12".into(),
            attached_at: DOCKER_SCOPE.into(),
            loaded_at: "2026-11-30T06:03:12Z".into(),
            loaded_boot_ns: 200_000_000_000,
            writer: None,
            allowed_by: Vec::new(),
        })));
        let started = FirstProcess {
            pid: 8812,
            start_boot_ns: 8_000_000_000,
        };
        let cause = |d: &mut Diagnoser, started| {
            d.diagnose(&denied, &majors, 0, started, None)
                .expect("diagnosis")
                .cause
        };
        assert_ne!(cause(&mut d, None), Cause::RulesRewritten);
        assert_eq!(cause(&mut d, Some(started)), Cause::RulesRewritten);

        // EACCES from two processes of one cgroup, one of them outside the
        // node's group: each is read as itself.
        d.host.node_group = |process, _| {
            Some(NodeGroup {
                mode: 0o20660,
                gid: 109,
                process_groups: if process.pid == 2 {
                    vec![44]
                } else {
                    vec![109]
                },
            })
        };
        let mut eacces =
            failed_before_check(DOCKER_SCOPE, "/dev/dri/renderD128", 226, 128, libc::EACCES);
        let hint = |d: &mut Diagnoser, eacces: &crate::model::record::Record| {
            d.diagnose(eacces, &majors, 0, None, None)
                .expect("diagnosis")
                .hint
                .clone()
        };
        assert!(hint(&mut d, &eacces).starts_with("check `ls -l"));
        eacces.access.pid = 2;
        assert!(hint(&mut d, &eacces).starts_with("give the container group 109"));
    }
}
