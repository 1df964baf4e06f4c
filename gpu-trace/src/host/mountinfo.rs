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

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
33 31 0:30 / /sys/fs/cgroup/devices rw,nosuid - cgroup cgroup rw,devices
";

    /// The cgroup2 mount `text` names, as a string.
    fn cgroup2_of(text: &str) -> Option<String> {
        cgroup2_mount_in(text).map(|p| p.display().to_string())
    }

    #[test]
    fn finds_cgroup2_on_hybrid_layout() {
        assert_eq!(
            cgroup2_of(HYBRID).as_deref(),
            Some("/sys/fs/cgroup/unified")
        );
    }

    #[test]
    fn finds_cgroup2_on_pure_v2_layout() {
        let text = "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw\n";
        assert_eq!(cgroup2_of(text).as_deref(), Some("/sys/fs/cgroup"));
    }

    #[test]
    fn no_cgroup2_mount_is_none() {
        let text = "33 31 0:30 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n";
        assert_eq!(cgroup2_of(text), None);
    }

    #[test]
    fn unescapes_spaces_in_mount_points() {
        let text = "40 1 0:40 / /mnt/my\\040cgroups rw - cgroup2 none rw\n";
        assert_eq!(cgroup2_of(text).as_deref(), Some("/mnt/my cgroups"));
    }

    #[test]
    fn finds_the_v1_devices_controller_on_hybrid_layout() {
        assert_eq!(
            v1_controller_mount_in(HYBRID, "devices"),
            Some(PathBuf::from("/sys/fs/cgroup/devices"))
        );
        assert_eq!(v1_controller_mount_in(HYBRID, "memory"), None);
    }
}
