//! The cgroup2 hierarchy: where it is mounted, and cgroup id -> path.
//!
//! A cgroup id as BPF reports it is the inode number of the cgroup's
//! directory in the cgroup2 mount, also on hybrid v1/v2 hosts.

use std::{
    fs::{self},
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use rustc_hash::FxHashMap;

/// The path of a cgroup made since start, by id, as the kernel noted it.
type PathOfCgroupMade = Box<dyn Fn(u64) -> Option<PathBuf>>;

/// Resolves cgroup ids to paths relative to the cgroup2 mount ("/lxc/200").
/// The cache is rebuilt on a miss, since containers come and go, but not more
/// often than `MIN_RESCAN_INTERVAL` so a burst of events from a vanished
/// cgroup does not turn into a burst of tree walks.
pub struct CgroupResolver {
    mount: PathBuf,
    by_id: FxHashMap<u64, PathBuf>,
    last_scan: Option<Instant>,
    /// The kernel's note of each cgroup made since start: names a cgroup
    /// already removed, and one made since the last walk, without a walk.
    made: Option<PathOfCgroupMade>,
}

const MIN_RESCAN_INTERVAL: Duration = Duration::from_millis(50);

impl CgroupResolver {
    pub fn new(mount: impl Into<PathBuf>) -> Self {
        Self {
            mount: mount.into(),
            by_id: FxHashMap::default(),
            last_scan: None,
            made: None,
        }
    }

    /// Consults the tracer's record of new cgroups on a miss.
    /// `made` names cgroups by id from the kernel's own note (the tracer's).
    pub fn with_cgroups_made(
        mut self,
        made: Option<impl Fn(u64) -> Option<PathBuf> + 'static>,
    ) -> Self {
        self.made = made.map(|made| Box::new(made) as PathOfCgroupMade);
        self
    }

    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// The path of cgroup `id`, relative to the mount and starting with '/'.
    pub fn resolve(&mut self, id: u64) -> Option<&Path> {
        // A hit costs one lookup; the clock is read only on a miss.
        if !self.by_id.contains_key(&id) {
            if let Some(path) = self.made.as_ref().and_then(|made| made(id)) {
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
    use crate::host::mountinfo::{cgroup2_mount_in, v1_controller_mount_in};

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
        let mut paths = CgroupResolver::new(root.path());
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
