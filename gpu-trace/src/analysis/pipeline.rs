//! The one direction data flows in userspace: typed access -> record with
//! names and container -> the policy that denied it -> diagnosis. Shared by `watch` and `run`.

use crate::{
    analysis::{attribute::Attributor, diagnose::Diagnoser, enrich::Enricher},
    cgroup::resolver::CgroupResolver,
    host::proc_devices::CharMajors,
    model::{access::DeviceAccess, record::Record},
};

pub struct Pipeline {
    pub enricher: Enricher,
    attributor: Attributor,
    diagnoser: Diagnoser,
}

impl Pipeline {
    pub fn new(cgroups: CgroupResolver, majors: CharMajors) -> Self {
        Self {
            attributor: Attributor::new(cgroups.mount()),
            enricher: Enricher::new(cgroups, majors),
            diagnoser: Diagnoser::default(),
        }
    }

    pub fn process(&mut self, access: DeviceAccess) -> Record {
        let mut record = self.enricher.enrich(access);
        self.attributor.attribute(&mut record);
        record.diagnosis = self.diagnoser.diagnose(
            &record,
            self.enricher.majors(),
            self.enricher.majors_generation(),
        );
        record
    }
}
