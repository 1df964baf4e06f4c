//! Pacing the reader of the ring buffer: when to drain after a wake-up.

use crate::kernel::tracer::DRAIN_BATCH;

/// When a reader woken by the ring buffer drains it. The kernel wakes the
/// reader (a self-interrupt on the producer's CPU, costly in a VM) only for
/// a record submitted while the reader was caught up. A reader that drains
/// a trickle at once is caught up again for the next record, so every
/// denied open paid for a wake-up; waiting 1 ms first lets the trickle pile
/// up behind one wake-up. Under a flood the reader is behind and rarely
/// woken, and a wait would only give its CPU away to the producers (the
/// zero-loss rate halved when it always waited).
#[derive(Debug, Default)]
pub struct WakeupPacing {
    last_drain: usize,
}

impl WakeupPacing {
    const WAIT: std::time::Duration = std::time::Duration::from_millis(1);
    /// A drain this small means the reader had caught up: a trickle.
    const TRICKLE: usize = 64;

    /// Call when woken, before draining.
    pub async fn before_drain(&self) {
        if self.last_drain < Self::TRICKLE {
            tokio::time::sleep(Self::WAIT).await;
        }
    }

    /// Call with how many events the drain handed over.
    pub fn drained(&mut self, count: usize) {
        self.last_drain = count;
    }

    /// The last drain stopped at its limit: more may wait, and readiness
    /// (edge-triggered) will not say so; drain again without waiting for it.
    pub fn backlog(&self) -> bool {
        self.last_drain == DRAIN_BATCH
    }
}
