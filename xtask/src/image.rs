//! `cargo xtask image`: the container image the DaemonSet runs, made with
//! Debian's docker.io from the statically linked binary alone (no base
//! image: no registry is reachable, and the binary needs no shared
//! library), saved as a tarball that `docker load` and `podman load` read.
//! With `--check`, a private dockerd loads it and runs `selftest` in it with
//! the DaemonSet's privileges.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use anyhow::{ensure, Context};

use crate::{apt_install, run_checked, static_binary, workspace};

/// The Debian docker, not a client some image put earlier on PATH.
const DOCKER: &str = "/usr/bin/docker";

/// The tag, as the DaemonSet names it.
pub fn tag() -> String {
    format!("gpu-trace:{}", env!("CARGO_PKG_VERSION"))
}

/// Where `image` saves it.
fn tarball_path() -> PathBuf {
    workspace()
        .join("target/dist")
        .join(format!("gpu-trace-image-{}.tar", env!("CARGO_PKG_VERSION")))
}

/// The saved image, built again when it is missing or older than the
/// binary it would carry (the lab runs the DaemonSet from it).
pub fn current_tarball() -> anyhow::Result<PathBuf> {
    let binary = static_binary()?;
    let tarball = tarball_path();
    let modified = |path: &Path| fs::metadata(path).and_then(|m| m.modified()).ok();
    match (modified(&tarball), modified(&binary)) {
        (Some(saved), Some(built)) if saved >= built => Ok(tarball),
        _ => image(false),
    }
}

/// Builds the image into a private dockerd and saves it under target/dist;
/// returns the tarball.
pub fn image(check: bool) -> anyhow::Result<PathBuf> {
    apt_install(&["docker.io"])?;
    let binary = static_binary()?;
    let tarball = tarball_path();
    fs::create_dir_all(tarball.parent().expect("target/dist"))?;
    let rootfs = root_filesystem(&binary)?;
    {
        let daemon = Dockerd::start("docker-build")?;
        import(&daemon, &rootfs)?;
        // Renamed into place once whole: an interrupted save leaves no
        // tarball that current_tarball would take for new.
        let partial = tarball.with_extension("tar.partial");
        run_checked(
            daemon
                .docker()
                .args(["save", "--output"])
                .arg(&partial)
                .arg(tag()),
        )?;
        fs::rename(&partial, &tarball)?;
    }
    println!("xtask: built image {} ({})", tag(), tarball.display());
    if check {
        check_image(&tarball)?;
    }
    Ok(tarball)
}

