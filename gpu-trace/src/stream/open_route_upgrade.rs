//! `watch --opens auto` on a host whose cgroup v1 devices hierarchy nobody
//! was in at start: the moment a cgroup there is made or joined, its rules
//! may deny what only the open's result shows, so the syscall tracepoints
//! are attached then, and the user is told.

use tokio::io::{unix::AsyncFd, Interest};

use crate::{
    host::v1_device_limits::{V1Changes, V1DeviceLimits},
    kernel::tracer::Tracer,
};

pub struct OpenRouteUpgrade(Option<AsyncFd<V1Changes>>);

const BECAUSE: &str = "a cgroup in the cgroup v1 devices hierarchy was made or joined, \
and its denials show only in the open's result";

impl OpenRouteUpgrade {
    /// Watches the hierarchy the tracer left the tracepoints out for, if
    /// any. Where it cannot be watched, the tracepoints go in at once.
    pub fn register(tracer: &mut Tracer) -> anyhow::Result<Self> {
        let Some(mount) = tracer.open_route_upgrade_watch().map(|m| m.to_path_buf()) else {
            return Ok(Self(None));
        };
        let registered = V1Changes::watch(&mount).and_then(|changes| {
            // SAFETY: the AsyncFd owns the inotify fd, which stays open and
            // the same until it drops.
            unsafe { AsyncFd::register_with_interest(changes, Interest::READABLE) }
                .map_err(|e| anyhow::anyhow!("registering the watch: {}", e.into_parts().1))
        });
        match registered {
            // Watched from now on; what changed since the tracer's own look
            // (made at start-up, before the watch) is looked at again.
            Ok(changes) if !V1DeviceLimits::read().may_deny() => Ok(Self(Some(changes))),
            Ok(_) => upgrade(tracer, BECAUSE),
            Err(e) => upgrade(
                tracer,
                &format!(
                    "the cgroup v1 devices hierarchy cannot be watched ({e:#}), so a cgroup made there could go unseen"
                ),
            ),
        }
    }

    /// Resolves when the hierarchy may have changed; never without a watch.
    /// Cancel-safe: the readiness is cleared in the poll that sees it.
    pub async fn due(&self) -> std::io::Result<()> {
        match &self.0 {
            Some(changes) => {
                changes.readable().await?.clear_ready();
                Ok(())
            }
            None => std::future::pending().await,
        }
    }

    /// After `due`: attaches the tracepoints if something did change.
    pub fn apply(&mut self, tracer: &mut Tracer) -> anyhow::Result<()> {
        let changed = self.0.as_ref().is_some_and(|c| c.get_ref().changed());
        if changed {
            *self = upgrade(tracer, BECAUSE)?;
        }
        Ok(())
    }
}

/// Attaches the tracepoints now and says so; nothing is left to watch.
fn upgrade(tracer: &mut Tracer, because: &str) -> anyhow::Result<OpenRouteUpgrade> {
    tracer.trace_open_calls_now(because)?;
    eprintln!("gpu-trace: {}", tracer.open_route_summary());
    Ok(OpenRouteUpgrade(None))
}
