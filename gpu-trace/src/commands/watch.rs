//! `gpu-trace watch`: the long-running stream of denied device accesses.

use std::io;

use anyhow::Context;
use tokio::{
    signal::unix::{signal, SignalKind},
    time::{interval, Duration, MissedTickBehavior},
};

use crate::{
    analysis::pipeline::Pipeline,
    cgroup::resolver::CgroupResolver,
    cli::{tracer_config, WatchArgs},
    host::{preflight::check_tracing_host, proc_devices::CharMajors},
    kernel::{
        open_route::OpensChoice,
        tracer::{Tracer, TracerConfig, DRAIN_BATCH, RING_CAPACITY_EVENTS},
    },
    model::access::DeviceAccess,
    render::{
        announce::announce,
        output::{write_record, Format},
    },
    stream::{
        driver_majors::{DriverMajorsOnTick, READ_EVERY},
        filter::Filter,
        fold::Folder,
        metrics::Metrics,
        open_route_upgrade::OpenRouteUpgrade,
        ring_events::{event_loop_runtime, RingEvents},
        sink::Sink,
    },
    text::style,
};

/// How often /proc/devices is re-read for NVIDIA majors registered later,
/// and folded records whose window closed are written.
const TICK: Duration = READ_EVERY;

/// Counts for the closing summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub events: u64,
    pub denied: u64,
    /// Of `events`, the repeats the kernel counted rather than sent.
    pub folded_in_kernel: u64,
}

pub fn run(args: WatchArgs) -> anyhow::Result<()> {
    let host = check_tracing_host()?;
    let majors = CharMajors::read().context("reading /proc/devices")?;
    let mut devices = args.devices.clone();
    devices
        .majors
        .extend(args.device.as_ref().and_then(|d| d.major()));
    let config = TracerConfig {
        // Repeats within the fold window are counted in the kernel.
        fold_window: args.fold,
        ..tracer_config(&devices, &majors, args.all, args.tracer, OpensChoice::Auto)
    };
    let mut sink = match &args.output {
        Some(path) => Sink::file(path.clone())?,
        None => Sink::stdout(),
    };
    let mut tracer = Tracer::start(&host.cgroup2_mount, &config)?;
    let cgroups =
        CgroupResolver::new(&host.cgroup2_mount).with_cgroups_made(tracer.take_cgroup_paths());
    let mut pipeline = Pipeline::new(cgroups, majors);

    let runtime = event_loop_runtime()?;
    let metrics = args
        .metrics
        .map(|_| Metrics::new(tracer.hooks(), args.metrics_series as usize));
    let mut flow = Flow {
        pipeline: &mut pipeline,
        filter: args.filter(),
        folder: Folder::new(args.fold, args.budget()),
        sink: &mut sink,
        format: args.format(),
        // Colour only on stdout, and only where it is a terminal that shows it.
        paint: args.output.is_none() && style::paints(&std::io::stdout()),
        metrics: metrics.as_ref(),
        tally: Tally::default(),
    };
    runtime.block_on(stream(&mut tracer, &mut flow, &args, &config))?;
    let tally = flow.tally;
    sink.finish(); // every line written before the counts are read
    let lost = tracer.lost_events();
    drop(tracer); // detach before the summary, which says so
                  // Output trouble, said only when there was some.
    let mut trouble = String::new();
    if sink.unwritten() > 0 {
        trouble.push_str(&format!(", not written {}", sink.unwritten()));
    }
    if tally.folded_in_kernel > 0 {
        trouble.push_str(&format!(
            ", folded in the kernel {}",
            tally.folded_in_kernel
        ));
    }
    if sink.failed_reopens() > 0 {
        trouble.push_str(&format!(", failed reopens {}", sink.failed_reopens()));
    }
    eprintln!(
        "gpu-trace: detached; events {}, denied {}, lost {lost}{trouble}",
        tally.events, tally.denied
    );
    Ok(())
}

/// Everything between the ring buffer and the output.
struct Flow<'a> {
    pipeline: &'a mut Pipeline,
    filter: Filter,
    folder: Folder,
    sink: &'a mut Sink,
    format: Format,
    paint: bool,
    metrics: Option<&'a Metrics>,
    tally: Tally,
}

