//! tracefs, where the kernel lists the tracepoint ids that attaching needs.

use std::path::Path;

use anyhow::Context;
use nix::mount::{mount, MsFlags};

const TRACEFS: &str = "/sys/kernel/tracing";
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

fn has_events(dir: &str) -> bool {
    Path::new(dir).join("events").is_dir()
}

/// Mounts tracefs at /sys/kernel/tracing when neither usual place has it, as
/// most distributions do at boot. It stays mounted: another tracer may rely
/// on it by the time this one exits. Returns a note when it mounted it.
pub fn ensure_mounted() -> anyhow::Result<Option<String>> {
    if has_events(TRACEFS) || has_events(DEBUGFS_TRACING) {
        return Ok(None);
    }
    mount(
        Some("tracefs"),
        TRACEFS,
        Some("tracefs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .with_context(|| format!("mounting tracefs at {TRACEFS} (needed to attach tracepoints)"))?;
    Ok(Some(format!("tracefs mounted at {TRACEFS}")))
}
