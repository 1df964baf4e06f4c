//! The one event loop of `watch` and `run`: the ring buffer drained as it
//! fills, a tick for what comes and goes (repeats counted in the kernel,
//! drivers loaded later), the open route's upgrade, and the caller's own
//! events (signals, the command's exit) until they say stop. What is left
//! in the ring buffer then is part of the run.

use std::future::Future;

use tokio::time::{interval, MissedTickBehavior};

use crate::{
    kernel::tracer::{DRAIN_BATCH, RING_CAPACITY_EVENTS},
    stream::{
        driver_majors::{DriverMajorsOnTick, READ_EVERY},
        open_route_upgrade::OpenRouteUpgrade,
        ring_events::RingEvents,
        session::{Output, Session},
    },
};

/// What the caller's events ask of the loop.
pub enum Step<T> {
    /// Handled; go on.
    Continue,
    /// End the loop with this outcome.
    Stop(T),
}

/// The caller's own events, waited for beside the ring buffer.
pub trait Controls<O> {
    type Outcome;
    /// The next one, handled. Cancel-safe: the loop drops it whenever
    /// something else is ready first, and asks again.
    fn next(&mut self, output: &mut O)
        -> impl Future<Output = anyhow::Result<Step<Self::Outcome>>>;
}

/// Drivers registered after start: whether they are followed, and what a
/// failed re-read of /proc/devices does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FollowDrivers {
    /// Every device is watched already.
    No,
    /// A failed re-read ends the loop.
    EndOnError,
    /// A failed re-read is said once; the majors stay as they are.
    WarnOnError,
}

/// `ready` is called once everything the loop waits on is registered: a
/// change it is told of from then on is seen (a v1 devices cgroup made
/// right after watch's "ready" line, say).
pub async fn event_loop<O: Output, C: Controls<O>>(
    session: &mut Session,
    output: &mut O,
    controls: &mut C,
    drivers: FollowDrivers,
    ready: impl FnOnce(&Session),
) -> anyhow::Result<C::Outcome> {
    // The kernel programs' last records are read whichever way the loop
    // ends: an error is when what they dropped matters most.
    let ended = async {
        let mut ring = RingEvents::register(&session.tracer)?;
        let mut upgrade = OpenRouteUpgrade::register(&mut session.tracer)?;
        ready(session);
        let mut ticks = interval(READ_EVERY);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Skip);
        let mut driver_majors = DriverMajorsOnTick::default();
        let mut follow_drivers = drivers != FollowDrivers::No;
        let outcome = loop {
            // Biased: under a flood the drain branch is always ready, so the
            // rare ones (signals, the once-a-second tick) must come first or they
            // would starve (a SIGHUP went unanswered that way).
            tokio::select! {
                biased;
                step = controls.next(output) => match step? {
                    Step::Continue => {}
                    Step::Stop(outcome) => break outcome,
                },
                due = upgrade.due() => {
                    due?;
                    upgrade.apply(&mut session.tracer)?;
                }
                _ = ticks.tick() => {
                    // The ring first: a repeat's first event (and its path) may
                    // still wait there.
                    session.drain(DRAIN_BATCH, output);
                    output.flush()?;
                    session.tracer.flush_bpf_log();
                    session.admit_repeats(output, false);
                    output.tick(session)?;
                    if follow_drivers {
                        if let Err(e) = driver_majors.tick(&mut session.tracer, &mut session.pipeline.enricher) {
                            if drivers == FollowDrivers::EndOnError {
                                return Err(e);
                            }
                            eprintln!("gpu-trace: {e:#}; drivers loaded from now on are not watched");
                            follow_drivers = false;
                        }
                    }
                }
                due = ring.drain_due() => {
                    due?;
                    ring.before_drain().await;
                    let handed = session.drain(DRAIN_BATCH, output);
                    output.flush()?;
                    // Also here, not only on the tick: under a flood the tick
                    // comes late, and aya-log's 128 KiB ring would fill and
                    // drop records uncounted. Bounded: the programs make at
                    // most 10 records of a kind a second.
                    session.tracer.read_bpf_log();
                    ring.drained(handed);
                }
            }
        };
        session.drain(RING_CAPACITY_EVENTS, output);
        session.admit_repeats(output, true);
        output.finish()?;
        Ok(outcome)
    }
    .await;
    session.tracer.finish_bpf_log();
    ended
}
