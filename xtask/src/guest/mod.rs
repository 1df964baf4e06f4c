//! The one harness for qemu guests: Debian's kernels (`kernels`), the
//! static binaries and the initramfs they boot (`binaries`, `initramfs`),
//! what their init shares (`init`),
//! the boot itself, watched (`qemu`), and how a run is judged and summed up
//! (`judge`). The vm matrix (vm_test.rs), the field lab (lab.rs) and the
//! guest bench (vm_bench.rs) are recipes on top: their kernels, their
//! image, their steps.

pub(crate) mod binaries;
pub(crate) mod init;
pub(crate) mod initramfs;
pub(crate) mod judge;
pub(crate) mod kernels;
pub(crate) mod qemu;

use std::{path::PathBuf, process::Command};

use crate::workspace;

/// `bash -c script`, failing when any part of a pipeline fails; arguments
/// follow as $1, $2, ...
pub(crate) fn bash(script: &str) -> Command {
    let mut command = Command::new("bash");
    command.args(["-euo", "pipefail", "-c", script, "bash"]);
    command
}

pub(crate) fn vm_dir() -> PathBuf {
    workspace().join("target/vm")
}
