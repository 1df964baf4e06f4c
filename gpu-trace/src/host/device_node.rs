//! Whether a path on the host is a given char device node: a fix may name
//! a node's usual path only where the host's node there has the numbers
//! the kernel saw.

use std::{
    os::unix::fs::{FileTypeExt, MetadataExt},
    path::Path,
};

pub fn is_char_node(path: &Path, major: u32, minor: u32) -> bool {
    // symlink_metadata: a link there is not the node, whatever it points at.
    std::fs::symlink_metadata(path).is_ok_and(|m| {
        m.file_type().is_char_device()
            && libc::major(m.rdev()) == major
            && libc::minor(m.rdev()) == minor
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_char_node_of_those_numbers_counts() {
        // /dev/null is c 1:3 on every Linux host.
        assert!(is_char_node(Path::new("/dev/null"), 1, 3));
        assert!(!is_char_node(Path::new("/dev/null"), 1, 5));
        assert!(!is_char_node(Path::new("/dev"), 1, 3));
        assert!(!is_char_node(Path::new("/nonexistent"), 1, 3));
    }
}
