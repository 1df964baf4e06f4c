//! A cgroup directory opened by its id, as a file handle: names one cgroup
//! without walking the tree or keeping every path on the host.
//!
//! cgroup2 and each v1 hierarchy (kernfs) take a 64-bit id as an NFS-style
//! file handle of type FILEID_KERNFS; `open_by_handle_at`
//! (CAP_DAC_READ_SEARCH) opens the directory and /proc/self/fd names it.

use std::{
    fs::File,
    io,
    os::fd::{AsRawFd, FromRawFd, OwnedFd},
    path::{Path, PathBuf},
};

/// `FILEID_KERNFS` in include/linux/exportfs.h.
const FILEID_KERNFS: i32 = 0xfe;

/// Opens cgroup directories by id under one mount (cgroup2, or a v1 hierarchy).
pub struct CgroupHandles {
    mount_fd: File,
    mount: PathBuf,
}

/// What opening a cgroup by id found.
#[derive(Debug, PartialEq, Eq)]
pub enum ById {
    /// Its path relative to the mount, starting with '/'.
    Path(PathBuf),
    /// No such cgroup now: removed, or never made.
    Gone,
    /// It exists but cannot be named here (outside the mount as this mount
    /// namespace sees it, or a path longer than the kernel will print).
    Unnamed,
}

impl CgroupHandles {
    /// Handles for cgroups under `mount`, if the kernel opens them for us:
    /// tried on the mount's own id, so a host that refuses is known at once.
    pub fn open(mount: &Path) -> io::Result<Self> {
        let mount_fd = File::open(mount)?;
        let handles = Self {
            mount_fd,
            mount: mount.to_path_buf(),
        };
        let root = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(mount)?);
        handles.open_id(root)?;
        Ok(handles)
    }

    /// The cgroup with id `id`.
    pub fn path_of(&self, id: u64) -> ById {
        let fd = match self.open_id(id) {
            Ok(fd) => fd,
            Err(e) if gone(&e) => return ById::Gone,
            Err(_) => return ById::Unnamed,
        };
        let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let Ok(absolute) = std::fs::read_link(link) else {
            return ById::Unnamed;
        };
        match absolute.strip_prefix(&self.mount) {
            Ok(relative) => ById::Path(Path::new("/").join(relative)),
            Err(_) => ById::Unnamed,
        }
    }

    /// Whether cgroup `id` exists now.
    pub fn exists(&self, id: u64) -> bool {
        !matches!(self.open_id(id), Err(e) if gone(&e))
    }

    fn open_id(&self, id: u64) -> io::Result<OwnedFd> {
        #[repr(C)]
        struct KernfsHandle {
            handle_bytes: u32,
            handle_type: i32,
            id: u64,
        }
        let mut handle = KernfsHandle {
            handle_bytes: 8,
            handle_type: FILEID_KERNFS,
            id,
        };
        // SAFETY: KernfsHandle has struct file_handle's layout with its
        // 8-byte f_handle inline, and lives across the call; a returned fd
        // is new and ours alone.
        let fd = unsafe {
            libc::open_by_handle_at(
                self.mount_fd.as_raw_fd(),
                (&mut handle as *mut KernfsHandle).cast::<libc::file_handle>(),
                libc::O_PATH | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: fd was just returned open by the kernel.
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// The kernel's answers for an id with no cgroup behind it.
fn gone(error: &io::Error) -> bool {
    matches!(
        error.raw_os_error(),
        Some(libc::ESTALE | libc::ENOENT | libc::ENODEV)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_nobody_made_is_gone_not_an_error() {
        assert!(gone(&io::Error::from_raw_os_error(libc::ESTALE)));
        assert!(!gone(&io::Error::from_raw_os_error(libc::EPERM)));
    }
}
