//! /proc/self/mountinfo: where cgroup2 and the v1 controllers are mounted.

use std::{fs, io, path::PathBuf};

/// Finds the cgroup2 mount point in the text of /proc/self/mountinfo:
/// /sys/fs/cgroup on pure v2 hosts, /sys/fs/cgroup/unified on hybrid ones.
pub fn cgroup2_mount_in(mountinfo: &str) -> Option<PathBuf> {
    find_mount(mountinfo, |fstype, _| fstype == "cgroup2").map(|(_, mount)| mount)
}

/// Finds where a cgroup v1 controller ("devices") is mounted, if it is.
pub fn v1_controller_mount_in(mountinfo: &str, controller: &str) -> Option<PathBuf> {
    v1_controller_in(mountinfo, controller).map(|(_, mount)| mount)
}

/// The same, with the cgroup the mount shows as its root: "/" on the host,
/// the container's own cgroup inside a container's cgroup namespace.
pub fn v1_controller_in(mountinfo: &str, controller: &str) -> Option<(String, PathBuf)> {
    find_mount(mountinfo, |fstype, super_options| {
        fstype == "cgroup" && super_options.split(',').any(|o| o == controller)
    })
}

/// The root and mount point of the first mount whose filesystem type and
/// super options satisfy `wanted`.
fn find_mount(mountinfo: &str, wanted: impl Fn(&str, &str) -> bool) -> Option<(String, PathBuf)> {
    mountinfo.lines().find_map(|line| {
        // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS"
        let (before, after) = line.split_once(" - ")?;
        let mut after = after.split_whitespace();
        let fstype = after.next()?;
        let super_options = after.nth(1).unwrap_or("");
        if !wanted(fstype, super_options) {
            return None;
        }
        let mut fields = before.split_whitespace();
        let root = fields.nth(3)?;
        let mount_point = fields.next()?;
        Some((
            unescape_mountinfo(root),
            PathBuf::from(unescape_mountinfo(mount_point)),
        ))
    })
}

/// The cgroup2 mount point of this process's mount namespace.
pub fn cgroup2_mount() -> io::Result<Option<PathBuf>> {
    Ok(cgroup2_mount_in(&fs::read_to_string(
        "/proc/self/mountinfo",
    )?))
}

/// mountinfo writes space, tab, newline and backslash as octal escapes.
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 4 <= bytes.len()
            && bytes[i + 1..i + 4]
                .iter()
                .all(|b| (b'0'..=b'7').contains(b))
        {
            let value = bytes[i + 1..i + 4]
                .iter()
                .fold(0u32, |acc, b| acc * 8 + u32::from(b - b'0'));
            out.push(value as u8);
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}
