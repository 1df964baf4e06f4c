//! The cgroup2 hierarchy: where it is mounted, and cgroup id -> path.
//!
//! A cgroup id as BPF reports it is the inode number of the cgroup's
//! directory in the cgroup2 mount, also on hybrid v1/v2 hosts.

use std::{
    fs::{self, File},
    io,
    os::{
        fd::AsRawFd,
        unix::{fs::MetadataExt, process::CommandExt},
    },
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use anyhow::Context;
use rustc_hash::FxHashMap;

use crate::tracer::CgroupsMade;

/// Finds the cgroup2 mount point in the text of /proc/self/mountinfo:
/// /sys/fs/cgroup on pure v2 hosts, /sys/fs/cgroup/unified on hybrid ones.
pub fn cgroup2_mount_in(mountinfo: &str) -> Option<PathBuf> {
    find_mount(mountinfo, |fstype, _| fstype == "cgroup2")
}

/// Finds where a cgroup v1 controller ("devices") is mounted, if it is.
pub fn v1_controller_mount_in(mountinfo: &str, controller: &str) -> Option<PathBuf> {
    find_mount(mountinfo, |fstype, super_options| {
        fstype == "cgroup" && super_options.split(',').any(|o| o == controller)
    })
}

/// The mount point of the first mount whose filesystem type and super
/// options satisfy `wanted`.
fn find_mount(mountinfo: &str, wanted: impl Fn(&str, &str) -> bool) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        // "ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS"
        let (before, after) = line.split_once(" - ")?;
        let mut after = after.split_whitespace();
        let fstype = after.next()?;
        let super_options = after.nth(1).unwrap_or("");
        if !wanted(fstype, super_options) {
            return None;
        }
        let mount_point = before.split_whitespace().nth(4)?;
        Some(PathBuf::from(unescape_mountinfo(mount_point)))
    })
}

/// The cgroup2 mount point of this process's mount namespace.
pub fn cgroup2_mount() -> io::Result<Option<PathBuf>> {
    Ok(cgroup2_mount_in(&fs::read_to_string(
        "/proc/self/mountinfo",
    )?))
}

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

/// Resolves cgroup ids to paths relative to the cgroup2 mount ("/lxc/200").
/// The cache is rebuilt on a miss, since containers come and go, but not more
/// often than `MIN_RESCAN_INTERVAL` so a burst of events from a vanished
/// cgroup does not turn into a burst of tree walks.
pub struct CgroupPaths {
    mount: PathBuf,
    by_id: FxHashMap<u64, PathBuf>,
    last_scan: Option<Instant>,
    /// The kernel's note of each cgroup made since start: names a cgroup
    /// already removed, and one made since the last walk, without a walk.
    made: Option<CgroupsMade>,
}

const MIN_RESCAN_INTERVAL: Duration = Duration::from_millis(50);

impl CgroupPaths {
    pub fn new(mount: impl Into<PathBuf>) -> Self {
        Self {
            mount: mount.into(),
            by_id: FxHashMap::default(),
            last_scan: None,
            made: None,
        }
    }

    /// Consults the tracer's record of new cgroups on a miss.
    pub fn with_cgroups_made(mut self, made: Option<CgroupsMade>) -> Self {
        self.made = made;
        self
    }

    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// The path of cgroup `id`, relative to the mount and starting with '/'.
    pub fn resolve(&mut self, id: u64) -> Option<&Path> {
        // A hit costs one lookup; the clock is read only on a miss.
        if !self.by_id.contains_key(&id) {
            if let Some(path) = self.made.as_ref().and_then(|made| made.path(id)) {
                self.by_id.insert(id, path);
            }
        }
        if !self.by_id.contains_key(&id)
            && self
                .last_scan
                .is_none_or(|at| at.elapsed() >= MIN_RESCAN_INTERVAL)
        {
            self.rescan();
        }
        self.by_id.get(&id).map(PathBuf::as_path)
    }

    /// Every cgroup there is now, relative to the mount.
    pub fn all(&mut self) -> Vec<PathBuf> {
        self.rescan();
        let mut paths: Vec<PathBuf> = self.by_id.values().cloned().collect();
        paths.sort();
        paths.dedup();
        paths
    }

    /// Walks the whole hierarchy; directories that vanish mid-walk are skipped.
    fn rescan(&mut self) {
        self.last_scan = Some(Instant::now());
        let mut pending = vec![self.mount.clone()];
        while let Some(dir) = pending.pop() {
            let Ok(meta) = fs::metadata(&dir) else {
                continue;
            };
            let relative = Path::new("/").join(dir.strip_prefix(&self.mount).unwrap_or(&dir));
            self.by_id.insert(meta.ino(), relative);
            let Ok(entries) = fs::read_dir(&dir) else {
                continue;
            };
            pending.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
33 31 0:30 / /sys/fs/cgroup/devices rw,nosuid - cgroup cgroup rw,devices
";

    #[test]
    fn finds_cgroup2_on_hybrid_layout() {
        assert_eq!(
            cgroup2_mount_in(HYBRID),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
    }

    #[test]
    fn finds_the_v1_devices_controller_on_hybrid_layout() {
        assert_eq!(
            v1_controller_mount_in(HYBRID, "devices"),
            Some(PathBuf::from("/sys/fs/cgroup/devices"))
        );
        assert_eq!(v1_controller_mount_in(HYBRID, "memory"), None);
    }

    #[test]
    fn finds_cgroup2_on_pure_v2_layout() {
        let text = "29 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount_in(text),
            Some(PathBuf::from("/sys/fs/cgroup"))
        );
    }

    #[test]
    fn no_cgroup2_mount_is_none() {
        let text = "33 31 0:30 / /sys/fs/cgroup/devices rw - cgroup cgroup rw,devices\n";
        assert_eq!(cgroup2_mount_in(text), None);
    }

    #[test]
    fn unescapes_spaces_in_mount_points() {
        let text = "40 1 0:40 / /mnt/my\\040cgroups rw - cgroup2 none rw\n";
        assert_eq!(
            cgroup2_mount_in(text),
            Some(PathBuf::from("/mnt/my cgroups"))
        );
    }

    #[test]
    fn resolves_ids_on_a_fake_tree_and_refreshes_on_a_miss() {
        let root = tempfile::tempdir().expect("temp dir");
        fs::create_dir_all(root.path().join("lxc/200")).expect("make tree");
        let ino = |p: &str| fs::metadata(root.path().join(p)).expect("stat").ino();
        let mut paths = CgroupPaths::new(root.path());
        assert_eq!(paths.resolve(ino("lxc/200")), Some(Path::new("/lxc/200")));
        assert_eq!(paths.resolve(ino("")), Some(Path::new("/")));

        // A cgroup made after the first walk is found on its first miss.
        fs::create_dir_all(root.path().join("system.slice/docker-abc.scope")).expect("make");
        std::thread::sleep(MIN_RESCAN_INTERVAL);
        let id = ino("system.slice/docker-abc.scope");
        assert_eq!(
            paths.resolve(id),
            Some(Path::new("/system.slice/docker-abc.scope"))
        );
    }
}
