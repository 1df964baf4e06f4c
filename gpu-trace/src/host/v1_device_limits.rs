//! Can a cgroup v1 `devices` controller refuse anything on this host? Its
//! denials come after the BPF device policies, so only fexit on the
//! kernel's check or the open's result shows them: where neither fexit nor
//! a cheap open route is there, this decides whether `watch` must pay for
//! the syscall tracepoints.
//!
//! `devices.list` cannot answer: under the default "allow" a cgroup lists
//! `a *:* rwm` whatever it denies. What can be known is whether any process
//! sits outside the hierarchy's root, which no rule can restrict.

use std::{
    fs,
    os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd},
    path::{Path, PathBuf},
};

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

use crate::{
    host::{cgroup_tree::subdirectories, mountinfo::v1_controller_in},
    text::terminal::escape,
};

/// What the walk found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum V1DeviceLimits {
    /// No v1 `devices` hierarchy is mounted here.
    NotMounted,
    /// Mounted, and every process is in its root.
    Unpopulated { mount: PathBuf, cgroups: usize },
    /// This cgroup below the root holds processes: its rules may deny.
    Populated(PathBuf),
    /// The hierarchy is larger than the walk's bound; taken as populated.
    TooLargeToCheck { mount: PathBuf },
}

/// A tenant can make cgroups in a delegated subtree: the walk stops here,
/// and treats what it could not see as populated.
const MAX_CGROUPS: usize = 20_000;
/// Past this many cgroups to watch, the tracepoints go in at once instead.
const MAX_WATCHES: usize = 4_096;

impl V1DeviceLimits {
    /// Reads the mount table and walks the hierarchy.
    pub fn read() -> Self {
        let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        match v1_controller_in(&mountinfo, "devices") {
            None => Self::NotMounted,
            Some((root, mount)) => Self::walk(&mount, root == "/"),
        }
    }

    /// Stops at the first cgroup with a process in it, the mount's own
    /// directory left out only where it is the hierarchy's root (inside a
    /// cgroup namespace it is a cgroup like any other).
    pub fn walk(mount: &Path, mount_is_root: bool) -> Self {
        let mut cgroups = 0;
        let found = each_cgroup(mount, |dir| {
            cgroups += 1;
            // A cgroup removed during the walk holds nobody any more.
            let populated = (dir != mount || !mount_is_root)
                && fs::read_to_string(dir.join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty());
            populated.then(|| dir.to_path_buf())
        });
        match found {
            Walk::Found(dir) => Self::Populated(dir),
            Walk::TooLarge => Self::TooLargeToCheck {
                mount: mount.to_path_buf(),
            },
            Walk::Done => Self::Unpopulated {
                mount: mount.to_path_buf(),
                cgroups,
            },
        }
    }

    /// Whether `watch` needs the open results to see v1 denials now.
    pub fn may_deny(&self) -> bool {
        matches!(self, Self::Populated(_) | Self::TooLargeToCheck { .. })
    }

    /// For the start-up lines; a cgroup's name may be a tenant's choice, so
    /// paths are escaped for the terminal.
    pub fn describe(&self) -> String {
        let shown = |path: &Path| escape(&path.to_string_lossy()).into_owned();
        match self {
            Self::NotMounted => "no cgroup v1 devices hierarchy is mounted".into(),
            Self::Unpopulated { cgroups, .. } => format!(
                "no process is in a cgroup v1 devices cgroup that could restrict it ({cgroups} cgroups, every process in the root)"
            ),
            Self::Populated(path) => format!(
                "processes are in the cgroup v1 devices cgroup {}, whose rules may deny (devices.list cannot tell)",
                shown(path)
            ),
            Self::TooLargeToCheck { mount } => format!(
                "the cgroup v1 devices hierarchy at {} has more than {MAX_CGROUPS} cgroups to check",
                shown(mount)
            ),
        }
    }
}

enum Walk {
    Found(PathBuf),
    TooLarge,
    Done,
}

/// Visits `root` and every cgroup below it until `visit` finds something.
fn each_cgroup(root: &Path, mut visit: impl FnMut(&Path) -> Option<PathBuf>) -> Walk {
    let mut pending = vec![root.to_path_buf()];
    let mut visited = 0;
    while let Some(dir) = pending.pop() {
        visited += 1;
        if visited > MAX_CGROUPS {
            return Walk::TooLarge;
        }
        if let Some(found) = visit(&dir) {
            return Walk::Found(found);
        }
        pending.extend(subdirectories(&dir));
    }
    Walk::Done
}

