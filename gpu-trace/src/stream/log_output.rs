//! Where `watch`'s records go: counted, narrowed down (filter), folded,
//! written to the sink; and what its once-a-second tick writes and drops.

use std::io;

use crate::{
    model::record::Record,
    render::output::{write_record, Format},
    stream::{
        filter::Filter,
        fold::Folder,
        metrics::Metrics,
        otlp::OtlpExporter,
        session::{Counted, LostInCgroup, Output, Session},
        sink::Sink,
    },
    text::terminal::printable,
};

/// Bytes of a cgroup's path shown in the line that names lost events.
const LOST_NAME_BYTES: usize = 120;

/// Counts for the closing summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub events: u64,
    pub denied: u64,
    /// Of `events`, the repeats the kernel counted rather than sent.
    pub folded_in_kernel: u64,
}

pub struct LogOutput<'a> {
    pub filter: Filter,
    pub folder: Folder,
    pub sink: &'a mut Sink,
    pub format: Format,
    pub paint: bool,
    pub metrics: Option<&'a Metrics>,
    /// `--otlp`: each record written goes to the collector too.
    pub otlp: Option<&'a OtlpExporter>,
    pub tally: Tally,
}

impl LogOutput<'_> {
    fn write(&mut self, record: &Record) {
        let _ = write_record(self.sink.line_buffer(), self.format, self.paint, record);
        if let Some(otlp) = self.otlp {
            otlp.send(record);
        }
    }

    /// Writes out what was buffered, then carries on in a new file
    /// (logrotate moved the old one away).
    pub fn reopen(&mut self) -> anyhow::Result<()> {
        self.flush()?;
        if let Err(e) = self.sink.reopen() {
            eprintln!(
                "gpu-trace: reopening the output after SIGHUP: {e:#}; still writing to the old file"
            );
        }
        Ok(())
    }
}

impl Output for LogOutput<'_> {
    fn record(&mut self, record: Record, counted: Counted) {
        let count = record.count;
        self.tally.events += count;
        self.tally.folded_in_kernel += counted.in_kernel();
        if record.access.verdict.is_denied() {
            self.tally.denied += count;
        }
        if let Some(metrics) = self.metrics {
            metrics.observe(&record);
        }
        if !self.filter.accepts(&record) {
            return;
        }
        let admitted = match counted {
            Counted::Sent => self.folder.admit(record),
            Counted::Repeats(_) => self.folder.admit_repeats(record),
            Counted::HeldBack(_) => self.folder.admit_held_back(record),
        };
        if let Some(record) = admitted {
            self.write(&record);
            if self.sink.batch_is_full() {
                // A failure here (the output thread gone) comes back at the
                // drain's own flush, which ends watch.
                let _ = self.flush();
            }
        }
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        match self.sink.flush() {
            // `gpu-trace watch | head` ends quietly.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
            other => Ok(other?),
        }
    }

    /// Said on stderr, where an operator looks for trouble; a tenant's
    /// path is escaped like every name.
    fn lost(&mut self, named: &[LostInCgroup], (cgroups, events): (usize, u64)) {
        let mut line = String::from("gpu-trace: the ring buffer was full; lost");
        for (i, lost) in named.iter().enumerate() {
            // Cut short: the line is said every tick, and a tenant's path
            // may be 4 KB.
            let name = lost.cgroup.as_ref().map_or_else(
                || format!("id {}", lost.cgroup_id),
                |path| {
                    let bytes = path.as_os_str().as_encoded_bytes();
                    let cut = &bytes[..bytes.len().min(LOST_NAME_BYTES)];
                    let more = if cut.len() < bytes.len() { "..." } else { "" };
                    format!("{}{more} (id {})", printable(cut), lost.cgroup_id)
                },
            );
            let sep = if i == 0 { "" } else { "," };
            line.push_str(&format!("{sep} {} of cgroup {name}", lost.count));
        }
        if cgroups > 0 {
            line.push_str(&format!(", {events} of {cgroups} other cgroups"));
        }
        eprintln!("{line}");
    }

    /// Folds whose window closed are written; what was kept for cgroups
    /// since removed is dropped; the lost count is published.
    fn tick(&mut self, session: &mut Session) -> anyhow::Result<()> {
        for record in self.folder.due(false) {
            self.write(&record);
        }
        self.flush()?;
        session.pipeline.maintain();
        if let Some(metrics) = self.metrics {
            metrics.set_lost(session.tracer.lost_events());
            if let Some(otlp) = self.otlp {
                let counts = otlp.counts();
                metrics.set_otlp(
                    counts.sent.load(std::sync::atomic::Ordering::Relaxed),
                    counts.dropped.load(std::sync::atomic::Ordering::Relaxed),
                );
            }
        }
        Ok(())
    }

    /// Every fold still open is written.
    fn finish(&mut self) -> anyhow::Result<()> {
        for record in self.folder.due(true) {
            self.write(&record);
        }
        self.flush()
    }
}
