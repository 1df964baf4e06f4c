//! Typed events -> records a person can read: wall time, cgroup path,
//! driver and node names.

use std::{
    path::PathBuf,
    time::{Duration, Instant, SystemTime},
};

use crate::{
    cgroup::CgroupPaths,
    devices::{node_name, CharMajors},
    event::{BootClock, DeviceAccess},
};

#[derive(Debug, Clone)]
pub struct Record {
    pub access: DeviceAccess,
    pub time: SystemTime,
    /// Relative to the cgroup2 mount; None when the cgroup is gone and was never seen.
    pub cgroup: Option<PathBuf>,
    /// Driver that owns the major per /proc/devices; None when no driver does.
    pub driver: Option<String>,
    /// Node name: "nvidia-uvm", "nvidiactl", "nvidia0", ...
    pub device: Option<String>,
}

pub struct Enricher {
    cgroups: CgroupPaths,
    majors: CharMajors,
    majors_read_at: Instant,
    clock: BootClock,
}

/// How stale the /proc/devices snapshot may be when an unknown major shows up.
const MAJORS_REFRESH: Duration = Duration::from_millis(500);

impl Enricher {
    pub fn new(cgroups: CgroupPaths, majors: CharMajors) -> Self {
        Self {
            cgroups,
            majors,
            majors_read_at: Instant::now(),
            clock: BootClock::now(),
        }
    }

    pub fn majors(&self) -> &CharMajors {
        &self.majors
    }

    /// Re-reads /proc/devices; returns true when it changed.
    pub fn refresh_majors(&mut self) -> bool {
        self.majors_read_at = Instant::now();
        match CharMajors::read() {
            Ok(now) if now != self.majors => {
                self.majors = now;
                true
            }
            _ => false,
        }
    }

    pub fn enrich(&mut self, access: DeviceAccess) -> Record {
        if !access.block_device
            && !self.majors.is_registered(access.major)
            && self.majors_read_at.elapsed() > MAJORS_REFRESH
        {
            self.refresh_majors();
        }
        let driver = (!access.block_device)
            .then(|| self.majors.driver(access.major).map(str::to_string))
            .flatten();
        let device = if access.block_device {
            None
        } else {
            node_name(driver.as_deref(), access.major, access.minor)
        };
        Record {
            time: self.clock.wall_time(access.boot_ns),
            cgroup: self.cgroups.resolve(access.cgroup_id).map(PathBuf::from),
            driver,
            device,
            access,
        }
    }
}