/// The root file system as one layer, with the DaemonSet's entry point and
/// default command.
fn import(daemon: &Dockerd, rootfs: &Path) -> anyhow::Result<()> {
    let mut tar = Command::new("tar")
        .arg("-C")
        .arg(rootfs)
        .args(["--numeric-owner", "-c", "."])
        .stdout(Stdio::piped())
        .spawn()
        .context("starting tar")?;
    let layer = tar.stdout.take().expect("piped");
    let imported = daemon
        .docker()
        .arg("import")
        .args(["--change", r#"ENTRYPOINT ["/usr/bin/gpu-trace"]"#])
        .args(["--change", r#"CMD ["watch", "--format", "json"]"#])
        .args(["--change", "ENV TMPDIR=/tmp"])
        .arg("-")
        .arg(tag())
        .stdin(layer)
        .status()
        .context("docker import")?;
    let packed = tar.wait()?;
    ensure!(
        packed.success(),
        "tar of {} failed: {packed}",
        rootfs.display()
    );
    ensure!(imported.success(), "docker import failed: {imported}");
    Ok(())
}

/// /usr/bin/gpu-trace and an empty /tmp (sticky, as selftest requires).
fn root_filesystem(binary: &Path) -> anyhow::Result<PathBuf> {
    let root = workspace().join("target/image/rootfs");
    if root.exists() {
        fs::remove_dir_all(&root)?;
    }
    fs::create_dir_all(root.join("usr/bin"))?;
    fs::copy(binary, root.join("usr/bin/gpu-trace"))?;
    for (dir, mode) in [
        ("tmp", "1777"),
        ("proc", "555"),
        ("sys", "555"),
        ("dev", "755"),
    ] {
        fs::create_dir_all(root.join(dir))?;
        run_checked(Command::new("chmod").arg(mode).arg(root.join(dir)))?;
    }
    Ok(root)
}

/// Loads the tarball into a fresh private dockerd and runs `selftest` with
/// what the DaemonSet grants: privileged, the host's PID and cgroup
/// namespaces, the host's cgroup tree and /sys.
fn check_image(tarball: &Path) -> anyhow::Result<()> {
    let daemon = Dockerd::start("docker-check")?;
    run_checked(daemon.docker().arg("load").arg("--input").arg(tarball))?;
    let out = daemon
        .docker()
        .args(["run", "--rm"])
        .args(privileged()?)
        .args([
            "--pid=host",
            "--cgroupns=host",
            "--network=none",
            "-v",
            "/sys/fs/cgroup:/sys/fs/cgroup",
            "-v",
            "/sys/kernel/tracing:/sys/kernel/tracing",
            &tag(),
            "selftest",
        ])
        .output()
        .context("docker run")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success() && stdout.lines().any(|l| l.starts_with("PASS")),
        "selftest in the image: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!(
        "xtask: image loads into a fresh dockerd and its selftest PASSes with the DaemonSet's privileges"
    );
    Ok(())
}

/// Capability names by number (linux/capability.h), for `--cap-drop`.
const CAPABILITIES: [&str; 41] = [
    "CHOWN",
    "DAC_OVERRIDE",
    "DAC_READ_SEARCH",
    "FOWNER",
    "FSETID",
    "KILL",
    "SETGID",
    "SETUID",
    "SETPCAP",
    "LINUX_IMMUTABLE",
    "NET_BIND_SERVICE",
    "NET_BROADCAST",
    "NET_ADMIN",
    "NET_RAW",
    "IPC_LOCK",
    "IPC_OWNER",
    "SYS_MODULE",
    "SYS_RAWIO",
    "SYS_CHROOT",
    "SYS_PTRACE",
    "SYS_PACCT",
    "SYS_ADMIN",
    "SYS_BOOT",
    "SYS_NICE",
    "SYS_RESOURCE",
    "SYS_TIME",
    "SYS_TTY_CONFIG",
    "MKNOD",
    "LEASE",
    "AUDIT_WRITE",
    "AUDIT_CONTROL",
    "SETFCAP",
    "MAC_OVERRIDE",
    "MAC_ADMIN",
    "SYSLOG",
    "WAKE_ALARM",
    "BLOCK_SUSPEND",
    "AUDIT_READ",
    "PERFMON",
    "BPF",
    "CHECKPOINT_RESTORE",
];

/// `--privileged`, as the DaemonSet grants; where this machine's root lacks
/// some capability (these build machines have no CAP_SYS_RESOURCE), runc
/// cannot grant it, so the same privileges spelled out, less those.
fn privileged() -> anyhow::Result<Vec<String>> {
    let status = fs::read_to_string("/proc/self/status")?;
    let bounding = status
        .lines()
        .find_map(|l| l.strip_prefix("CapBnd:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .context("reading CapBnd")?;
    let last: usize = fs::read_to_string("/proc/sys/kernel/cap_last_cap")?
        .trim()
        .parse()?;
    let missing: Vec<&str> = CAPABILITIES
        .iter()
        .enumerate()
        .take(last + 1)
        .filter(|(bit, _)| bounding & (1 << bit) == 0)
        .map(|(_, name)| *name)
        .collect();
    if missing.is_empty() {
        return Ok(vec!["--privileged".into()]);
    }
    eprintln!(
        "xtask: root here lacks CAP_{}: the image runs with --privileged's rights spelled out, less that",
        missing.join(", CAP_")
    );
    let mut args: Vec<String> = [
        "--cap-add=ALL",
        "--security-opt=seccomp=unconfined",
        "--security-opt=apparmor=unconfined",
        "--security-opt=systempaths=unconfined",
        "--device-cgroup-rule=a *:* rwm",
    ]
    .map(String::from)
    .into();
    args.extend(missing.iter().map(|c| format!("--cap-drop={c}")));
    Ok(args)
}

/// A dockerd of our own, on its own socket and data directory, with no
/// network set-up (none is needed), stopped on drop.
struct Dockerd {
    child: Child,
    host: String,
}

impl Dockerd {
    /// On an empty data directory under target/image: nothing left from an
    /// earlier run, and for the check, what a node that pulls the image has.
    fn start(name: &str) -> anyhow::Result<Self> {
        let dir = workspace().join("target/image").join(name);
        if dir.exists() {
            fs::remove_dir_all(&dir)
                .with_context(|| format!("{} (a dockerd still running there?)", dir.display()))?;
        }
        fs::create_dir_all(&dir)?;
        let socket = dir.join("docker.sock");
        let host = format!("unix://{}", socket.display());
        let log_path = dir.join("dockerd.log");
        let log = fs::File::create(&log_path)?;
        let child = Command::new("dockerd")
            .arg("--host")
            .arg(&host)
            .arg("--data-root")
            .arg(dir.join("root"))
            .arg("--exec-root")
            .arg(dir.join("exec"))
            .arg("--pidfile")
            .arg(dir.join("dockerd.pid"))
            .args(["--bridge=none", "--iptables=false", "--ip6tables=false"])
            // vfs: works on any file system this machine's target/ may be on.
            .args(["--storage-driver", "vfs"])
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("starting dockerd")?;
        let mut daemon = Self { child, host };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = daemon.child.try_wait()? {
                anyhow::bail!(
                    "dockerd exited ({status}) before answering; see {}",
                    log_path.display()
                );
            }
            let answers = daemon
                .docker()
                .arg("info")
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if answers {
                return Ok(daemon);
            }
            ensure!(
                Instant::now() < deadline,
                "dockerd did not answer within 60 s (see {})",
                log_path.display()
            );
            thread::sleep(Duration::from_millis(200));
        }
    }

    fn docker(&self) -> Command {
        let mut command = Command::new(DOCKER);
        command.arg("--host").arg(&self.host);
        command
    }
}

impl Drop for Dockerd {
    /// SIGTERM, on which dockerd stops its containerd and unmounts; SIGKILL
    /// if it has not gone within 20 s.
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").arg(&pid).status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
