//! The cgroup2 hierarchy: where it is mounted, and cgroup id -> path.
//!
//! A cgroup id as BPF reports it is the inode number of the cgroup's
//! directory in the cgroup2 mount, also on hybrid v1/v2 hosts.

use std::{
    fs,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
    thread::{self, JoinHandle},
    time::{Duration, Instant},
};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::host::cgroup_tree::subdirectories;

/// The path of a cgroup made since start, by id, as the kernel noted it.
type PathOfCgroupMade = Box<dyn Fn(u64) -> Option<PathBuf>>;

type PathsById = FxHashMap<u64, PathBuf>;

/// Resolves cgroup ids to paths relative to the cgroup2 mount ("/lxc/200").
///
/// Tenants make cgroups, as many as they like: an id nobody can name must
/// not stall the events behind it. So after the first walk (at the first
/// lookup), a miss consults the kernel's note of cgroups made since start,
/// then answers None and asks for a new walk, which runs on its own thread;
/// its result replaces the table (dropping cgroups since removed). Walks
/// start no sooner than `RESCAN_PAUSE` (or ten times the last walk's
/// length) after the previous one ended, and an id still unknown after a
/// walk is not asked about again until the next.
pub struct CgroupResolver {
    mount: PathBuf,
    by_id: PathsById,
    /// Ids no walk or note named, until the next walk lands.
    unresolved: FxHashSet<u64>,
    /// A walk on its own thread: the table and how long the walk took.
    walk: Option<JoinHandle<(Walked, Duration)>>,
    /// When the last walk ended, and how long it took.
    last_walk: Option<(Instant, Duration)>,
    /// The root's count of descendants when the last walk began: fewer now
    /// means cgroups were removed, and their entries can go.
    descendants_at_walk: Option<u64>,
    /// Ids named from the kernel's note since the last walk.
    named_since_walk: usize,
    /// The kernel's note of each cgroup made since start: names a cgroup
    /// already removed, and one made since the last walk, without a walk.
    made: Option<PathOfCgroupMade>,
}

const RESCAN_PAUSE: Duration = Duration::from_millis(200);
/// Past this, the oldest unresolved ids are forgotten (asked about again).
const UNRESOLVED_LIMIT: usize = 65_536;
/// Cgroups named from the kernel's note before a walk is asked for.
const NAMED_BETWEEN_WALKS: usize = 4_096;

