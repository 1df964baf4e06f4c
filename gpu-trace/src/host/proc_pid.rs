//! What /proc/PID tells about a process: its v1 devices cgroup and that
//! cgroup's devices.list, and when it started.

use std::{fs, path::PathBuf};

use gpu_trace_policy::DevicesList;

use crate::host::mountinfo::v1_controller_mount_in;

/// The devices.list of process `pid`'s v1 devices cgroup; None when the
/// v1 devices controller is not mounted (pure cgroup2 hosts).
pub fn devices_list_of(pid: u32) -> std::io::Result<Option<DevicesList>> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")?;
    let Some(mount) = v1_controller_mount_in(&mountinfo, "devices") else {
        return Ok(None);
    };
    let membership = fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
    let Some(cgroup) = devices_cgroup_in(&membership) else {
        return Ok(None);
    };
    let dir = mount.join(cgroup.trim_start_matches('/'));
    let text = fs::read_to_string(PathBuf::from(&dir).join("devices.list"))?;
    Ok(Some(DevicesList {
        cgroup: cgroup.to_string(),
        lines: text.lines().map(str::to_string).collect(),
    }))
}

/// The group ids of process `pid` (its gid and supplementary groups), as
/// the host numbers them; None when it is gone.
pub fn groups_of(pid: u32) -> Option<Vec<u32>> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    groups_in(&status)
}

fn groups_in(status: &str) -> Option<Vec<u32>> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    // "Gid:\treal effective saved fs"
    let effective = field("Gid:")?.split_whitespace().nth(1)?.parse().ok()?;
    let mut groups = vec![effective];
    groups.extend(
        field("Groups:")?
            .split_whitespace()
            .filter_map(|g| g.parse::<u32>().ok()),
    );
    Some(groups)
}

/// Whether process `pid` runs as root with the host's root directory: a
/// runtime's or systemd's process, not a tenant's. Anyone can name
/// a process anything; only root on the host is trusted as evidence.
pub fn is_host_root_process(pid: u32) -> bool {
    use std::os::unix::fs::MetadataExt;
    let identity = |dir: &str| fs::metadata(dir).ok().map(|m| (m.dev(), m.ino()));
    // PID 1's root where we may look at it (gpu-trace may run in an image
    // with the host's PIDs); else ours, the host's when not in an image.
    let Some(host_root) = identity("/proc/1/root").or_else(|| identity("/")) else {
        return false;
    };
    let proc_dir = format!("/proc/{pid}");
    fs::metadata(&proc_dir).is_ok_and(|m| m.uid() == 0)
        && identity(&format!("{proc_dir}/root")) == Some(host_root)
}

/// The command name of process `pid`; empty when it is gone.
pub fn comm_of(pid: u32) -> String {
    fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|c| c.trim_end().to_string())
        .unwrap_or_default()
}

/// Whether /proc/PID is still the process sighted at `sighted_boot_ns`:
/// one that started no later (to the clock tick). A pid reused since names
/// a process that started after the sighting.
pub fn is_the_sighted_process(pid: u32, sighted_boot_ns: u64) -> bool {
    start_boot_ns(pid).is_ok_and(|start| start <= sighted_boot_ns)
}

/// `read` about process `pid`, only if it is the process sighted at
/// `sighted_boot_ns` both before and after the read (a pid reused during
/// the read would lend the other process's answer); None otherwise.
pub fn read_of_the_sighted<T>(
    pid: u32,
    sighted_boot_ns: u64,
    read: impl FnOnce(u32) -> Option<T>,
) -> Option<T> {
    if !is_the_sighted_process(pid, sighted_boot_ns) {
        return None;
    }
    let answer = read(pid)?;
    is_the_sighted_process(pid, sighted_boot_ns).then_some(answer)
}

/// When process `pid` started, on the kernel's boot-time clock (ns; the
/// kernel keeps it in clock ticks, 10 ms on most hosts).
pub fn start_boot_ns(pid: u32) -> std::io::Result<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat"))?;
    start_ticks_in(&stat)
        .map(|ticks| ticks.saturating_mul(1_000_000_000) / clock_ticks_per_second())
        .ok_or_else(|| std::io::Error::other(format!("/proc/{pid}/stat: no start time")))
}

/// Field 22 of /proc/PID/stat, counted after the command name, which may
/// itself hold spaces and parentheses (hence the last ')').
fn start_ticks_in(stat: &str) -> Option<u64> {
    let after_comm = &stat[stat.rfind(')')? + 1..];
    after_comm.split_whitespace().nth(19)?.parse().ok()
}

fn clock_ticks_per_second() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(ticks).ok().filter(|&t| t > 0).unwrap_or(100)
}

/// The devices line of /proc/PID/cgroup: "5:devices:/docker/ID".
fn devices_cgroup_in(membership: &str) -> Option<&str> {
    membership.lines().find_map(|line| {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
        controllers
            .split(',')
            .any(|c| c == "devices")
            .then_some(path)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_devices_cgroup_of_a_process() {
        let membership = "12:pids:/\n5:devices:/docker/abc\n0::/system.slice/docker-abc.scope\n";
        assert_eq!(devices_cgroup_in(membership), Some("/docker/abc"));
        assert_eq!(devices_cgroup_in("0::/\n"), None);
    }

    #[test]
    fn a_process_sighted_before_it_started_is_another() {
        let me = std::process::id();
        let now = crate::host::clock::since_boot().as_nanos() as u64;
        assert!(is_the_sighted_process(me, now));
        assert_eq!(read_of_the_sighted(me, now, Some), Some(me));
        // Sighted at boot: this process started later, so it is not that one.
        assert!(!is_the_sighted_process(me, 0));
        assert_eq!(read_of_the_sighted(me, 0, Some), None);
    }

    #[test]
    fn start_time_is_read_after_a_hostile_command_name() {
        let stat = "4242 (a) b (c) R 1 4242 4242 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 123456 1000 10 18446744073709551615";
        assert_eq!(start_ticks_in(stat), Some(123_456));
        assert_eq!(start_ticks_in("4242 (x"), None);
        assert!(start_boot_ns(std::process::id()).expect("own start") > 0);
    }

    #[test]
    fn reads_the_effective_gid_and_supplementary_groups() {
        let status = "Name:\tsh\nUid:\t65534\t65534\t65534\t65534\nGid:\t100\t65534\t65534\t65534\nGroups:\t44 109 \n";
        assert_eq!(groups_in(status), Some(vec![65534, 44, 109]));
        assert_eq!(groups_in("Gid:\t0\t0\t0\t0\nGroups:\t\n"), Some(vec![0]));
    }

    #[test]
    fn this_process_is_a_host_root_process_only_as_root() {
        let root = nix::unistd::geteuid().is_root();
        assert_eq!(is_host_root_process(std::process::id()), root);
    }
}