impl Flow<'_> {
    /// Drains up to `limit` events through the pipeline, filter and folder
    /// into the sink; returns how many (`limit`: more may wait).
    fn drain(&mut self, tracer: &mut Tracer, limit: usize) -> anyhow::Result<usize> {
        let handed = tracer.drain(limit, |access| self.pass(access, None));
        self.flush()?;
        Ok(handed)
    }

    /// Takes the repeats the kernel counted: each is one record with its
    /// count, merged into the fold its first occurrence opened.
    fn admit_repeats(&mut self, tracer: &mut Tracer) {
        for (access, count) in tracer.collect_repeats() {
            self.pass(access, Some(count));
        }
    }

    /// One access sent by the kernel, or the repeats it counted, through
    /// the pipeline, metrics, filter and folder into the sink.
    fn pass(&mut self, access: DeviceAccess, kernel_repeats: Option<u64>) {
        let count = kernel_repeats.unwrap_or(1);
        self.tally.events += count;
        self.tally.folded_in_kernel += kernel_repeats.unwrap_or(0);
        if access.verdict.is_denied() {
            self.tally.denied += count;
        }
        let mut record = self.pipeline.process(access);
        record.count = count;
        if let Some(metrics) = self.metrics {
            metrics.observe(&record);
        }
        if !self.filter.accepts(&record) {
            return;
        }
        let admitted = match kernel_repeats {
            None => self.folder.admit(record),
            Some(_) => self.folder.admit_repeats(record),
        };
        if let Some(record) = admitted {
            let _ = write_record(self.sink.line_buffer(), self.format, self.paint, &record);
            if self.sink.batch_is_full() {
                // A failure here (the output thread gone) comes back at the
                // drain's own flush, which ends watch.
                let _ = self.flush();
            }
        }
    }

    /// Writes the folded records whose window closed (all of them at the end).
    fn write_folded(&mut self, everything: bool) -> anyhow::Result<()> {
        for record in self.folder.due(everything) {
            let _ = write_record(self.sink.line_buffer(), self.format, self.paint, &record);
        }
        self.flush()
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        match self.sink.flush() {
            // `gpu-trace watch | head` ends quietly.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => std::process::exit(0),
            other => Ok(other?),
        }
    }
}

async fn stream(
    tracer: &mut Tracer,
    flow: &mut Flow<'_>,
    args: &WatchArgs,
    config: &TracerConfig,
) -> anyhow::Result<()> {
    let mut ring = RingEvents::register(tracer)?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    let mut hangup = signal(SignalKind::hangup())?;
    if let (Some(metrics), Some(addr)) = (flow.metrics, args.metrics) {
        metrics.serve(addr)?;
    }
    // "ready" only once the signals are ours: a script that stops us right
    // after it must get the clean detach and the summary.
    announce(tracer, config);
    let mut upgrade = OpenRouteUpgrade::register(tracer)?;
    let mut ticks = interval(TICK);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut driver_majors = DriverMajorsOnTick::default();

    loop {
        // Biased: under a flood the drain branches are always ready, so the
        // rare ones (signals, the once-a-second tick) must come first or they
        // would starve (a SIGHUP went unanswered that way).
        tokio::select! {
            biased;
            _ = interrupt.recv() => break,
            _ = terminate.recv() => break,
            _ = hangup.recv() => {
                // logrotate moved the file: carry on in a new one.
                flow.flush()?;
                if let Err(e) = flow.sink.reopen() {
                    eprintln!("gpu-trace: reopening the output after SIGHUP: {e:#}; still writing to the old file");
                }
            }
            due = upgrade.due() => {
                due?;
                upgrade.apply(tracer)?;
            }
            _ = ticks.tick() => {
                // The ring first: a repeat's first event (and its path) may
                // still wait there.
                flow.drain(tracer, DRAIN_BATCH)?;
                flow.admit_repeats(tracer);
                flow.write_folded(false)?;
                flow.pipeline.maintain();
                if let Some(metrics) = flow.metrics {
                    metrics.set_lost(tracer.lost_events());
                }
                if !args.devices.all_devices {
                    driver_majors.tick(tracer, &mut flow.pipeline.enricher)?;
                }
            }
            due = ring.drain_due() => {
                due?;
                ring.before_drain().await;
                ring.drained(flow.drain(tracer, DRAIN_BATCH)?);
            }
        }
    }
    // Events already in the ring buffer, and folds still open, are part of the run.
    flow.drain(tracer, RING_CAPACITY_EVENTS)?;
    flow.admit_repeats(tracer);
    flow.write_folded(true)
}
