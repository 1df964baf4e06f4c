//! What every tracing command starts with: the tracer in the kernel and
//! the pipeline that turns its accesses into records.

use std::path::Path;

use crate::{
    analysis::pipeline::Pipeline,
    cgroup::resolver::CgroupResolver,
    host::proc_devices::CharMajors,
    kernel::tracer::{Tracer, TracerConfig},
};

pub struct Session {
    pub tracer: Tracer,
    pub pipeline: Pipeline,
}

impl Session {
    /// Starts the tracer; the cgroups it saw made while it started are
    /// handed to `cgroups`, which the pipeline then resolves with.
    pub fn start(
        cgroup2_mount: &Path,
        config: &TracerConfig,
        cgroups: CgroupResolver,
        majors: CharMajors,
    ) -> anyhow::Result<Self> {
        let mut tracer = Tracer::start(cgroup2_mount, config)?;
        let cgroups = cgroups.with_cgroups_made(tracer.take_cgroup_paths());
        Ok(Self {
            tracer,
            pipeline: Pipeline::new(cgroups, majors),
        })
    }

    /// Up to `limit` events from the ring buffer through the pipeline;
    /// returns how many (`limit`: more may wait).
    pub fn drain(&mut self, limit: usize, output: &mut impl Output) -> usize {
        let pipeline = &mut self.pipeline;
        self.tracer.drain(limit, |access| {
            output.record(pipeline.process(access), None)
        })
    }

    /// The repeats the kernel counted, each one record with its count.
    pub fn admit_repeats(&mut self, output: &mut impl Output) {
        for (access, count) in self.tracer.collect_repeats() {
            let mut record = self.pipeline.process(access);
            record.count = count;
            output.record(record, Some(count));
        }
    }
}

/// Where the records of an event loop go.
pub trait Output {
    /// One record from the pipeline; `kernel_repeats` when it stands for
    /// repeats the kernel counted rather than sent (its `count`).
    fn record(&mut self, record: crate::model::record::Record, kernel_repeats: Option<u64>);

    /// After each drain: write out what was buffered.
    fn flush(&mut self) -> anyhow::Result<()> {
        Ok(())
    }

    /// Once a tick, after the ring buffer and the kernel's repeats.
    fn tick(&mut self, _session: &mut Session) -> anyhow::Result<()> {
        Ok(())
    }

    /// After the last drain.
    fn finish(&mut self) -> anyhow::Result<()> {
        self.flush()
    }
}
