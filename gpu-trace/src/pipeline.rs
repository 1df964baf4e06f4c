//! The one direction data flows in userspace: typed access -> record with
//! names and container -> diagnosis. Shared by `watch` and `run`.

use crate::{
    cgroup::CgroupPaths,
    devices::CharMajors,
    diagnose::Diagnoser,
    enrich::{Enricher, Record},
    event::DeviceAccess,
};

pub struct Pipeline {
    pub enricher: Enricher,
    diagnoser: Diagnoser,
}

impl Pipeline {
    pub fn new(cgroups: CgroupPaths, majors: CharMajors) -> Self {
        Self {
            enricher: Enricher::new(cgroups, majors),
            diagnoser: Diagnoser::default(),
        }
    }

    pub fn process(&mut self, access: DeviceAccess) -> Record {
        let mut record = self.enricher.enrich(access);
        record.diagnosis = self.diagnoser.diagnose(&record, self.enricher.majors());
        record
    }
}
