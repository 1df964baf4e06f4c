//! `gpu-trace watch`: the long-running stream of denied device accesses.

use crate::{
    cgroup::resolver::CgroupResolver,
    cli::{tracer_config, WatchArgs},
    host::{preflight::check_tracing_host, proc_devices::CharMajors},
    kernel::{open_route::OpensChoice, tracer::TracerConfig},
    render::announce::announce,
    stream::{
        event_loop::{event_loop, Controls, FollowDrivers, Step},
        fold::Folder,
        log_output::{LogOutput, Tally},
        metrics::Metrics,
        otlp::{OtlpExporter, OtlpTarget},
        ring_events::event_loop_runtime,
        session::Session,
        sink::Sink,
        stop_signals::StopSignals,
    },
    text::style,
};
use anyhow::Context;

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
    // --otlp's files (headers, CA certificates) are read before any kernel
    // work: bad input fails fast.
    let otlp_target = match &args.otlp {
        Some(endpoint) => Some(OtlpTarget::new(
            endpoint,
            args.otlp_headers.as_deref(),
            args.otlp_ca.as_deref(),
        )?),
        None => None,
    };
    let mut session = Session::start(
        &host.cgroup2_mount,
        &config,
        CgroupResolver::new(&host.cgroup2_mount),
        majors,
    )?;
    if let Some(socket) = args.pod_resources.socket() {
        session.pipeline.read_pod_resources(socket);
    }

    let otlp = otlp_target.map(OtlpExporter::start).transpose()?;

    let runtime = event_loop_runtime()?;
    let metrics = args
        .metrics
        .map(|_| Metrics::new(session.tracer.hooks(), args.metrics_series as usize));
    let mut output = LogOutput {
        filter: args.filter(),
        folder: Folder::new(args.fold, args.budget()),
        sink: &mut sink,
        format: args.format(),
        // Colour only on stdout, and only where it is a terminal that shows it.
        paint: args.output.is_none() && style::paints(&std::io::stdout()),
        metrics: metrics.as_ref(),
        otlp: otlp.as_ref(),
        tally: Tally::default(),
    };
    let drivers = if args.devices.all_devices {
        FollowDrivers::No
    } else {
        FollowDrivers::EndOnError
    };
    let looped = runtime.block_on(async {
        let mut signals = StopSignals::take()?;
        if let (Some(metrics), Some(addr)) = (output.metrics, args.metrics) {
            metrics.serve(addr)?;
        }
        // "ready" only once the signals are ours (a script that stops us
        // right after it must get the clean detach and the summary), and
        // the loop watches what it waits on.
        let ready = |session: &Session| announce(&session.tracer, &config);
        event_loop(&mut session, &mut output, &mut signals, drivers, ready).await
    });
    if let Err(error) = looped {
        // Even so, every record handed to the exporter is sent or counted.
        if let Some(exporter) = otlp {
            let (sent, dropped) = exporter.finish();
            eprintln!("gpu-trace: otlp sent {sent}, otlp dropped {dropped}");
        }
        return Err(error);
    }
    let tally = output.tally;
    sink.finish(); // every line written before the counts are read
    let lost = session.tracer.lost_events();
    let folded = (
        session.tracer.folded_by_thread(),
        session.tracer.folded_in_slot(),
    );
    drop(session); // detach before the summary, which says so
    let otlp = otlp.map(|exporter| {
        let (sent, dropped) = exporter.finish();
        format!(", otlp sent {sent}, otlp dropped {dropped}")
    });
    eprintln!(
        "gpu-trace: detached; events {}, denied {}, lost {lost}{}{}",
        tally.events,
        tally.denied,
        trouble(&sink, &tally, folded),
        otlp.unwrap_or_default()
    );
    Ok(())
}

/// Output trouble for the summary, said only when there was some; and
/// how many repeats the kernel folded, `by_thread` of them under their
/// thread's remembered key, `in_slot` of those in their CPU's own count.
fn trouble(sink: &Sink, tally: &Tally, (by_thread, in_slot): (u64, u64)) -> String {
    let mut trouble = String::new();
    if sink.unwritten() > 0 {
        trouble.push_str(&format!(", not written {}", sink.unwritten()));
    }
    if tally.folded_in_kernel > 0 {
        trouble.push_str(&format!(
            ", folded in the kernel {} ({by_thread} by thread, {in_slot} in its CPU's own count)",
            tally.folded_in_kernel
        ));
    }
    if sink.failed_reopens() > 0 {
        trouble.push_str(&format!(", failed reopens {}", sink.failed_reopens()));
    }
    trouble
}

/// SIGINT and SIGTERM end watch; SIGHUP reopens its output file.
impl Controls<LogOutput<'_>> for StopSignals {
    type Outcome = ();

    async fn next(&mut self, output: &mut LogOutput<'_>) -> anyhow::Result<Step<()>> {
        tokio::select! {
            biased;
            _ = self.interrupt.recv() => Ok(Step::Stop(())),
            _ = self.terminate.recv() => Ok(Step::Stop(())),
            _ = self.hangup.recv() => {
                output.reopen()?;
                Ok(Step::Continue)
            }
        }
    }
}
