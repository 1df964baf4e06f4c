//! What a busybox guest boots from: PID 1's mounts, busybox and its
//! applets, host tools with their libraries, packed as an initramfs only
//! when an input changed.

use std::{
    fs,
    os::unix::fs::{symlink, PermissionsExt},
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{ensure, Context};

use crate::{guest::bash, run_checked};

/// The host's static busybox, every guest's shell and tools.
pub(crate) const BUSYBOX: &str = "/bin/busybox";

/// Copies a dynamically linked host tool into the guest's /bin, with the
/// libraries and loader `ldd` names at their own paths.
pub(crate) fn copy_with_libraries(tool: &Path, root: &Path) -> anyhow::Result<()> {
    let out = Command::new("ldd")
        .arg(tool)
        .output()
        .context("running ldd")?;
    ensure!(out.status.success(), "ldd {} failed", tool.display());
    let libraries: Vec<PathBuf> = String::from_utf8_lossy(&out.stdout)
        .lines()
        // "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" or "/lib64/ld-linux-x86-64.so.2 (0x...)"
        .filter_map(|l| l.rsplit("=> ").next()?.split_whitespace().next())
        .filter(|path| path.starts_with('/'))
        .map(PathBuf::from)
        .collect();
    for library in &libraries {
        let copy = root.join(library.strip_prefix("/")?);
        fs::create_dir_all(copy.parent().expect("a library in a folder"))?;
        fs::copy(library, &copy).with_context(|| format!("copying {}", library.display()))?;
    }
    let name = tool.file_name().context("a tool's file name")?;
    let copy = root.join("bin").join(name);
    // It replaces busybox's applet of the same name.
    if copy.symlink_metadata().is_ok() {
        fs::remove_file(&copy)?;
    }
    fs::copy(tool, &copy).with_context(|| format!("copying {}", tool.display()))?;
    Ok(())
}

/// Leaves the file (and its mtime, which the initramfs cache goes by) alone
/// when it already holds `text`.
pub(crate) fn write_if_changed(path: &Path, text: &str) -> anyhow::Result<()> {
    if fs::read_to_string(path).is_ok_and(|old| old == text) {
        return Ok(());
    }
    fs::create_dir_all(path.parent().expect("a file in a folder"))?;
    fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

pub(crate) fn newer_than_all(output: &Path, inputs: &[&Path]) -> anyhow::Result<bool> {
    let Ok(built) = fs::metadata(output).and_then(|m| m.modified()) else {
        return Ok(false);
    };
    for input in inputs {
        let changed = fs::metadata(input)
            .and_then(|m| m.modified())
            .with_context(|| format!("reading {}", input.display()))?;
        if changed >= built {
            return Ok(false);
        }
    }
    Ok(true)
}

/// busybox in `root`/bin, with a link for each of its applets.
pub(crate) fn install_busybox(root: &Path) -> anyhow::Result<()> {
    fs::copy(BUSYBOX, root.join("bin/busybox"))?;
    for applet in busybox_applets()? {
        if applet != "busybox" {
            symlink("busybox", root.join("bin").join(applet))?;
        }
    }
    Ok(())
}

/// `init` as /init of the tree at `root`, all of it packed (gzip'd newc) to
/// `output`, which appears only once whole.
pub(crate) fn pack_initramfs_tree(root: &Path, init: &Path, output: &Path) -> anyhow::Result<()> {
    fs::copy(init, root.join("init"))?;
    fs::set_permissions(root.join("init"), fs::Permissions::from_mode(0o755))?;
    let partial = output.with_extension("partial");
    run_checked(
        bash(r#"find . | busybox cpio -o -H newc --quiet | gzip -1 >"$1""#)
            .arg(&partial)
            .current_dir(root),
    )?;
    fs::rename(&partial, output)?;
    Ok(())
}

fn busybox_applets() -> anyhow::Result<Vec<String>> {
    let out = Command::new(BUSYBOX)
        .arg("--list")
        .output()
        .context("running busybox --list")?;
    ensure!(out.status.success(), "busybox --list failed");
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect())
}

/// An empty initramfs tree at `root` with these top folders.
pub(crate) fn fresh_root(root: &Path, folders: &[&str]) -> anyhow::Result<()> {
    if root.exists() {
        fs::remove_dir_all(root)?;
    }
    for folder in folders {
        fs::create_dir_all(root.join(folder))?;
    }
    Ok(())
}