impl CgroupResolver {
    pub fn new(mount: impl Into<PathBuf>) -> Self {
        Self {
            mount: mount.into(),
            by_id: FxHashMap::default(),
            unresolved: FxHashSet::default(),
            walk: None,
            last_walk: None,
            descendants_at_walk: None,
            named_since_walk: 0,
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
        // A hit costs one lookup; the rest happens only on a miss.
        if !self.by_id.contains_key(&id) {
            self.miss(id);
        }
        self.by_id.get(&id).map(PathBuf::as_path)
    }

    fn miss(&mut self, id: u64) {
        self.land_walk();
        if self.by_id.contains_key(&id) {
            return;
        }
        if let Some(path) = self.made.as_ref().and_then(|made| made(id)) {
            self.by_id.insert(id, path);
            // A tenant that makes and removes cgroups in turn keeps the
            // count of descendants level: walk now and then anyway, so the
            // table sheds the removed ones.
            self.named_since_walk += 1;
            if self.named_since_walk >= NAMED_BETWEEN_WALKS {
                self.start_walk();
            }
            return;
        }
        if self.last_walk.is_none() {
            // The first lookup: walk now, nothing is known yet.
            self.walk_now();
            return;
        }
        if self.unresolved.len() >= UNRESOLVED_LIMIT {
            self.unresolved.clear();
        }
        if self.unresolved.insert(id) {
            self.start_walk();
        }
    }

    /// Every cgroup there is now, relative to the mount.
    pub fn all(&mut self) -> Vec<PathBuf> {
        self.walk_now();
        let mut paths: Vec<PathBuf> = self.by_id.values().cloned().collect();
        paths.sort();
        paths.dedup();
        paths
    }

    fn walk_now(&mut self) {
        let started = Instant::now();
        let found = walk(&self.mount);
        self.replace(found, started.elapsed());
    }

    fn replace(&mut self, found: Walked, took: Duration) {
        self.by_id = found.by_id;
        self.descendants_at_walk = found.descendants;
        self.named_since_walk = 0;
        self.unresolved.clear();
        self.last_walk = Some((Instant::now(), took));
    }

    /// Starts a walk on its own thread, unless one runs or ended too recently.
    fn start_walk(&mut self) {
        let rested = self.last_walk.is_none_or(|(ended, took)| {
            ended.elapsed() >= RESCAN_PAUSE.max(took.saturating_mul(10))
        });
        if self.walk.is_some() || !rested {
            return;
        }
        let mount = self.mount.clone();
        // A thread that cannot be made leaves the ids unknown, as before.
        self.walk = thread::Builder::new()
            .name("cgroup-walk".into())
            .spawn(move || {
                let started = Instant::now();
                let found = walk(&mount);
                (found, started.elapsed())
            })
            .ok();
    }

    /// Takes the finished walk's table, if any; true when one landed.
    fn land_walk(&mut self) -> bool {
        if !self.walk.as_ref().is_some_and(JoinHandle::is_finished) {
            return false;
        }
        match self.walk.take().map(JoinHandle::join) {
            Some(Ok((found, took))) => {
                self.replace(found, took);
                true
            }
            _ => false,
        }
    }

    /// Lets a finished walk land and starts the one a miss asked for: from
    /// the tick, so ids missed since still get named. True when a walk
    /// landed: cgroups it did not find are gone.
    pub fn maintain(&mut self) -> bool {
        let landed = self.land_walk();
        let removed = self
            .descendants_at_walk
            .zip(descendants(&self.mount))
            .is_some_and(|(then, now)| now < then);
        if !self.unresolved.is_empty() || removed {
            self.start_walk();
        }
        landed
    }

    /// Whether the last walk (or the kernel's note since) named `id`.
    pub fn knows(&self, id: u64) -> bool {
        self.by_id.contains_key(&id)
    }
}

/// What one walk found, and the root's count of descendants before it.
struct Walked {
    by_id: PathsById,
    descendants: Option<u64>,
}

/// `nr_descendants` of the root's cgroup.stat: one small read per tick.
fn descendants(mount: &Path) -> Option<u64> {
    fs::read_to_string(mount.join("cgroup.stat"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("nr_descendants ")?.trim().parse().ok())
}

/// Every cgroup under `mount`, by id; directories that vanish mid-walk are skipped.
fn walk(mount: &Path) -> Walked {
    let descendants = descendants(mount);
    let mut found = PathsById::default();
    let mut pending = vec![mount.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(meta) = fs::metadata(&dir) else {
            continue;
        };
        let relative = Path::new("/").join(dir.strip_prefix(mount).unwrap_or(&dir));
        found.insert(meta.ino(), relative);
        pending.extend(subdirectories(&dir));
    }
    Walked {
        by_id: found,
        descendants,
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

        // A cgroup made after the first walk: its first miss starts a walk
        // on another thread, whose result lands on a later lookup.
        fs::create_dir_all(root.path().join("system.slice/docker-abc.scope")).expect("make");
        std::thread::sleep(RESCAN_PAUSE);
        let id = ino("system.slice/docker-abc.scope");
        assert_eq!(paths.resolve(id), None, "not waited for");
        let deadline = Instant::now() + Duration::from_secs(10);
        while paths.resolve(id).is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
            paths.maintain();
        }
        assert_eq!(
            paths.resolve(id),
            Some(Path::new("/system.slice/docker-abc.scope"))
        );
        // Removed cgroups leave the table with the next walk.
        fs::remove_dir(root.path().join("system.slice/docker-abc.scope")).expect("rmdir");
        assert_eq!(paths.all().len(), 4);
    }
}
