//! Debian's kernels for the guests, fetched with apt into target/vm and
//! never installed on the host; qemu from bookworm-backports.

use std::{
    fs,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context;
use clap::ValueEnum;

use crate::{
    dpkg_installed,
    guest::{bash, vm_dir},
    require_root, run_checked,
};

/// A kernel series of the matrix, as `--kernel` names it.
#[derive(Clone, Copy, ValueEnum)]
pub enum Series {
    #[value(name = "5.10")]
    Linux5_10,
    #[value(name = "6.1")]
    Linux6_1,
    #[value(name = "6.12")]
    Linux6_12,
}

impl Series {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Series::Linux5_10 => "5.10",
            Series::Linux6_1 => "6.1",
            Series::Linux6_12 => "6.12",
        }
    }

    /// The Debian package that depends on the newest image of the series;
    /// the exact image is resolved at run time, so no ABI number lives here.
    fn meta_package(self) -> &'static str {
        match self {
            Series::Linux5_10 | Series::Linux6_1 => "linux-image-amd64",
            Series::Linux6_12 => "linux-image-6.12-amd64",
        }
    }

    /// 5.10 is bullseye's kernel, which the system's apt must not learn about.
    pub(crate) fn apt(self) -> anyhow::Result<Apt> {
        match self {
            Series::Linux5_10 => Apt::bullseye(),
            Series::Linux6_1 | Series::Linux6_12 => Ok(Apt::system()),
        }
    }
}

pub(crate) const ARCHIVE_KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
const BACKPORTS_SOURCES: &str = "/etc/apt/sources.list.d/bookworm-backports.sources";

