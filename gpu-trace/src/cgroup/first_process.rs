//! The first process still running in a cgroup's subtree, and when it
//! started: a device policy loaded well after that was written while the
//! container ran (a rewrite, as `systemctl daemon-reload` or `docker
//! update` make).

use std::{fs, path::Path};

use crate::host::proc_pid::start_boot_ns;

/// Processes looked at, at most: tenants can fill their subtree.
const MAX_PROCESSES: usize = 10_000;
/// Directories looked at, at most, by `check`: tenants can make as many
/// empty cgroups below their own as they like.
const MAX_DIRECTORIES: usize = 10_000;
/// Processes looked at in one cgroup from the event thread.
const MAX_PROCESSES_IN_ONE: usize = 1_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FirstProcess {
    pub pid: u32,
    /// Its start, on the kernel's boot-time clock (ns).
    pub start_boot_ns: u64,
}

/// The earliest-started process in `dir` and the cgroups below it (None
/// when they hold none), for `check`: at most `MAX_DIRECTORIES` cgroups and
/// `MAX_PROCESSES` processes. A process that exits while we read is skipped.
pub fn first_process(dir: &Path) -> Option<FirstProcess> {
    let mut first = Earliest::new(MAX_PROCESSES);
    let mut pending = vec![dir.to_path_buf()];
    let mut directories = 0;
    while let Some(cgroup) = pending.pop() {
        directories += 1;
        if directories > MAX_DIRECTORIES || !first.read_procs(&cgroup) {
            break;
        }
        if let Ok(children) = fs::read_dir(&cgroup) {
            // No more waiting than could still be looked at.
            let room = MAX_DIRECTORIES.saturating_sub(directories + pending.len());
            pending.extend(
                children
                    .filter_map(Result::ok)
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path())
                    .take(room),
            );
        }
    }
    first.found
}

/// The earliest-started process in `dir` itself, for the event thread: no
/// walk (a tenant's cgroup may sit above 100 000 empty ones), at most
/// `MAX_PROCESSES_IN_ONE` processes. The denied process is in `dir`, so it
/// holds one; missing older ones below only makes the cgroup look younger,
/// which never makes a rewrite up.
pub fn first_process_in(dir: &Path) -> Option<FirstProcess> {
    let mut first = Earliest::new(MAX_PROCESSES_IN_ONE);
    first.read_procs(dir);
    first.found
}

/// The earliest start among the processes read so far, up to a limit.
struct Earliest {
    found: Option<FirstProcess>,
    left: usize,
}

impl Earliest {
    fn new(limit: usize) -> Self {
        Self {
            found: None,
            left: limit,
        }
    }

    /// Reads one cgroup's processes; false once the limit is reached.
    fn read_procs(&mut self, cgroup: &Path) -> bool {
        let procs = fs::read_to_string(cgroup.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
            if self.left == 0 {
                return false;
            }
            self.left -= 1;
            let Ok(start) = start_boot_ns(pid) else {
                continue;
            };
            if self.found.is_none_or(|f| start < f.start_boot_ns) {
                self.found = Some(FirstProcess {
                    pid,
                    start_boot_ns: start,
                });
            }
        }
        self.left > 0
    }
}
