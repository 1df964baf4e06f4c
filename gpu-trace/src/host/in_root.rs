//! A directory as a process with another root sees it. `check --pid`
//! reads the target's /dev through /proc/PID/root; walking that path
//! naively resolves a container's absolute symlinks (`/dev -> /host/dev`)
//! against the host's root, and would report the host's nodes as the
//! container's. openat2 with RESOLVE_IN_ROOT resolves every component,
//! symlinks included, inside the given root.

use std::{
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::{Path, PathBuf},
};

use nix::{
    dir::Dir,
    fcntl::{openat2, OFlag, OpenHow, ResolveFlag},
    sys::stat::{fstat, Mode, SFlag},
};

/// The character devices in `dir` (relative, "dev") under `root`, as
/// (the path shown, e.g. /proc/7/root/dev/nvidia0, and its device number),
/// each resolved the way a process whose root is `root` would open it.
pub fn char_devices_in(root: &Path, dir: &str) -> Vec<(PathBuf, u64)> {
    let Ok(root_fd) = nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map(owned) else {
        return Vec::new();
    };
    let Ok(dir_fd) = open_in_root(
        &root_fd,
        Path::new(dir),
        OFlag::O_RDONLY | OFlag::O_DIRECTORY,
    ) else {
        return Vec::new();
    };
    let Ok(mut entries) = Dir::from_fd(std::os::fd::IntoRawFd::into_raw_fd(dir_fd)) else {
        return Vec::new();
    };
    let names: Vec<String> = entries
        .iter()
        .flatten()
        .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
        .filter(|n| n != "." && n != "..")
        .collect();
    names
        .into_iter()
        .filter_map(|name| {
            let inside = Path::new(dir).join(&name);
            let node = open_in_root(&root_fd, &inside, OFlag::O_PATH).ok()?;
            let stat = fstat(node.as_raw_fd()).ok()?;
            let is_char = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFCHR;
            is_char.then(|| (root.join(&inside), stat.st_rdev))
        })
        .collect()
}

/// Mode and group of `path` (absolute, as the process sees it) under
/// `root`, resolved inside that root.
pub fn mode_and_group_in(root: &Path, path: &Path) -> Option<(u32, u32)> {
    let root_fd = nix::fcntl::open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map(owned)
    .ok()?;
    let inside = path.strip_prefix("/").ok()?;
    let node = open_in_root(&root_fd, inside, OFlag::O_PATH).ok()?;
    let stat = fstat(node.as_raw_fd()).ok()?;
    Some((stat.st_mode, stat.st_gid))
}

fn open_in_root(root: &OwnedFd, path: &Path, flags: OFlag) -> nix::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_IN_ROOT | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    openat2(root.as_raw_fd(), path, how).map(owned)
}

/// Takes ownership of a descriptor an open call just returned.
fn owned(fd: std::os::fd::RawFd) -> OwnedFd {
    // SAFETY: `fd` was just returned by a successful open and is owned by no one else.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absolute_symlinks_resolve_inside_the_root() {
        let root = tempfile::tempdir().expect("temp dir");
        // The container's /dev points at an absolute path: inside its root
        // that is its own (empty) /hostdev, not the host's /dev.
        std::fs::create_dir(root.path().join("hostdev")).expect("mkdir");
        std::os::unix::fs::symlink("/hostdev", root.path().join("dev")).expect("symlink");
        assert!(char_devices_in(root.path(), "dev").is_empty());
        // And a symlink to the host's /dev/null from inside stays inside.
        std::fs::remove_file(root.path().join("dev")).expect("rm");
        std::fs::create_dir(root.path().join("dev")).expect("mkdir");
        std::os::unix::fs::symlink("/dev/null", root.path().join("dev/nvidia0")).expect("symlink");
        assert!(char_devices_in(root.path(), "dev").is_empty());
        // The host's own /dev, seen from "/", has /dev/null.
        let host = char_devices_in(Path::new("/"), "dev");
        assert!(
            host.iter().any(|(p, _)| p == Path::new("/dev/null")),
            "{host:?}"
        );
    }
}