/// Wakes when anything changes in an unpopulated hierarchy: a cgroup made
/// (IN_CREATE), or a rule or a process written into one (IN_MODIFY on its
/// devices.deny or cgroup.procs). A container runtime makes its cgroup
/// before it writes rules and starts the container, which leaves the
/// tracer time to attach the open route before the first open.
pub struct V1Changes(Inotify);

impl V1Changes {
    /// Watches every directory of the hierarchy at `mount`.
    pub fn watch(mount: &Path) -> anyhow::Result<Self> {
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        let mut trouble = None;
        let mut watched = 0;
        let walked = each_cgroup(mount, |dir| {
            // Every watch comes out of root's shared inotify allowance.
            watched += 1;
            if watched > MAX_WATCHES {
                trouble = Some(anyhow::anyhow!("more than {MAX_WATCHES} cgroups to watch"));
                return Some(dir.to_path_buf());
            }
            let added = inotify.add_watch(
                dir,
                AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_ONLYDIR,
            );
            match added {
                Ok(_) => None,
                // Gone meanwhile: nothing to watch there.
                Err(nix::errno::Errno::ENOENT) => None,
                Err(e) => {
                    // A cgroup's name may be a tenant's choice.
                    let shown = escape(&dir.to_string_lossy()).into_owned();
                    trouble = Some(anyhow::anyhow!("watching {shown}: {e}"));
                    Some(dir.to_path_buf())
                }
            }
        });
        match (walked, trouble) {
            (_, Some(e)) => Err(e),
            (Walk::TooLarge, None) => anyhow::bail!("more than {MAX_CGROUPS} cgroups to watch"),
            _ => Ok(Self(inotify)),
        }
    }

    /// Whether anything changed since the last call (and drains the queue).
    pub fn changed(&self) -> bool {
        self.0.read_events().is_ok_and(|events| !events.is_empty())
    }
}

impl AsRawFd for V1Changes {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

impl AsFd for V1Changes {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cgroup(root: &Path, relative: &str, procs: &str) {
        let dir = root.join(relative);
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("cgroup.procs"), procs).unwrap();
    }

    #[test]
    fn a_process_below_the_root_may_be_restricted() {
        let root = tempfile::tempdir().unwrap();
        cgroup(root.path(), "", "1\n2\n");
        cgroup(root.path(), "docker", "");
        cgroup(root.path(), "docker/abc", "4242\n");
        let found = V1DeviceLimits::walk(root.path(), true);
        assert_eq!(
            found,
            V1DeviceLimits::Populated(root.path().join("docker/abc"))
        );
        assert!(found.may_deny());
    }

    #[test]
    fn processes_in_the_root_alone_cannot_be_restricted() {
        let root = tempfile::tempdir().unwrap();
        cgroup(root.path(), "", "1\n2\n");
        cgroup(root.path(), "docker", "");
        // Inside a cgroup namespace the mount's own directory is a cgroup
        // whose rules may deny.
        assert_eq!(
            V1DeviceLimits::walk(root.path(), false),
            V1DeviceLimits::Populated(root.path().to_path_buf())
        );
        let found = V1DeviceLimits::walk(root.path(), true);
        assert_eq!(
            found,
            V1DeviceLimits::Unpopulated {
                mount: root.path().to_path_buf(),
                cgroups: 2
            }
        );
        assert!(!found.may_deny());
    }

    #[test]
    fn a_cgroup_made_or_joined_is_a_change() {
        let root = tempfile::tempdir().unwrap();
        cgroup(root.path(), "docker", "");
        let changes = V1Changes::watch(root.path()).unwrap();
        assert!(!changes.changed(), "nothing happened yet");
        fs::create_dir(root.path().join("docker/new")).unwrap();
        assert!(changes.changed(), "a cgroup made");
        assert!(!changes.changed(), "read once");
        fs::write(root.path().join("docker/cgroup.procs"), "4242\n").unwrap();
        assert!(changes.changed(), "a process joined");
    }
}
