//! Waiting for the ring buffer, as the event loops of watch and run do:
//! readiness of its fd, paced (see pacing.rs), or at once after a drain
//! that stopped at its limit (readiness is edge-triggered and would not
//! say that more waits).

use std::os::fd::OwnedFd;

use tokio::io::{unix::AsyncFd, Interest};

use crate::{kernel::tracer::Tracer, stream::pacing::WakeupPacing};

pub struct RingEvents {
    ready: AsyncFd<OwnedFd>,
    pacing: WakeupPacing,
}

impl RingEvents {
    /// Registers (a duplicate of) the tracer's ring buffer fd with the
    /// running tokio reactor.
    pub fn register(tracer: &Tracer) -> anyhow::Result<Self> {
        let fd = tracer
            .events_fd_owned()
            .map_err(|e| anyhow::anyhow!("duplicating the event ring buffer's fd: {e}"))?;
        // SAFETY: the AsyncFd owns `fd`, which stays open and the same until it drops.
        let ready = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) }
            .map_err(|e| anyhow::anyhow!("registering the event ring buffer: {e}"))?;
        Ok(Self {
            ready,
            pacing: WakeupPacing::default(),
        })
    }

    /// Resolves when events may wait. Cancel-safe, fit for `select!`: the
    /// readiness is cleared in the same poll that sees it.
    pub async fn drain_due(&mut self) -> std::io::Result<()> {
        if self.pacing.backlog() {
            tokio::task::yield_now().await;
            return Ok(());
        }
        self.ready.readable().await?.clear_ready();
        Ok(())
    }

    /// Call in the branch `drain_due` chose, before draining: after a
    /// wake-up for a trickle, lets it pile up first (see pacing.rs).
    pub async fn before_drain(&self) {
        self.pacing.before_drain().await;
    }

    /// Call with how many events the drain handed over.
    pub fn drained(&mut self, count: usize) {
        self.pacing.drained(count);
    }
}

/// The single-threaded runtime the event loops of watch and run run on.
pub fn event_loop_runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    use anyhow::Context;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // Look at signals and readiness after every task poll: under a flood
        // each poll is a whole batch of events, and the default (every 61st)
        // left a SIGHUP waiting for seconds.
        .event_interval(1)
        .build()
        .context("starting the event loop")
}
