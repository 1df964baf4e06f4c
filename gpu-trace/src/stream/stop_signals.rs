//! The signals that would end gpu-trace before it detaches: `watch` and
//! `run` both take them before they start, and each decides what they mean.

use std::io;

use tokio::signal::unix::{signal, Signal, SignalKind};

/// SIGINT, SIGTERM and SIGHUP, no longer able to end the process: taken in
/// one place so that `watch` and `run` listen for the same set.
pub struct StopSignals {
    pub interrupt: Signal,
    pub terminate: Signal,
    pub hangup: Signal,
}

impl StopSignals {
    pub fn take() -> io::Result<Self> {
        Ok(Self {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
            hangup: signal(SignalKind::hangup())?,
        })
    }
}
