//! promtool, Prometheus's own checker, from Debian's `prometheus` package:
//! downloaded and unpacked under target/tools, not installed, since the
//! package's postinst would start a Prometheus server on the build machine.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context;

use crate::{run_checked, workspace};

/// Where the tests find it (`GPU_TRACE_PROMTOOL`).
pub const ENV: &str = "GPU_TRACE_PROMTOOL";

/// The unpacked promtool, fetched on first use.
pub fn promtool() -> anyhow::Result<PathBuf> {
    let dir = workspace().join("target/tools/prometheus");
    let binary = dir.join("usr/bin/promtool");
    if runs(&binary) {
        return Ok(binary);
    }
    let downloads = dir.join("deb");
    std::fs::create_dir_all(&downloads)?;
    if download(&downloads).is_err() {
        // A fresh machine has no package lists yet.
        run_checked(Command::new("apt-get").args(["update", "-q"]))?;
        download(&downloads)?;
    }
    let deb = std::fs::read_dir(&downloads)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .context("apt-get download prometheus left no .deb")?;
    run_checked(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&dir))?;
    anyhow::ensure!(runs(&binary), "{} does not run", binary.display());
    Ok(binary)
}

fn download(dir: &Path) -> anyhow::Result<()> {
    run_checked(
        Command::new("apt-get")
            // apt's own _apt user may not write into target/.
            .args(["-o", "APT::Sandbox::User=root"])
            .args(["download", "-q", "prometheus"])
            .current_dir(dir),
    )
}

fn runs(binary: &Path) -> bool {
    Command::new(binary)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}
