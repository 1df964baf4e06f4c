//! Walking a cgroup hierarchy as directories.

use std::{
    fs,
    path::{Path, PathBuf},
};

/// The directories in `dir` (none if it cannot be read): a cgroup's children.
pub fn subdirectories(dir: &Path) -> impl Iterator<Item = PathBuf> {
    fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
        .map(|e| e.path())
}
