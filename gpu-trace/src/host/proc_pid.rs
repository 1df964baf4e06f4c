//! What /proc/PID tells about a process's cgroups: its v1 devices cgroup and
//! that cgroup's devices.list.

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
}
