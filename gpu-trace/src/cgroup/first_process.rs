//! The first process still running in a cgroup's subtree, and when it
//! started: a device policy loaded well after that was written while the
//! container ran (a rewrite, as `systemctl daemon-reload` or `docker
//! update` make).

use std::{fs, path::Path};

use crate::host::proc_pid::start_boot_ns;

/// Processes looked at, at most: tenants can fill their subtree.
const MAX_PROCESSES: usize = 10_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FirstProcess {
    pub pid: u32,
    /// Its start, on the kernel's boot-time clock (ns).
    pub start_boot_ns: u64,
}

/// The earliest-started process in `dir` and the cgroups below it (None
/// when they hold none). A process that exits while we read is skipped.
pub fn first_process(dir: &Path) -> Option<FirstProcess> {
    let mut first: Option<FirstProcess> = None;
    let mut seen = 0;
    let mut pending = vec![dir.to_path_buf()];
    while let Some(cgroup) = pending.pop() {
        if seen >= MAX_PROCESSES {
            break;
        }
        let procs = fs::read_to_string(cgroup.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
            seen += 1;
            if seen > MAX_PROCESSES {
                break;
            }
            let Ok(start) = start_boot_ns(pid) else {
                continue;
            };
            if first.is_none_or(|f| start < f.start_boot_ns) {
                first = Some(FirstProcess {
                    pid,
                    start_boot_ns: start,
                });
            }
        }
        if let Ok(children) = fs::read_dir(&cgroup) {
            pending.extend(
                children
                    .filter_map(Result::ok)
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    first
}
