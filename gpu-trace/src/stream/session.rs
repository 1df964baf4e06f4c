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
            output.record(pipeline.process(access), Counted::Sent)
        })
    }

    /// What the kernel counted rather than sent, each one record with its
    /// count: repeats, and problems held back past their cgroup's budget;
    /// then the events lost, by cgroup. `last` before the tracer stops.
    pub fn admit_repeats(&mut self, output: &mut impl Output, last: bool) {
        let counted = self.tracer.counted_in_kernel(last);
        let repeats = counted
            .repeats
            .into_iter()
            .map(|(a, n)| (a, Counted::Repeats(n)));
        let held = counted
            .held_back
            .into_iter()
            .map(|(a, n)| (a, Counted::HeldBack(n)));
        for (access, how) in repeats.chain(held) {
            let mut record = self.pipeline.process(access);
            record.count = how.in_kernel();
            output.record(record, how);
        }
        let mut lost = counted.lost_by_cgroup;
        if !lost.is_empty() {
            // The most first: only they are named (a tenant's cgroups can
            // be many), the rest summed.
            lost.sort_unstable_by_key(|&(_, count)| std::cmp::Reverse(count));
            let named: Vec<LostInCgroup> = lost
                .iter()
                .take(LOST_CGROUPS_NAMED)
                .map(|&(cgroup_id, count)| LostInCgroup {
                    cgroup: self.pipeline.enricher.cgroup_path(cgroup_id),
                    cgroup_id,
                    count,
                })
                .collect();
            let rest = &lost[named.len()..];
            let others = (rest.len(), rest.iter().map(|&(_, n)| n).sum());
            output.lost(&named, others);
        }
    }
}

/// Cgroups named, per tick, in what was lost to a full ring buffer.
const LOST_CGROUPS_NAMED: usize = 5;

/// Events of one cgroup lost to a full ring buffer.
pub struct LostInCgroup {
    pub cgroup_id: u64,
    /// Its path, where it can be named.
    pub cgroup: Option<std::path::PathBuf>,
    pub count: u64,
}

/// How a record reached userspace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counted {
    /// Sent through the ring buffer.
    Sent,
    /// This many repeats of a problem sent before, counted in the kernel.
    Repeats(u64),
    /// This many problems past their cgroup's budget, counted in the kernel.
    HeldBack(u64),
}

impl Counted {
    /// How many the kernel counted rather than sent.
    pub fn in_kernel(self) -> u64 {
        match self {
            Counted::Sent => 0,
            Counted::Repeats(n) | Counted::HeldBack(n) => n,
        }
    }
}

/// Where the records of an event loop go.
pub trait Output {
    /// One record from the pipeline, and how it came.
    fn record(&mut self, record: crate::model::record::Record, counted: Counted);

    /// Events lost to a full ring buffer since the last tick: the cgroups
    /// that lost the most, and how many other cgroups lost how many.
    fn lost(&mut self, _named: &[LostInCgroup], _others: (usize, u64)) {}

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
