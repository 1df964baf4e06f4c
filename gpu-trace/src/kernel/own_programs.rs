//! Which device programs are gpu-trace's own observers: they allow every
//! access by construction and are left out of every policy we evaluate.
//!
//! Told by evidence, not by name alone: a program name is cut to 15
//! characters (the errno observer shows as `observe_device_`) and any root
//! program could take the same name to hide. An observer is ours when a
//! process running this very gpu-trace binary holds it or its link open
//! (its fdinfo names the `prog_id`, as `bpftool prog show` reads it).

use std::{fs, os::unix::fs::MetadataExt, path::Path};

use crate::kernel::program_holders::{fdinfo_line, holds};

/// Device number and inode of a file: what "the same binary" means.
fn identity(path: &Path) -> Option<(u64, u64)> {
    fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Whether a process running this binary (this one or another instance,
/// e.g. a `watch` while `check` runs) holds program `prog_id`.
pub fn held_by_gpu_trace(prog_id: u32) -> bool {
    let Some(this_binary) = identity(Path::new("/proc/self/exe")) else {
        return false;
    };
    let Ok(processes) = fs::read_dir("/proc") else {
        return false;
    };
    let wanted = fdinfo_line(prog_id);
    processes
        .flatten()
        .filter(|p| {
            p.file_name()
                .to_str()
                .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        })
        .filter(|p| identity(&p.path().join("exe")) == Some(this_binary))
        .any(|p| holds(&p.path(), &wanted))
}
