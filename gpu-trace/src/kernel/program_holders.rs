//! Which process holds a BPF program, or a link to it, open: the writer of
//! a device policy when the writer keeps it (systemd does, LXC's monitor
//! does, runc does not). Read from /proc/PID/fdinfo, whose `prog_id` line
//! `bpftool prog show` reads too.

use std::{fs, path::Path};

use crate::{host::proc_pid::is_host_root_process, model::policy_writer::ProcessRef};

/// The first process (lowest pid: systemd before its children) holding
/// program `prog_id` or a link to it, among root's processes with the
/// host's root: a tenant's process (a container's own systemd, say) is no
/// evidence, and only BPF descriptors' fdinfo is read.
pub fn holder_of(prog_id: u32) -> Option<ProcessRef> {
    let wanted = fdinfo_line(prog_id);
    let mut pids: Vec<u32> = fs::read_dir("/proc")
        .ok()?
        .flatten()
        .filter_map(|p| p.file_name().to_str()?.parse().ok())
        .collect();
    pids.sort_unstable();
    pids.into_iter()
        .filter(|&pid| is_host_root_process(pid))
        .find(|pid| holds(&Path::new("/proc").join(pid.to_string()), &wanted))
        .map(|pid| ProcessRef {
            pid,
            comm: crate::host::proc_pid::comm_of(pid),
        })
}

/// The fdinfo line of a program descriptor, or of a link's, for `prog_id`.
pub(crate) fn fdinfo_line(prog_id: u32) -> String {
    format!("prog_id:\t{prog_id}")
}

/// Whether any of the process's BPF program or link descriptors has the
/// `wanted` fdinfo line. Other descriptors are not read: a process can
/// hold a million, with big fdinfo files.
pub(crate) fn holds(process: &Path, wanted: &str) -> bool {
    let Ok(fds) = fs::read_dir(process.join("fd")) else {
        return false;
    };
    fds.flatten()
        .filter(|fd| {
            fs::read_link(fd.path()).is_ok_and(|target| {
                let target = target.as_os_str().as_encoded_bytes();
                target == b"anon_inode:bpf-prog" || target == b"anon_inode:bpf_link"
            })
        })
        .any(|fd| {
            fs::read_to_string(process.join("fdinfo").join(fd.file_name()))
                .is_ok_and(|info| info.lines().any(|l| l == wanted))
        })
}
