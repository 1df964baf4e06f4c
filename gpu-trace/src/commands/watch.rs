//! `gpu-trace watch`: the long-running stream of denied device accesses.

use std::io::{self, BufWriter, Write};

use anyhow::Context;
use tokio::{
    io::{unix::AsyncFd, Interest},
    signal::unix::{signal, SignalKind},
    time::{interval, Duration, MissedTickBehavior},
};

use crate::{
    cgroup::CgroupPaths,
    cli::{DeviceSelection, WatchArgs},
    devices::CharMajors,
    enrich::Enricher,
    output::write_record,
    pipeline::Pipeline,
    preflight::check_host,
    tracer::{Tracer, TracerConfig},
};

/// How often /proc/devices is re-read for NVIDIA majors registered later.
const MAJORS_POLL: Duration = Duration::from_secs(1);

/// Counts for the closing summary.
#[derive(Debug, Default, Clone, Copy)]
pub struct Tally {
    pub events: u64,
    pub denied: u64,
}

pub fn run(args: WatchArgs) -> anyhow::Result<()> {
    let host = check_host()?;
    let majors = CharMajors::read().context("reading /proc/devices")?;
    let config = tracer_config(&args.devices, &majors, args.all);
    let mut tracer = Tracer::start(&host.cgroup2_mount, &config)?;
    let mut pipeline = Pipeline::new(CgroupPaths::new(&host.cgroup2_mount), majors);

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the event loop")?;
    let tally = runtime.block_on(stream(&mut tracer, &mut pipeline, &args, &config))?;
    let lost = tracer.lost_events();
    drop(tracer); // detach before the summary, which says so
    eprintln!(
        "gpu-trace: detached; events {}, denied {}, lost {}",
        tally.events, tally.denied, lost
    );
    Ok(())
}

/// The kernel-side filter: NVIDIA's majors known now plus the user's.
pub fn tracer_config(
    devices: &DeviceSelection,
    majors: &CharMajors,
    report_allowed: bool,
) -> TracerConfig {
    let mut watched = majors.nvidia_majors();
    watched.extend(&devices.majors);
    watched.sort_unstable();
    watched.dedup();
    TracerConfig {
        majors: watched,
        all_devices: devices.all_devices,
        report_allowed,
        follow_process_tree: false,
    }
}

/// Says once which hooks are active (and which were refused, with what
/// stands in for them); the last line tells scripts the tracer is ready.
pub fn announce(tracer: &Tracer, config: &TracerConfig) {
    for note in tracer.notes() {
        eprintln!("gpu-trace: {note}");
    }
    for hook in tracer.hooks() {
        match &hook.refused {
            None => eprintln!("gpu-trace: hook active: {}", hook.name),
            Some(why) => eprintln!("gpu-trace: hook refused: {}: {why}", hook.name),
        }
    }
    let what = if config.all_devices {
        "every device".to_string()
    } else {
        let list: Vec<String> = config.majors.iter().map(u32::to_string).collect();
        format!("char majors {}", list.join(", "))
    };
    let which = if config.report_allowed {
        "all accesses"
    } else {
        "denied accesses"
    };
    eprintln!("gpu-trace: ready: watching {which} to {what}");
}

async fn stream(
    tracer: &mut Tracer,
    pipeline: &mut Pipeline,
    args: &WatchArgs,
    config: &TracerConfig,
) -> anyhow::Result<Tally> {
    // SAFETY: the ring buffer's fd stays open while `tracer` lives, which
    // outlasts `ready` (dropped at the end of this function).
    let ready = unsafe { AsyncFd::register_with_interest(tracer.events_fd(), Interest::READABLE) }
        .map_err(|e| anyhow::anyhow!("registering the event ring buffer: {e}"))?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut terminate = signal(SignalKind::terminate())?;
    // "ready" only once SIGINT/SIGTERM are ours: a script that stops us right
    // after it must get the clean detach and the summary.
    announce(tracer, config);
    let mut majors_poll = interval(MAJORS_POLL);
    majors_poll.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let mut out = BufWriter::new(io::stdout().lock());
    let mut tally = Tally::default();

    loop {
        tokio::select! {
            guard = ready.readable() => {
                let mut guard = guard?;
                guard.clear_ready();
                write_events(tracer, pipeline, args, &mut out, &mut tally)?;
            }
            _ = majors_poll.tick() => {
                if !args.devices.all_devices {
                    watch_new_majors(tracer, &mut pipeline.enricher)?;
                }
            }
            _ = interrupt.recv() => break,
            _ = terminate.recv() => break,
        }
    }
    // Events already in the ring buffer are part of the run.
    write_events(tracer, pipeline, args, &mut out, &mut tally)?;
    Ok(tally)
}

fn write_events(
    tracer: &mut Tracer,
    pipeline: &mut Pipeline,
    args: &WatchArgs,
    out: &mut impl Write,
    tally: &mut Tally,
) -> anyhow::Result<()> {
    let mut result = Ok(());
    tracer.drain(|access| {
        tally.events += 1;
        tally.denied += u64::from(access.verdict.is_denied());
        let record = pipeline.process(access);
        if result.is_ok() {
            result = write_record(out, args.format, &record);
        }
    });
    result
        .and_then(|()| out.flush())
        .or_else(ignore_closed_pipe)?;
    Ok(())
}

/// `gpu-trace watch | head` should end quietly, not with an error.
fn ignore_closed_pipe(error: io::Error) -> io::Result<()> {
    if error.kind() == io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    Err(error)
}

/// Drivers loaded after start (nvidia-uvm registers its major at load time)
/// are watched without a restart.
fn watch_new_majors(tracer: &mut Tracer, enricher: &mut Enricher) -> anyhow::Result<()> {
    // The enricher may have refreshed already (on an unknown major): compare
    // against the kernel-side filter, not against the last read.
    enricher.refresh_majors();
    let watched = tracer.watched_majors();
    let new: Vec<u32> = enricher
        .majors()
        .nvidia_majors()
        .into_iter()
        .filter(|m| !watched.contains(m))
        .collect();
    if !new.is_empty() {
        tracer.watch_majors(&new)?;
        for major in new {
            let driver = enricher.majors().driver(major).unwrap_or("?");
            eprintln!("gpu-trace: now also watching char major {major} ({driver}), registered after start");
        }
    }
    Ok(())
}
