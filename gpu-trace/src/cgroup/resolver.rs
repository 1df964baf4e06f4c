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

use rustc_hash::FxHashSet;

use super::path_cache::PathCache;
use crate::host::{
    cgroup_handle::{ById, CgroupHandles},
    cgroup_tree::subdirectories,
};
use crate::model::cgroup_note::CgroupNote;

/// The kernel's note of a cgroup made since start, by id.
type NoteOfCgroupMade = Box<dyn Fn(u64) -> Option<CgroupNote>>;

/// Bytes of cgroup paths kept: a tenant's 40 000 cgroups with 3.9 KB paths
/// would be 160 MB; past this, paths are named again when next met.
pub const PATHS_BUDGET: usize = 4 << 20;

/// Resolves cgroup ids to paths relative to the cgroup2 mount ("/lxc/200").
///
/// Tenants make cgroups, as many as they like, with names as long as they
/// like: so the resolver opens the one cgroup it is asked about by its id
/// (a file handle) and keeps what it learnt in a cache bounded in bytes,
/// never a table of the whole host. A cgroup already removed is named from
/// the kernel's note of cgroups made since start.
///
/// Where the kernel will not open cgroups by handle, the tree is walked
/// instead, off the event thread and bounded by the same budget: after the
/// first walk, a miss consults the kernel's note, then answers None and
/// asks for a new walk on its own thread, whose result replaces the table.
/// Walks start no sooner than `RESCAN_PAUSE` (or ten times the last walk's
/// length) after the previous one ended, and an id still unknown after a
/// walk is not asked about again until the next.
pub struct CgroupResolver {
    mount: PathBuf,
    /// Opens a cgroup by id; None where the kernel refuses.
    handles: Option<CgroupHandles>,
    paths: PathCache,
    /// The root's count of descendants at the last look: fewer now means
    /// cgroups were removed, and what was kept for them can go.
    descendants_seen: Option<u64>,
    /// Cgroups were removed since the last sweep of what is kept for them.
    removed_since_sweep: bool,
    last_sweep: Instant,
    /// What the kernel said of each id during this sweep: every table asks
    /// about the same cgroups.
    alive: std::cell::RefCell<rustc_hash::FxHashMap<u64, bool>>,
    walks: Walks,
    /// The kernel's note of each cgroup made since start: names a cgroup
    /// already removed, and one made since the last walk, without a walk.
    made: Option<NoteOfCgroupMade>,
}

/// The walking route's state.
#[derive(Default)]
struct Walks {
    /// Ids no walk or note named, until the next walk lands.
    unresolved: FxHashSet<u64>,
    /// A walk on its own thread: the table and how long the walk took.
    running: Option<JoinHandle<(Walked, Duration)>>,
    /// When the last walk ended, and how long it took.
    last: Option<(Instant, Duration)>,
    /// Ids named from the kernel's note since the last walk.
    named_since: usize,
}

const RESCAN_PAUSE: Duration = Duration::from_millis(200);
/// Sweeps of what is kept for removed cgroups, at most one per this.
const SWEEP_PAUSE: Duration = Duration::from_secs(10);
/// Past this, the oldest unresolved ids are forgotten (asked about again).
const UNRESOLVED_LIMIT: usize = 65_536;
/// Cgroups named from the kernel's note before a walk is asked for.
const NAMED_BETWEEN_WALKS: usize = 4_096;

impl CgroupResolver {
    pub fn new(mount: impl Into<PathBuf>) -> Self {
        let mount = mount.into();
        Self {
            handles: CgroupHandles::open(&mount).ok(),
            descendants_seen: descendants(&mount),
            mount,
            paths: PathCache::with_budget(PATHS_BUDGET),
            removed_since_sweep: false,
            last_sweep: Instant::now(),
            alive: Default::default(),
            walks: Walks::default(),
            made: None,
        }
    }

    /// Consults the tracer's record of new cgroups on a miss.
    /// `made` names cgroups by id from the kernel's own note (the tracer's).
    pub fn with_cgroups_made(
        mut self,
        made: Option<impl Fn(u64) -> Option<CgroupNote> + 'static>,
    ) -> Self {
        self.made = made.map(|made| Box::new(made) as NoteOfCgroupMade);
        self
    }

