//! Prometheus's own tools from Debian's packages, downloaded and unpacked
//! under target/tools, not installed (their postinst scripts would start
//! servers on the build machine): promtool, which checks the alert rules,
//! the dashboard's queries and a live /metrics; and the Prometheus and
//! Alertmanager servers, between which the kernel tests carry an incident
//! from a denied open to an alert.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context;

use crate::{run_checked, workspace};

/// Where the tests find them.
pub const ENV: &str = "GPU_TRACE_PROMTOOL";
pub const PROMETHEUS_ENV: &str = "GPU_TRACE_PROMETHEUS";
pub const ALERTMANAGER_ENV: &str = "GPU_TRACE_ALERTMANAGER";

/// The unpacked promtool, fetched on first use.
pub fn promtool() -> anyhow::Result<PathBuf> {
    unpacked("prometheus", "usr/bin/promtool")
}

/// The Prometheus server of the same package.
pub fn prometheus() -> anyhow::Result<PathBuf> {
    unpacked("prometheus", "usr/bin/prometheus")
}

pub fn alertmanager() -> anyhow::Result<PathBuf> {
    unpacked("prometheus-alertmanager", "usr/bin/prometheus-alertmanager")
}

/// `binary` (relative to the package's root) of Debian's `package`,
/// downloaded and unpacked under target/tools/PACKAGE once.
fn unpacked(package: &str, binary: &str) -> anyhow::Result<PathBuf> {
    let dir = workspace().join("target/tools").join(package);
    let binary = dir.join(binary);
    if runs(&binary) {
        return Ok(binary);
    }
    let downloads = dir.join("deb");
    std::fs::create_dir_all(&downloads)?;
    if download(package, &downloads).is_err() {
        // A fresh machine has no package lists yet.
        run_checked(Command::new("apt-get").args(["update", "-q"]))?;
        download(package, &downloads)?;
    }
    let deb = std::fs::read_dir(&downloads)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .with_context(|| format!("apt-get download {package} left no .deb"))?;
    run_checked(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&dir))?;
    anyhow::ensure!(runs(&binary), "{} does not run", binary.display());
    Ok(binary)
}

fn download(package: &str, dir: &Path) -> anyhow::Result<()> {
    run_checked(
        Command::new("apt-get")
            // apt's own _apt user may not write into target/.
            .args(["-o", "APT::Sandbox::User=root"])
            .args(["download", "-q", package])
            .current_dir(dir),
    )
}

fn runs(binary: &Path) -> bool {
    Command::new(binary)
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}
