//! Drivers loaded or unloaded while watch or run traces. nvidia-uvm and
//! kfd take a dynamic major when they load, and nvidia-uvm is often loaded
//! by the first CUDA call (nvidia-modprobe), that is during the very launch
//! `run` traces: /proc/devices is read again on every tick, new accelerator
//! majors are watched, and the kernel side learns which majors have a driver.
//! An open within the tick after the load comes before that; a traced open
//! of an accelerator node's path (`/dev/nvidia*`, ...) that fails is
//! reported whatever its major.

use crate::{
    analysis::enrich::Enricher, host::proc_devices::CharMajors, kernel::tracer::Tracer,
    text::terminal::escape,
};

/// How often /proc/devices is read again (watch's tick, run's).
pub const READ_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Called once a tick (about a second) by the event loops of watch and run.
#[derive(Default)]
pub struct DriverMajorsOnTick {
    /// The last read of the kernel's /proc/devices failed (and was said).
    failing: bool,
}

impl DriverMajorsOnTick {
    pub fn tick(&mut self, tracer: &mut Tracer, enricher: &mut Enricher) -> anyhow::Result<()> {
        let kernel = self.read_kernel();
        // One read serves diagnosis too, unless diagnosis reads a copy.
        match &kernel {
            Some(kernel) if !CharMajors::read_is_a_copy() => {
                enricher.adopt_majors(kernel.clone());
            }
            _ => {
                enricher.refresh_majors();
            }
        }
        // New accelerator majors first: the classes below skip watched
        // majors, so a just-loaded GPU driver is never marked another's.
        watch_new_majors(tracer, enricher)?;
        if let Some(kernel) = kernel {
            tracer.refresh_driver_majors(&kernel)?;
        }
        Ok(())
    }

    /// A read that fails (a transient error, the file overmounted in our
    /// mount namespace) must not end an audit logger: it is said once, the
    /// classes read before stay in force, and the read that works again
    /// says so.
    fn read_kernel(&mut self) -> Option<CharMajors> {
        match CharMajors::read_kernel() {
            Ok(majors) => {
                if std::mem::take(&mut self.failing) {
                    eprintln!(
                        "gpu-trace: /proc/devices is readable again; driver majors follow it again"
                    );
                }
                Some(majors)
            }
            Err(e) => {
                if !std::mem::replace(&mut self.failing, true) {
                    eprintln!("gpu-trace: cannot read /proc/devices ({e}); the driver majors read before stay in force, retried every second");
                }
                None
            }
        }
    }
}

/// Accelerator majors registered after start are watched from now on.
fn watch_new_majors(tracer: &mut Tracer, enricher: &Enricher) -> anyhow::Result<()> {
    // The enricher may have refreshed already (on an unknown major): compare
    // against the kernel-side filter, not against the last read.
    let watched = tracer.watched_majors();
    let new: Vec<u32> = enricher
        .majors()
        .accelerator_majors()
        .into_iter()
        .filter(|m| !watched.contains(m))
        .collect();
    if !new.is_empty() {
        tracer.watch_majors(&new)?;
        for major in new {
            let driver = enricher.majors().driver(major).unwrap_or("?");
            eprintln!(
                "gpu-trace: now also watching char major {major} ({}), registered after start",
                escape(driver)
            );
        }
    }
    Ok(())
}