    pub fn mount(&self) -> &Path {
        &self.mount
    }

    /// The path of cgroup `id`, relative to the mount and starting with '/'.
    pub fn resolve(&mut self, id: u64) -> Option<&Path> {
        // A hit costs one lookup; the rest happens only on a miss.
        if !self.paths.contains(id) {
            self.miss(id);
        }
        self.paths.get(id)
    }

    fn miss(&mut self, id: u64) {
        if self.handles.is_some() {
            self.miss_by_handle(id);
        } else {
            self.miss_walking(id);
        }
    }

    /// The kernel's note first: one map lookup, where a handle costs an
    /// open, a readlink and a close, and a tenant making cgroups by the
    /// thousand makes every one of them a miss.
    fn miss_by_handle(&mut self, id: u64) {
        let found = self.noted_path(id).or_else(|| {
            match self.handles.as_ref().map(|handles| handles.path_of(id)) {
                Some(ById::Path(path)) => Some(path),
                _ => None,
            }
        });
        if let Some(path) = found {
            self.keep(id, path);
        }
    }

    fn noted_path(&self, id: u64) -> Option<PathBuf> {
        self.made.as_ref().and_then(|made| made(id))?.path
    }

    /// Who made cgroup `id`, when it was made since start (the kernel's
    /// note): its owner, even once it is gone.
    pub fn creator_uid(&self, id: u64) -> Option<u32> {
        self.made.as_ref().and_then(|made| made(id))?.creator_uid
    }

    /// Keeps a path named on demand; a full cache starts over, so the
    /// cgroups still in use are the ones kept.
    fn keep(&mut self, id: u64, path: PathBuf) {
        if !self.paths.insert(id, path.clone()) {
            self.paths.clear();
            self.paths.insert(id, path);
        }
    }

    fn miss_walking(&mut self, id: u64) {
        self.land_walk();
        if self.paths.contains(id) {
            return;
        }
        if let Some(path) = self.noted_path(id) {
            self.keep(id, path);
            // A tenant that makes and removes cgroups in turn keeps the
            // count of descendants level: walk now and then anyway, so the
            // table sheds the removed ones.
            self.walks.named_since += 1;
            if self.walks.named_since >= NAMED_BETWEEN_WALKS {
                self.start_walk();
            }
            return;
        }
        if self.walks.last.is_none() {
            // The first lookup: nothing is known yet. Walk, and wait for
            // it: once, before the first events are written.
            self.start_walk();
            if let Some(walk) = self.walks.running.take() {
                if let Ok((found, took)) = walk.join() {
                    self.replace(found, took);
                }
            }
            return;
        }
        if self.walks.unresolved.len() >= UNRESOLVED_LIMIT {
            self.walks.unresolved.clear();
        }
        if self.walks.unresolved.insert(id) {
            self.start_walk();
        }
    }

    /// Every cgroup there is now, relative to the mount (for `check`, which
    /// asks once and owns what it gets).
    pub fn all(&mut self) -> Vec<PathBuf> {
        let mut paths: Vec<PathBuf> = walk(&self.mount, usize::MAX)
            .paths
            .paths()
            .map(Path::to_path_buf)
            .collect();
        paths.sort();
        paths.dedup();
        paths
    }

    fn replace(&mut self, found: Walked, took: Duration) {
        self.paths = found.paths;
        self.descendants_seen = found.descendants;
        self.walks.named_since = 0;
        self.walks.unresolved.clear();
        self.walks.last = Some((Instant::now(), took));
    }

    /// Starts a walk on its own thread, unless one runs or ended too recently.
    fn start_walk(&mut self) {
        let rested = self.walks.last.is_none_or(|(ended, took)| {
            ended.elapsed() >= RESCAN_PAUSE.max(took.saturating_mul(10))
        });
        if self.walks.running.is_some() || !rested {
            return;
        }
        let mount = self.mount.clone();
        // A thread that cannot be made leaves the ids unknown, as before.
        self.walks.running = thread::Builder::new()
            .name("cgroup-walk".into())
            .spawn(move || {
                let started = Instant::now();
                let found = walk(&mount, PATHS_BUDGET);
                (found, started.elapsed())
            })
            .ok();
    }

