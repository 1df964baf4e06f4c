//! The kernel's boot-time clock, turned into wall-clock time.

use std::time::{Duration, SystemTime};

/// Turns the kernel's boot-time clock into wall-clock time.
#[derive(Debug, Clone, Copy)]
pub struct BootClock {
    boot_epoch: SystemTime,
}

/// The kernel's boot-time clock now (`bpf_ktime_get_boot_ns()`'s clock).
pub fn since_boot() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid pointer to a timespec; CLOCK_BOOTTIME always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl BootClock {
    pub fn now() -> Self {
        Self {
            boot_epoch: SystemTime::now() - since_boot(),
        }
    }

    pub fn wall_time(&self, boot_ns: u64) -> SystemTime {
        self.boot_epoch + Duration::from_nanos(boot_ns)
    }
}