/// qemu from bookworm-backports: the machine's qemu-utils 10.0 comes from
/// there and breaks bookworm's own qemu-system 7.2.
pub(crate) fn install_qemu() -> anyhow::Result<()> {
    if dpkg_installed("qemu-system-x86") {
        return Ok(());
    }
    require_root("installing qemu-system-x86")?;
    if !backports_configured() {
        fs::write(
            BACKPORTS_SOURCES,
            format!(
                "Types: deb\nURIs: http://deb.debian.org/debian\nSuites: bookworm-backports\n\
                 Components: main\nSigned-By: {ARCHIVE_KEYRING}\n"
            ),
        )
        .with_context(|| format!("writing {BACKPORTS_SOURCES}"))?;
    }
    eprintln!("xtask: installing qemu-system-x86 from bookworm-backports");
    run_checked(Command::new("apt-get").args(["update", "-q"]))?;
    run_checked(
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(["-t", "bookworm-backports", "qemu-system-x86"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

/// Whether one of apt's source files already names bookworm-backports.
fn backports_configured() -> bool {
    let mut files = vec![PathBuf::from("/etc/apt/sources.list")];
    if let Ok(entries) = fs::read_dir("/etc/apt/sources.list.d") {
        files.extend(entries.flatten().map(|e| e.path()).filter(|p| {
            p.extension()
                .is_some_and(|ext| ext == "list" || ext == "sources")
        }));
    }
    files.iter().any(|file| {
        fs::read_to_string(file).is_ok_and(|text| {
            text.lines()
                .any(|l| !l.trim_start().starts_with('#') && l.contains("bookworm-backports"))
        })
    })
}

/// apt-get and apt-cache, as the system has them or with a private
/// configuration of their own.
pub(crate) struct Apt {
    options: Vec<String>,
}

impl Apt {
    pub(crate) fn system() -> Self {
        Self {
            options: Vec::new(),
        }
    }

    /// bullseye's sources, lists and cache under target/vm/apt-bullseye; the
    /// system's apt state is never touched.
    fn bullseye() -> anyhow::Result<Self> {
        let root = vm_dir().join("apt-bullseye");
        let sources = root.join("sources.list");
        let parts = root.join("sources.list.d");
        let lists = root.join("lists");
        let cache = root.join("cache");
        for dir in [
            &parts,
            &lists.join("partial"),
            &cache.join("archives/partial"),
        ] {
            fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        fs::write(
            &sources,
            format!(
                "deb [signed-by={ARCHIVE_KEYRING}] http://deb.debian.org/debian bullseye main\n"
            ),
        )?;
        let options = [
            ("Dir::Etc::SourceList", &sources),
            ("Dir::Etc::SourceParts", &parts),
            ("Dir::State::Lists", &lists),
            ("Dir::Cache", &cache),
        ]
        .iter()
        .map(|(key, path)| format!("{key}={}", path.display()))
        .collect();
        Ok(Self { options })
    }

    pub(crate) fn command(&self, tool: &str) -> Command {
        let mut command = Command::new(tool);
        for option in &self.options {
            command.args(["-o", option]);
        }
        command
    }

    pub(crate) fn update(&self) -> anyhow::Result<()> {
        if self.options.is_empty() {
            require_root("refreshing apt's package lists")?;
        }
        run_checked(self.command("apt-get").args(["update", "-q"]))
    }

    /// The linux-image package `meta` depends on, e.g. linux-image-6.1.0-57-amd64.
    pub(crate) fn image_behind(&self, meta: &str) -> anyhow::Result<String> {
        let out = self
            .command("apt-cache")
            .args(["depends", meta])
            .output()
            .context("running apt-cache")?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .find_map(|l| l.trim().strip_prefix("Depends: linux-image-"))
            .map(|rest| format!("linux-image-{rest}"))
            .with_context(|| format!("apt-cache depends {meta} names no linux-image package"))
    }

    /// Downloads `package` into `dir` without installing it; returns the .deb.
    pub(crate) fn download(&self, package: &str, dir: &Path) -> anyhow::Result<PathBuf> {
        run_checked(
            self.command("apt-get")
                // apt's own _apt user may not write into target/; the caller may.
                .args(["-o", "APT::Sandbox::User=root"])
                .args(["download", "-q", package])
                .current_dir(dir),
        )?;
        find_file(dir, &format!("{package}_"))
    }
}

/// Debian's vmlinuz for `series`, downloaded and unpacked once per exact package.
pub(crate) fn kernel_image(series: Series) -> anyhow::Result<PathBuf> {
    find_file(&kernel_package(series)?.join("boot"), "vmlinuz-")
}

/// The unpacked kernel package of `series`: boot/ and lib/modules/.
pub(crate) fn kernel_package(series: Series) -> anyhow::Result<PathBuf> {
    let apt = series.apt()?;
    cached_or_fetched(&apt, series.meta_package()).or_else(|e| {
        // Lists that are missing (bullseye's, on a first run) or stale (the mirror moved on).
        eprintln!("xtask: {e:#}; refreshing the package lists and trying again");
        apt.update()?;
        cached_or_fetched(&apt, series.meta_package())
    })
}

fn cached_or_fetched(apt: &Apt, meta: &str) -> anyhow::Result<PathBuf> {
    let package = apt.image_behind(meta)?;
    let dir = vm_dir().join("kernels").join(&package);
    // The modules came later (the field lab loads them): a folder without
    // them is from an older xtask.
    if dir.exists() && !dir.join("lib/modules").exists() {
        fs::remove_dir_all(&dir)?;
    }
    if !dir.exists() {
        eprintln!("xtask: downloading {package}");
        // Unpacked aside and renamed, so an interrupted run leaves no half kernel behind.
        let partial = dir.with_file_name(format!("{package}.partial"));
        if partial.exists() {
            fs::remove_dir_all(&partial)?;
        }
        fs::create_dir_all(&partial)?;
        let deb = apt.download(&package, &partial)?;
        run_checked(
            bash(r#"dpkg-deb --fsys-tarfile "$1" | tar -x ./boot ./lib/modules"#)
                .arg(&deb)
                .current_dir(&partial),
        )?;
        fs::remove_file(&deb)?;
        fs::rename(&partial, &dir)?;
    }
    Ok(dir)
}

/// The one file in `dir` whose name starts with `prefix`.
pub(crate) fn find_file(dir: &Path, prefix: &str) -> anyhow::Result<PathBuf> {
    fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(prefix))
        })
        .with_context(|| format!("no {prefix}* in {}", dir.display()))
}
