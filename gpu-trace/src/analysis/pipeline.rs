//! The one direction data flows in userspace: typed access -> record with
//! names and container -> the policy that denied it -> diagnosis. Shared by `watch` and `run`.

use std::{path::PathBuf, rc::Rc};

use crate::{
    analysis::{
        attribute::Attributor, diagnose::Diagnoser, enrich::Enricher,
        gpu_allocation::GpuAllocations, policy_writer::WriterFinder, unit_rules::UnitRules,
    },
    cgroup::resolver::CgroupResolver,
    host::proc_devices::CharMajors,
    model::{access::DeviceAccess, denied_by::DeniedBy, record::Record, rendered::Rendered},
};

pub struct Pipeline {
    pub enricher: Enricher,
    attributor: Attributor,
    diagnoser: Diagnoser,
    writers: WriterFinder,
    unit_rules: UnitRules,
    /// The kubelet's allocations, when watch reads them.
    allocations: Option<GpuAllocations>,
}

impl Pipeline {
    pub fn new(cgroups: CgroupResolver, majors: CharMajors) -> Self {
        Self {
            attributor: Attributor::new(cgroups.mount()),
            enricher: Enricher::new(cgroups, majors),
            diagnoser: Diagnoser::live(),
            writers: WriterFinder::default(),
            unit_rules: UnitRules::default(),
            allocations: None,
        }
    }

    /// Tells GPUs denied to pods apart as allocated or probed, from the
    /// kubelet's PodResources API at `socket`.
    pub fn read_pod_resources(&mut self, socket: PathBuf) {
        self.allocations = Some(GpuAllocations::start(socket));
    }

    /// From the event loop's tick: cgroup walks land here, and what was
    /// kept for cgroups since removed is dropped and handed back to the
    /// system (a tenant that made and removed 100 000 cgroups must not
    /// leave watch holding their memory).
    pub fn maintain(&mut self) {
        if self.enricher.maintain() {
            let enricher = &self.enricher;
            let exists = |id| enricher.knows_cgroup(id);
            self.attributor.forget_cgroups_except(exists);
            self.diagnoser.forget_cgroups_except(exists);
            // SAFETY: glibc's malloc_trim only returns free heap pages.
            unsafe { libc::malloc_trim(0) };
        }
    }

    pub fn process(&mut self, access: DeviceAccess) -> Record {
        self.attributor.read_sighted_programs(&access);
        let mut record = self.enricher.enrich(access);
        self.attributor.attribute(&mut record);
        // A whole GPU only: a MIG device's UUID does not say its GPU's.
        if let (Some(allocations), Some(gpu), None) =
            (&mut self.allocations, record.gpu.as_deref(), &record.mig)
        {
            if record.access.verdict.is_denied() {
                record.allocation = allocations
                    .of(&record.container, gpu)
                    .map(|a| Rc::new(Rendered::new(a)));
            }
        }
        if let Some(culprit) = record.denied_by.take() {
            record.denied_by = Some(self.writers.with_writer(culprit, &record.container));
        }
        // When a program denied it: was that program written after the
        // cgroup's first process started? (A rewrite, seen without history.)
        let denied_by_program = record
            .denied_by
            .as_deref()
            .is_some_and(|d| matches!(**d, DeniedBy::Program { .. }));
        let started = denied_by_program
            .then(|| self.enricher.cgroup_started(&record))
            .flatten();
        record.diagnosis = self.diagnoser.diagnose(
            &record,
            self.enricher.majors(),
            self.enricher.majors_generation(),
            started,
            self.unit_rules.of_culprit(&record).as_ref(),
        );
        record
    }
}