    /// Takes the finished walk's table, if any; true when one landed.
    fn land_walk(&mut self) -> bool {
        if !self
            .walks
            .running
            .as_ref()
            .is_some_and(JoinHandle::is_finished)
        {
            return false;
        }
        match self.walks.running.take().map(JoinHandle::join) {
            Some(Ok((found, took))) => {
                self.replace(found, took);
                true
            }
            _ => false,
        }
    }

    /// From the tick: true when cgroups were removed since the last call
    /// (by handle: the root's count of descendants fell; walking: a walk
    /// landed, and what it did not find is gone). Walking, it also lets a
    /// finished walk land and starts the one a miss asked for, so ids
    /// missed since still get named.
    pub fn maintain(&mut self) -> bool {
        let now = descendants(&self.mount);
        let removed = self
            .descendants_seen
            .zip(now)
            .is_some_and(|(then, now)| now < then);
        if self.handles.is_some() {
            // Each sweep asks the kernel about every cgroup kept anywhere:
            // a tenant removing one cgroup a second must not make that
            // every tick. Removals wait for the next sweep, counted.
            self.removed_since_sweep |= removed;
            self.descendants_seen = now;
            let rested = self.last_sweep.elapsed() >= SWEEP_PAUSE;
            if self.removed_since_sweep && rested {
                self.removed_since_sweep = false;
                self.last_sweep = Instant::now();
                self.alive.borrow_mut().clear();
                return true;
            }
            return false;
        }
        let landed = self.land_walk();
        if !self.walks.unresolved.is_empty() || removed {
            self.start_walk();
        }
        landed
    }

    /// Whether cgroup `id` still exists (walking: as far as the last walk
    /// or the kernel's note since knows).
    pub fn knows(&self, id: u64) -> bool {
        match &self.handles {
            Some(handles) => *self
                .alive
                .borrow_mut()
                .entry(id)
                .or_insert_with(|| handles.exists(id)),
            None => self.paths.contains(id),
        }
    }
}

/// What one walk found, and the root's count of descendants before it.
struct Walked {
    paths: PathCache,
    descendants: Option<u64>,
}

/// `nr_descendants` of the root's cgroup.stat: one small read per tick.
fn descendants(mount: &Path) -> Option<u64> {
    fs::read_to_string(mount.join("cgroup.stat"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("nr_descendants ")?.trim().parse().ok())
}

/// The cgroups under `mount`, by id, until their paths and the ones still
/// to visit pass `budget` bytes; directories that vanish mid-walk are
/// skipped.
fn walk(mount: &Path, budget: usize) -> Walked {
    let descendants = descendants(mount);
    let mut found = PathCache::with_budget(budget);
    let mut pending = vec![mount.to_path_buf()];
    let mut pending_bytes = 0usize;
    'walk: while let Some(dir) = pending.pop() {
        pending_bytes = pending_bytes.saturating_sub(dir.as_os_str().len());
        let Ok(meta) = fs::metadata(&dir) else {
            continue;
        };
        let relative = Path::new("/").join(dir.strip_prefix(mount).unwrap_or(&dir));
        if !found.insert(meta.ino(), relative) {
            break;
        }
        for child in subdirectories(&dir) {
            let len = child.as_os_str().len();
            if found.bytes().saturating_add(pending_bytes + len) > budget {
                // Past the budget: the rest stays unnamed until a
                // handle or the kernel's note names it.
                break 'walk;
            }
            pending_bytes += len;
            pending.push(child);
        }
    }
    Walked {
        paths: found,
        descendants,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_walk_stops_at_its_budget_in_bytes() {
        let root = tempfile::tempdir().expect("temp dir");
        let long = "x".repeat(200);
        for i in 0..50 {
            fs::create_dir_all(root.path().join(format!("{long}/{i}"))).expect("make");
        }
        let whole = walk(root.path(), usize::MAX);
        assert_eq!(whole.paths.paths().count(), 52);
        let budget = 10 * 300;
        let part = walk(root.path(), budget);
        assert!(part.paths.bytes() <= budget, "{}", part.paths.bytes());
        assert!(part.paths.paths().count() < 52);
    }
}
