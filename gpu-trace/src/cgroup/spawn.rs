//! Spawning a child inside a cgroup from its first instruction.

use std::{
    fs::File,
    io,
    os::{fd::AsRawFd, unix::process::CommandExt},
    path::Path,
    process::Command,
};

use anyhow::Context;

/// Makes `command`'s child move itself into each cgroup directory in `dirs`
/// between fork and exec, so its first instruction already runs under their
/// device policies. The returned files must stay open until the spawn.
pub fn place_child_in(command: &mut Command, dirs: &[&Path]) -> anyhow::Result<Vec<File>> {
    let procs = dirs
        .iter()
        .map(|dir| {
            let path = dir.join("cgroup.procs");
            File::options()
                .write(true)
                .open(&path)
                .with_context(|| format!("opening {}", path.display()))
        })
        .collect::<anyhow::Result<Vec<File>>>()?;
    let fds: Vec<i32> = procs.iter().map(AsRawFd::as_raw_fd).collect();
    // SAFETY: only async-signal-safe calls (write) between fork and exec;
    // `fds` was allocated before the fork.
    unsafe {
        command.pre_exec(move || {
            for &fd in &fds {
                // "0" moves the writing process itself.
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    Ok(procs)
}
