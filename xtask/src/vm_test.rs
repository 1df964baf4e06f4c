//! `cargo xtask vm-test`: the selftest and the kernel tests inside Debian's own
//! kernels, each booted in qemu with a pure cgroup2 layout as users' hosts have
//! it (Proxmox, Debian, Ubuntu). The build machine's kernel proves little about
//! those: its cgroup layout is hybrid and it refuses fexit.
//!
//! Everything lands under target/vm and is reused: the kernels (one folder per
//! exact package name), the static guest binaries, the initramfs. A second run
//! only boots.

use std::{
    fs,
    os::unix::fs::{symlink, PermissionsExt},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{ensure, Context};
use clap::ValueEnum;

use crate::{
    apt_install, cargo, dpkg_installed,
    qemu_run::{run_qemu, Ending},
    require_root, run_checked, workspace, GUEST_TESTS, STATIC_RUSTFLAGS, STATIC_TARGET,
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
pub(crate) const BUSYBOX: &str = "/bin/busybox";
/// Host tools the kernel tests call whose busybox forms fall short: a test
/// drops to nobody with util-linux's `setpriv --reuid`, and the hostile-name
/// tests paste suggested commands into bash (its not-found handler stubs
/// every program out; busybox's ash has none), and the colour test runs
/// watch on a pseudo-terminal with util-linux's `script`.
const HOST_TOOLS: [&str; 3] = ["/usr/bin/setpriv", "/usr/bin/bash", "/usr/bin/script"];
/// What /init runs, in order; each reports its exit status in the marker line.
const STEPS: [&str; 4] = ["selftest", "selftest-observer", "kernel-tests", "lockdown"];
/// How long one kernel may take from boot to power-off: about 2.5 minutes
/// is usual on 2 cores without KVM.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);
/// The line /init writes to the second serial port once every step has run.
const MARKER: &str = "gpu-trace-vm-result";
/// The only reason a kernel test may skip in the guest: it is pure cgroup2.
pub(crate) const ACCEPTED_SKIP: &str = "no cgroup v1 devices controller";

/// The start of PID 1 in the busybox guests (vm-test's and the bench's):
/// the file systems the kernel tests and gpu-trace need, pure cgroup2.
pub(crate) const GUEST_MOUNTS: &str = r#"export PATH=/bin HOME=/tmp NO_COLOR=1
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
# Pseudo-terminals, for the colour test's `script`.
mkdir -p /dev/pts
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /tmp
# Pure cgroup2, as on Proxmox, Debian and Ubuntu hosts.
mount -t cgroup2 cgroup2 /sys/fs/cgroup
mount -t bpf bpf /sys/fs/bpf
mount -t tracefs tracefs /sys/kernel/tracing
mount -t debugfs debugfs /sys/kernel/debug
# The metrics test serves HTTP on 127.0.0.1.
ip link set lo up
"#;

/// PID 1 of the guest, after GUEST_MOUNTS: gpu-trace/tests/kernel, then
/// gpu-trace/tests/lockdown (the runtimes' tests need LXC and runc, which
/// the initramfs has not; they run natively and in the lab).
const INIT_TEMPLATE: &str = r#"
echo "gpu-trace-vm: kernel $(uname -r)"

result=""
step() {
    name=$1
    shift
    echo "gpu-trace-vm: step $name: $*"
    "$@"
    status=$?
    echo "gpu-trace-vm: step $name exited $status"
    result="$result $name=$status"
}

step selftest gpu-trace selftest
step selftest-observer gpu-trace selftest --hook observer
export GPU_TRACE_BIN=/bin/gpu-trace GPU_TRACE_REQUIRE_KERNEL_TESTS=1 GPU_TRACE_EXPECT_FEXIT=1
export GPU_TRACE_C_PROGRAMS=/bin
# promtool's checks do not depend on the kernel: they run natively only.
export GPU_TRACE_PROMTOOL=native-only
step kernel-tests kernel-tests --test-threads=1 --nocapture

# Last, since lockdown cannot be lowered: the kernel in confidentiality
# lockdown, and the tests for it, which must run (not pass by matching none).
lockdown_tests() {
    mount -t securityfs securityfs /sys/kernel/security || return 1
    echo confidentiality >/sys/kernel/security/lockdown || return 1
    GPU_TRACE_EXPECT_LOCKDOWN=1 lockdown-tests --test-threads=1 --nocapture >/tmp/lockdown.log 2>&1
    status=$?
    cat /tmp/lockdown.log
    [ $status -eq 0 ] && grep -q "test result: ok. [1-9]" /tmp/lockdown.log
}
step lockdown lockdown_tests

echo "gpu-trace-vm-result$result" >/dev/ttyS1
poweroff -f
"#;

/// Installs qemu, fetches the kernels, builds the guest and boots each kernel
/// in turn (all three when `series` is empty); fails when any kernel failed.
pub fn vm_test(series: &[Series], timeout: Duration) -> anyhow::Result<()> {
    let series = if series.is_empty() {
        Series::value_variants()
    } else {
        series
    };
    apt_install(&["busybox-static"])?;
    install_qemu()?;

    let started = Instant::now();
    let kernels = series
        .iter()
        .map(|&s| Ok((s, kernel_image(s)?)))
        .collect::<anyhow::Result<Vec<_>>>()?;
    eprintln!(
        "xtask: kernels ready in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let started = Instant::now();
    let binaries = build_guest_binaries()?;
    let initramfs = pack_initramfs(&binaries)?;
    eprintln!(
        "xtask: guest binaries and initramfs ready in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    // One guest at a time, with 2 vCPUs: 1-vCPU guests side by side finish
    // sooner on 2 cores, but starve watch's writer enough to fail timing tests.
    let outcomes = kernels
        .iter()
        .map(|(s, vmlinuz)| boot(*s, vmlinuz, &initramfs, timeout))
        .collect::<anyhow::Result<Vec<_>>>()?;
    print_summary(&outcomes);
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|o| !o.problems.is_empty())
        .map(|o| o.series.name())
        .collect();
    ensure!(failed.is_empty(), "vm-test failed on {}", failed.join(", "));
    Ok(())
}

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

/// `bash -c script`, failing when any part of a pipeline fails; arguments
/// follow as $1, $2, ...
pub(crate) fn bash(script: &str) -> Command {
    let mut command = Command::new("bash");
    command.args(["-euo", "pipefail", "-c", script, "bash"]);
    command
}

pub(crate) struct GuestBinaries {
    pub gpu_trace: PathBuf,
    /// gpu-trace/tests/kernel, lockdown and lab.
    pub kernel_tests: PathBuf,
    pub lockdown_tests: PathBuf,
    pub lab_tests: PathBuf,
    /// The kernel tests' C programs (GPU_TRACE_C_PROGRAMS), by file name.
    pub c_programs: Vec<PathBuf>,
}

/// The kernel tests' C programs (tests/kernel/NAME.c) and their flags.
const KERNEL_TEST_C_PROGRAMS: [(&str, &[&str]); 2] = [("open32", &["-m32"]), ("uring_open", &[])];

/// gpu-trace, the kernel-test binary and the tests' C programs, linked
/// statically for the guest.
pub(crate) fn build_guest_binaries() -> anyhow::Result<GuestBinaries> {
    let messages = build_static(&GUEST_TESTS)?;
    apt_install(&["gcc-multilib"])?;
    Ok(GuestBinaries {
        gpu_trace: cargo_executable(&messages, "bin", "gpu-trace")?,
        kernel_tests: cargo_executable(&messages, "test", "kernel")?,
        lockdown_tests: cargo_executable(&messages, "test", "lockdown")?,
        lab_tests: cargo_executable(&messages, "test", "lab")?,
        c_programs: KERNEL_TEST_C_PROGRAMS
            .iter()
            .map(|(name, flags)| {
                static_c_program(
                    &format!("gpu-trace/tests/kernel/{name}.c"),
                    &vm_dir().join("c-programs").join(name),
                    flags,
                )
            })
            .collect::<anyhow::Result<_>>()?,
    })
}

/// A C program of the workspace (`source`, relative to it) linked
/// statically to `binary`, again only when the source changed: the guests
/// have no compiler.
pub(crate) fn static_c_program(
    source: &str,
    binary: &Path,
    flags: &[&str],
) -> anyhow::Result<PathBuf> {
    let source = workspace().join(source);
    if !newer_than_all(binary, &[&source])? {
        if let Some(dir) = binary.parent() {
            fs::create_dir_all(dir)?;
        }
        run_checked(
            Command::new("cc")
                .args(flags)
                .args(["-O2", "-static", "-o"])
                .arg(binary)
                .arg(&source),
        )?;
    }
    Ok(binary.to_path_buf())
}

/// Runs `cargo ARGS --no-run` for the static target (the guests have no
/// libc) and returns cargo's JSON messages.
pub(crate) fn build_static(args: &[&str]) -> anyhow::Result<String> {
    let mut command = Command::new(cargo());
    command
        .args(args)
        .arg("--no-run")
        .args([
            "--message-format=json-render-diagnostics",
            "--target",
            STATIC_TARGET,
        ])
        .env("RUSTFLAGS", STATIC_RUSTFLAGS)
        .stderr(Stdio::inherit());
    let output = command.output().context("running cargo --no-run")?;
    ensure!(
        output.status.success(),
        "{command:?} failed: {}",
        output.status
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The executable cargo built for the target `name` of `kind` (bin, test,
/// bench), from its `--message-format=json` output.
pub(crate) fn cargo_executable(messages: &str, kind: &str, name: &str) -> anyhow::Result<PathBuf> {
    messages
        .lines()
        .filter(|l| l.contains(&format!(r#""kind":["{kind}"]"#)))
        .filter(|l| json_string(l, "name") == Some(name))
        .find_map(|l| json_string(l, "executable"))
        .map(PathBuf::from)
        .with_context(|| format!("cargo reported no executable for the {kind} {name}"))
}

/// The string value of `key` in one of cargo's JSON messages. Enough for the
/// target name and executable path; it does not unescape.
fn json_string<'a>(message: &'a str, key: &str) -> Option<&'a str> {
    let start = message.find(&format!(r#""{key}":""#))? + key.len() + 4;
    let len = message[start..].find('"')?;
    Some(&message[start..start + len])
}

/// A gzip'd newc initramfs: busybox and its applets, the two binaries and
/// /init. Packed again only when one of them changed.
fn pack_initramfs(binaries: &GuestBinaries) -> anyhow::Result<PathBuf> {
    let initramfs = vm_dir().join("initramfs.cpio.gz");
    let init = vm_dir().join("init");
    let script = format!(
        "#!/bin/sh\n# PID 1 of the gpu-trace vm-test guest, written by xtask/src/vm_test.rs.\n{GUEST_MOUNTS}{INIT_TEMPLATE}"
    );
    write_if_changed(&init, &script)?;
    // This program too: how it packs may have changed.
    let xtask = std::env::current_exe().context("finding xtask's own binary")?;
    let mut inputs = vec![
        Path::new(BUSYBOX),
        &binaries.gpu_trace,
        &binaries.kernel_tests,
        &binaries.lockdown_tests,
        &init,
        &xtask,
    ];
    inputs.extend(binaries.c_programs.iter().map(PathBuf::as_path));
    inputs.extend(HOST_TOOLS.map(Path::new));
    if newer_than_all(&initramfs, &inputs)? {
        return Ok(initramfs);
    }
    let root = vm_dir().join("initramfs");
    fresh_root(&root, &["bin", "dev", "proc", "sys", "tmp"])?;
    install_busybox(&root)?;
    for tool in HOST_TOOLS {
        copy_with_libraries(Path::new(tool), &root)?;
    }
    fs::copy(&binaries.gpu_trace, root.join("bin/gpu-trace"))?;
    fs::copy(&binaries.kernel_tests, root.join("bin/kernel-tests"))?;
    fs::copy(&binaries.lockdown_tests, root.join("bin/lockdown-tests"))?;
    for program in &binaries.c_programs {
        let name = program.file_name().context("a C program's file name")?;
        fs::copy(program, root.join("bin").join(name))?;
    }
    pack_initramfs_tree(&root, &init, &initramfs)?;
    Ok(initramfs)
}

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

/// What one boot showed.
struct Outcome {
    series: Series,
    uname: String,
    seconds: f64,
    test_result: Option<String>,
    /// The selftests' lines about hooks and where verdicts come from.
    hook_lines: Vec<String>,
    /// Why the kernel failed; empty when it passed.
    problems: Vec<String>,
}

/// Boots `vmlinuz` with the initramfs, streams and keeps the console, and judges it.
fn boot(
    series: Series,
    vmlinuz: &Path,
    initramfs: &Path,
    timeout: Duration,
) -> anyhow::Result<Outcome> {
    let run = boot_guest(
        &vm_dir().join(series.name()),
        &format!("[{}] ", series.name()),
        vmlinuz,
        initramfs,
        timeout,
    )?;
    let mut outcome = judge(series, &run.console, &run.result, run.seconds);
    if let Some(problem) = run.ending.problem() {
        outcome.problems.insert(0, problem);
    }
    if !outcome.problems.is_empty() {
        print_console_tail(&run.console, &run.console_log);
    }
    Ok(outcome)
}

/// What one boot of a busybox guest left.
pub(crate) struct GuestRun {
    /// Everything on the first serial port.
    pub console: String,
    pub console_log: PathBuf,
    /// What /init wrote to the second serial port.
    pub result: String,
    pub ending: Ending,
    pub seconds: f64,
}

/// Boots `vmlinuz` with `initramfs` until it powers off (killed after
/// `timeout`, booted once more if stuck in the emulator), echoing the console
/// with `prefix` and keeping it in `dir`.
pub(crate) fn boot_guest(
    dir: &Path,
    prefix: &str,
    vmlinuz: &Path,
    initramfs: &Path,
    timeout: Duration,
) -> anyhow::Result<GuestRun> {
    fs::create_dir_all(dir)?;
    let console_log = dir.join("console.log");
    let result_file = dir.join("result");
    eprintln!(
        "xtask: booting {}, console in {}",
        vmlinuz.display(),
        console_log.display()
    );
    let run = run_qemu(
        || qemu(vmlinuz, initramfs, &result_file),
        &result_file,
        &console_log,
        prefix,
        timeout,
    )?;
    Ok(GuestRun {
        console: run.console,
        console_log,
        result: fs::read_to_string(&result_file).unwrap_or_default(),
        ending: run.ending,
        seconds: run.seconds,
    })
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

fn qemu(vmlinuz: &Path, initramfs: &Path, result_file: &Path) -> Command {
    let (accel, cpu) = if kvm_usable() {
        ("kvm", "host")
    } else {
        ("tcg", "max")
    };
    let mut command = Command::new("qemu-system-x86_64");
    command
        .args(["-accel", accel, "-cpu", cpu, "-m", "1G", "-smp", "2"])
        .args(["-nographic", "-monitor", "none", "-no-reboot"])
        .arg("-kernel")
        .arg(vmlinuz)
        .arg("-initrd")
        .arg(initramfs)
        // panic=-1 with -no-reboot: a panicking guest ends qemu at once.
        .args(["-append", "console=ttyS0 panic=-1"])
        .args(["-serial", "stdio", "-serial"])
        .arg(format!("file:{}", result_file.display()));
    command
}

/// KVM only where it works: this kind of build machine has a /dev/kvm, yet a
/// guest hangs on it; the CPU flags tell the two apart.
pub(crate) fn kvm_usable() -> bool {
    let opens = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    opens
        && fs::read_to_string("/proc/cpuinfo")
            .is_ok_and(|c| c.split_whitespace().any(|w| w == "vmx" || w == "svm"))
}

/// A kernel passes when /init reported, every step exited 0, and nothing
/// skipped for a reason other than the missing cgroup v1 controller.
fn judge(series: Series, console: &str, marker: &str, seconds: f64) -> Outcome {
    let mut problems = step_problems(marker, MARKER, &STEPS);
    problems.extend(kernel_complaints(console));
    let lines: Vec<&str> = console.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if let Some(skip) = skip_notice(line).filter(|s| !s.contains(ACCEPTED_SKIP)) {
            problems.push(format!("unexpected skip: {skip}"));
        }
        if line.contains("panicked at") {
            let message = lines.get(i + 1).unwrap_or(&"");
            problems.push(format!("{line} {message}"));
        }
    }
    Outcome {
        series,
        uname: lines
            .iter()
            .find_map(|l| l.strip_prefix("gpu-trace-vm: kernel "))
            .unwrap_or("(unknown)")
            .to_string(),
        seconds,
        test_result: lines
            .iter()
            .find_map(|l| l.strip_prefix("test result: "))
            .map(str::to_owned),
        hook_lines: selftest_hook_lines(&lines),
        problems,
    }
}

/// What the guest's result line (`PREFIX step=status ...`, from its second
/// serial port) says went wrong: no line at all, or a step that failed or
/// never reported.
pub(crate) fn step_problems(marker: &str, prefix: &str, steps: &[&str]) -> Vec<String> {
    let Some(statuses) = marker.lines().find_map(|l| l.trim().strip_prefix(prefix)) else {
        return vec!["the guest reported no result (boot failure, panic or hang)".into()];
    };
    steps
        .iter()
        .filter_map(|step| {
            let status = statuses
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(step)?.strip_prefix('='));
            match status {
                Some("0") => None,
                Some(code) => Some(format!("{step} exited {code}")),
                None => Some(format!("{step} did not report")),
            }
        })
        .collect()
}

/// The kernel's own complaints on the console: a WARN or a BUG while our
/// programs were loaded and run (the verifier warns about maps unfit for
/// tracing programs, for one) fails the kernel, whatever the tests said.
pub(crate) fn kernel_complaints(console: &str) -> Vec<String> {
    let lines: Vec<&str> = console.lines().collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, l)| l.contains("------------[ cut here ]------------") || l.contains("BUG: "))
        .map(|(i, l)| {
            let what = lines.get(i + 1).copied().unwrap_or_default();
            format!("the kernel complained: {} {}", l.trim(), what.trim())
        })
        .collect()
}

/// "skipping <test>: <reason>" as a kernel test prints it; with --nocapture it
/// may follow libtest's "test <name> ... " on the same line.
pub(crate) fn skip_notice(line: &str) -> Option<&str> {
    let line = line.trim();
    let text = match line.split_once(" ... ") {
        Some((head, tail)) if head.starts_with("test ") => tail,
        _ => line,
    };
    text.starts_with("skipping ").then_some(text)
}

/// Lines of the two selftest steps that mention hooks or verdicts, each
/// tagged with its step.
fn selftest_hook_lines(lines: &[&str]) -> Vec<String> {
    let mut step = None;
    let mut found = Vec::new();
    for line in lines {
        if let Some(rest) = line.strip_prefix("gpu-trace-vm: step ") {
            step = rest
                .split_once(':')
                .map(|(name, _)| name.to_string())
                .filter(|name| name.starts_with("selftest"));
            continue;
        }
        let lower = line.to_lowercase();
        if let Some(step) = &step {
            if lower.contains("hook") || lower.contains("verdict") {
                found.push(format!("{step}: {}", line.trim()));
            }
        }
    }
    found
}

pub(crate) fn print_console_tail(console: &str, log: &Path) {
    const TAIL: usize = 40;
    let lines: Vec<&str> = console.lines().collect();
    eprintln!(
        "xtask: the last {TAIL} console lines (all of them in {}):",
        log.display()
    );
    for line in &lines[lines.len().saturating_sub(TAIL)..] {
        eprintln!("    {line}");
    }
}

fn print_summary(outcomes: &[Outcome]) {
    // A kernel that fails everything would bury the table; its console.log has the rest.
    const SHOWN_PROBLEMS: usize = 8;
    println!();
    println!("vm-test summary");
    println!(
        "  {:<6} {:<26} {:<6} {:>7}  tests",
        "series", "kernel", "result", "seconds"
    );
    for o in outcomes {
        println!(
            "  {:<6} {:<26} {:<6} {:>7.0}  {}",
            o.series.name(),
            o.uname,
            if o.problems.is_empty() {
                "PASS"
            } else {
                "FAIL"
            },
            o.seconds,
            o.test_result.as_deref().unwrap_or("(no test result)")
        );
        for line in &o.hook_lines {
            println!("         {line}");
        }
        for problem in o.problems.iter().take(SHOWN_PROBLEMS) {
            println!("         problem: {problem}");
        }
        let hidden = o.problems.len().saturating_sub(SHOWN_PROBLEMS);
        if hidden > 0 {
            println!(
                "         ... and {hidden} more in {}",
                vm_dir().join(o.series.name()).join("console.log").display()
            );
        }
    }
}

pub(crate) fn vm_dir() -> PathBuf {
    workspace().join("target/vm")
}
