//! `cargo xtask lab`: the field lab. Device policies as the field has them,
//! written by systemd, dockerd + runc and podman + crun, against a stand-in
//! GPU driver module, inside Debian's own kernels booted in qemu with
//! systemd as PID 1.
//!
//! Built from Debian's packages and cached under target/lab: the root
//! filesystem (debootstrap), the kernel headers (unpacked, never installed
//! on the host), the module per kernel, one disk image. What changes with
//! each build (gpu-trace, the test binary, the module, the guest's script)
//! travels on a second, small disk, so a rebuild costs seconds. The root
//! disk is opened with `-snapshot`: every boot starts from the same state.

use std::{
    fs,
    os::unix::fs::{symlink, PermissionsExt},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, ensure, Context};

use crate::{
    apt_install,
    guest::{
        bash,
        binaries::{build_guest_binaries, GuestBinaries},
        init::step_functions,
        initramfs::{fresh_root, install_busybox, pack_initramfs_tree, write_if_changed},
        judge::{judge, print_console_tail, print_summary, Init, Outcome},
        kernels::{install_qemu, kernel_package, Apt, Series},
        qemu::{GuestRun, Machine},
    },
    require_root, run_checked, workspace,
};

/// The kernels the lab boots: bookworm's own and its newer 6.12. Both run
/// systemd 252 with a pure cgroup2 layout.
pub const LAB_SERIES: [Series; 2] = [Series::Linux6_1, Series::Linux6_12];
/// The lab's kernel in `cargo xtask test`: one is enough there, since what
/// the lab adds is runtimes writing policies, the same on either kernel;
/// the kernel's side runs on all three in the matrix. The newer of the two,
/// and the quicker to boot and test under emulation (about 8 minutes less
/// than both).
pub const TEST_SERIES: [Series; 1] = [Series::Linux6_12];
/// Boot, systemd, dockerd and every scenario: about 5 minutes under TCG.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1200);
const MIRROR: &str = "http://deb.debian.org/debian";
/// What the guest needs besides debootstrap's minimal base. apparmor: Debian's
/// kernels enable it and dockerd refuses to run containers without its
/// parser; containernetworking-plugins: podman's network stack, which
/// debootstrap does not pick for the virtual package podman asks for;
/// ibverbs-utils and ibverbs-providers: a real verbs client (ibv_devinfo)
/// and the Soft-RoCE provider it needs, for the RDMA scene.
const GUEST_PACKAGES: [&str; 14] = [
    "systemd-sysv",
    "udev",
    "dbus",
    "docker.io",
    "podman",
    "crun",
    "lxc",
    "busybox-static",
    "kmod",
    "iproute2",
    "containernetworking-plugins",
    "apparmor",
    "ibverbs-utils",
    "ibverbs-providers",
];
/// Bumped when the guest's configuration below changes, so a cached root
/// filesystem is configured again.
const ROOTFS_VERSION: &str = "2";
/// Units that only slow the boot down or fight over the serial console.
const MASKED_UNITS: [&str; 12] = [
    "getty@tty1.service",
    "serial-getty@ttyS0.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "podman-auto-update.timer",
    "podman-restart.service",
    "apparmor.service",
    "e2scrub_reap.service",
    "fstrim.timer",
    "systemd-timesyncd.service",
    "lxc-net.service",
    "lxc.service",
];
/// The driver module folders the guest never loads: graphics, sound, radio,
/// media; they would double the disk. InfiniBand stays: Soft-RoCE
/// (rdma_rxe) makes real verbs nodes on any interface.
const PRUNED_MODULES: [&str; 11] = [
    "kernel/sound",
    "kernel/drivers/gpu",
    "kernel/drivers/media",
    "kernel/drivers/net/wireless",
    "kernel/drivers/net/ethernet",
    "kernel/drivers/staging",
    "kernel/drivers/iio",
    "kernel/drivers/bluetooth",
    "kernel/drivers/usb",
    "kernel/net/wireless",
    "kernel/net/mac80211",
];
/// What the initramfs loads to reach the root disk; the rest of the
/// modules come from the disk itself.
const BOOT_MODULES: [&str; 3] = ["virtio_pci", "virtio_blk", "ext4"];
/// The steps the guest's script reports, in order.
const STEPS: [&str; 3] = ["runtimes", "selftest", "lab-tests"];
const INIT: Init = Init {
    prefix: "gpu-trace-lab: ",
    marker: "gpu-trace-lab-result",
    steps: &STEPS,
};

/// The unit that runs the lab once systemd has booted. Type=simple: the
/// boot completes while it runs (a oneshot would hold `is-system-running`).
const LAB_UNIT: &str = "[Unit]
Description=gpu-trace field lab
After=multi-user.target

[Service]
Type=simple
ExecStart=/lab/run
StandardInput=tty-force
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0

[Install]
WantedBy=multi-user.target
";

/// dockerd as users run it on cgroup2, minus the network set-up no lab
/// container uses (every one runs with --network none).
const DOCKER_CONFIG: &str = r#"{
  "exec-opts": ["native.cgroupdriver=systemd"],
  "bridge": "none",
  "iptables": false,
  "ip-masq": false
}
"#;

/// PID 1 of the initramfs: load the disk's drivers, mount it, hand over.
const INITRAMFS_INIT: &str = r#"#!/bin/sh
# The gpu-trace lab's initramfs, written by xtask/src/lab.rs.
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
for module in $(cat /modules/order); do
    insmod "/modules/$module" || echo "gpu-trace-lab: insmod $module failed"
done
mkdir -p /newroot
if ! mount -t ext4 -o rw /dev/vda /newroot; then
    echo "gpu-trace-lab: cannot mount the root disk /dev/vda"
    poweroff -f
fi
mount --move /dev /newroot/dev
umount /proc /sys
exec switch_root /newroot /sbin/init
"#;

/// The guest's script (on the payload disk as /lab/run): the runtimes, the
/// images made from busybox, the selftest, the lab's kernel tests; then the
/// result on the second serial port and power-off, or a shell with
/// gpu-trace.lab_shell=1 on the kernel command line.
const GUEST_SCRIPT: &str = r#"#!/bin/sh
# The gpu-trace field lab, run by gpu-trace-lab.service; written by xtask/src/lab.rs.
export PATH=/lab:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root NO_COLOR=1
echo "gpu-trace-lab: kernel $(uname -r), $(systemctl --version | head -1)"
state=$(systemctl is-system-running --wait)
echo "gpu-trace-lab: system $state after $(cut -d' ' -f1 /proc/uptime) s"
[ "$state" = running ] || systemctl --failed --no-pager

@STEP_FUNCTIONS@
runtimes() {
    systemctl start docker.service || return 1
    docker import /lab/busybox.tar lab-busybox:latest >/dev/null || return 1
    podman import --quiet /lab/busybox.tar lab-busybox:latest >/dev/null || return 1
    echo "docker $(docker version --format '{{.Server.Version}}'), cgroup driver $(docker info --format '{{.CgroupDriver}}'); podman $(podman version --format '{{.Version}}'), runtime $(podman info --format '{{.Host.OCIRuntime.Name}}')"
}

step runtimes runtimes
step selftest gpu-trace selftest
export GPU_TRACE_BIN=/lab/gpu-trace GPU_TRACE_REQUIRE_KERNEL_TESTS=1 GPU_TRACE_EXPECT_FEXIT=1
export GPU_TRACE_LAB_DRIVER=/lab/drivers/$(uname -r)/gpu_standin.ko GPU_TRACE_LAB_IMAGE=lab-busybox:latest
export GPU_TRACE_LAB_UNIT=/lab/gpu-trace.service GPU_TRACE_C_PROGRAMS=/lab/c-programs
export GPU_TRACE_LAB_DAEMONSET=/lab/daemonset.yaml GPU_TRACE_LAB_TRACE_IMAGE=/lab/gpu-trace-image.tar
# gpu-trace/tests/lab, with the LXC and runc tests: here their policies meet systemd's.
only=$(tr ' ' '\n' < /proc/cmdline | sed -n 's/^gpu-trace\.lab_only=//p')
step lab-tests lab-tests $only --test-threads=1 --nocapture

report
if grep -qw gpu-trace.lab_shell=1 /proc/cmdline; then
    echo "gpu-trace-lab: a shell; the lab's files are in /lab; power off with: systemctl poweroff"
    /bin/bash -l
fi
systemctl poweroff
"#;

/// How a lab run goes beyond the default.
#[derive(Clone, Copy, Default)]
pub struct LabRun<'a> {
    /// Keep the guest up with a shell on the console after the tests.
    pub shell: bool,
    /// Only the lab tests whose names contain this.
    pub only: Option<&'a str>,
}

/// Builds what is missing and boots each kernel of `series` (both lab
/// kernels when empty); fails when any failed.
pub fn lab(series: &[Series], timeout: Duration, run: LabRun) -> anyhow::Result<()> {
    require_root("building the lab's root filesystem")?;
    if let Some(only) = run.only {
        // On the kernel's command line, read by the guest's shell.
        ensure!(
            !only.is_empty()
                && only
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "--only takes letters, digits, `_` and `:`, not {only:?}"
        );
    }
    let mut series: Vec<Series> = if series.is_empty() {
        LAB_SERIES.to_vec()
    } else {
        series.to_vec()
    };
    // Each kernel once, however often it was named.
    series.sort_by_key(|s| s.name());
    series.dedup_by_key(|s| s.name());
    for s in &series {
        ensure!(
            LAB_SERIES.iter().any(|l| l.name() == s.name()),
            "the lab runs on {}, not on {}",
            LAB_SERIES.map(Series::name).join(" and "),
            s.name()
        );
    }
    apt_install(&[
        "debootstrap",
        "busybox-static",
        "e2fsprogs",
        "kmod",
        "xz-utils",
        "make",
        "gcc-12",
        "libc6-dev",
        // What the kernel packages' prebuilt kbuild tools link against.
        "libelf1",
        "libssl3",
        "zlib1g",
    ])?;
    install_qemu()?;

    let started = Instant::now();
    let rootfs = rootfs()?;
    // Only the kernels booted: each is a headers package, a module build
    // and its modules on the root disk.
    let kernels: Vec<LabKernel> = series
        .iter()
        .map(|&s| LabKernel::prepare(s))
        .collect::<anyhow::Result<_>>()?;
    let disk = root_disk(&rootfs, &kernels)?;
    let binaries = build_guest_binaries()?;
    let payload = payload_disk(&binaries, &kernels)?;
    eprintln!(
        "xtask: lab ready in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let mut failed = Vec::new();
    let mut summary = Vec::new();
    for kernel in &kernels {
        let outcome = boot(kernel, &disk, &payload, timeout, run)?;
        if !outcome.problems.is_empty() {
            failed.push(kernel.series.name());
        }
        summary.push(outcome);
    }
    print_summary("lab summary", &summary, &lab_dir());
    ensure!(failed.is_empty(), "the lab failed on {}", failed.join(", "));
    Ok(())
}

fn lab_dir() -> PathBuf {
    workspace().join("target/lab")
}

/// The debootstrap'd root filesystem, configured for the lab; made once.
fn rootfs() -> anyhow::Result<PathBuf> {
    let root = lab_dir().join("rootfs");
    let stamp = root.join(".gpu-trace-lab");
    if fs::read_to_string(&stamp).is_ok_and(|v| v == ROOTFS_VERSION) {
        return Ok(root);
    }
    // debootstrap again only when the package list changed.
    let packages = root.join(".gpu-trace-lab-packages");
    let wanted = GUEST_PACKAGES.join(",");
    if fs::read_to_string(&packages).ok().as_deref() != Some(wanted.as_str()) {
        let partial = lab_dir().join("rootfs.partial");
        if partial.exists() {
            fs::remove_dir_all(&partial)?;
        }
        let debs = lab_dir().join("debs");
        fs::create_dir_all(&debs)?;
        eprintln!("xtask: debootstrap of the lab's root filesystem (about 80 s)");
        let started = Instant::now();
        run_checked(
            Command::new("debootstrap")
                .arg("--variant=minbase")
                .arg(format!("--cache-dir={}", debs.display()))
                .arg(format!("--include={wanted}"))
                .args(["bookworm"])
                .arg(&partial)
                .arg(MIRROR)
                .stdout(Stdio::null()),
        )?;
        eprintln!(
            "xtask: debootstrap done in {:.0} s",
            started.elapsed().as_secs_f64()
        );
        if root.exists() {
            fs::remove_dir_all(&root)?;
        }
        fs::rename(&partial, &root)?;
        fs::write(&packages, &wanted)?;
    }
    configure_rootfs(&root)?;
    fs::write(&stamp, ROOTFS_VERSION)?;
    Ok(root)
}

/// What the guest's systemd needs to boot straight into the lab.
fn configure_rootfs(root: &Path) -> anyhow::Result<()> {
    let write = |path: &str, text: &str| -> anyhow::Result<()> {
        let file = root.join(path);
        fs::create_dir_all(file.parent().expect("in a folder"))?;
        fs::write(&file, text).with_context(|| format!("writing {}", file.display()))
    };
    write("etc/hostname", "gpu-trace-lab\n")?;
    write(
        "etc/fstab",
        "/dev/vda / ext4 rw 0 1\n/dev/vdb /lab ext4 ro,nofail 0 0\n",
    )?;
    fs::create_dir_all(root.join("lab"))?;
    write("etc/docker/daemon.json", DOCKER_CONFIG)?;
    write("etc/systemd/system/gpu-trace-lab.service", LAB_UNIT)?;
    let wants = root.join("etc/systemd/system/multi-user.target.wants");
    fs::create_dir_all(&wants)?;
    let enabled = wants.join("gpu-trace-lab.service");
    if enabled.symlink_metadata().is_err() {
        symlink("/etc/systemd/system/gpu-trace-lab.service", enabled)?;
    }
    for unit in MASKED_UNITS {
        let mask = root.join("etc/systemd/system").join(unit);
        if mask.symlink_metadata().is_ok() {
            fs::remove_file(&mask)?;
        }
        symlink("/dev/null", mask)?;
    }
    Ok(())
}

/// One lab kernel: its unpacked package, headers and the stand-in module.
struct LabKernel {
    series: Series,
    /// e.g. 6.1.0-57-amd64
    release: String,
    vmlinuz: PathBuf,
    modules: PathBuf,
    driver: PathBuf,
    initramfs: PathBuf,
}

impl LabKernel {
    fn prepare(series: Series) -> anyhow::Result<Self> {
        let package = kernel_package(series)?;
        let modules_root = package.join("lib/modules");
        let release = fs::read_dir(&modules_root)?
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .next()
            .with_context(|| format!("no kernel in {}", modules_root.display()))?;
        let vmlinuz = package.join("boot").join(format!("vmlinuz-{release}"));
        let modules = modules_root.join(&release);
        let driver = build_driver(series, &release)?;
        let initramfs = initramfs(series, &release, &modules)?;
        Ok(Self {
            series,
            release,
            vmlinuz,
            modules,
            driver,
            initramfs,
        })
    }
}

/// Debian's headers for `release`, unpacked under target/lab/headers
/// (with their -common half and the kbuild tools), never installed.
fn headers(release: &str) -> anyhow::Result<PathBuf> {
    let root = lab_dir().join("headers").join(release);
    let build = root.join(format!("usr/src/linux-headers-{release}"));
    if build.join("Makefile").exists() {
        return Ok(build);
    }
    let package = format!("linux-headers-{release}");
    let apt = Apt::system();
    let mut packages = vec![package.clone()];
    let out = Command::new("apt-cache")
        .args(["depends", &package])
        .output()
        .context("running apt-cache")?;
    if !out.status.success() {
        apt.update()?;
    }
    let out = Command::new("apt-cache")
        .args(["depends", &package])
        .output()
        .context("running apt-cache")?;
    packages.extend(
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.trim().strip_prefix("Depends: "))
            .filter(|d| d.starts_with("linux-headers-") || d.starts_with("linux-kbuild-"))
            .map(str::to_owned),
    );
    ensure!(
        packages.len() >= 3,
        "apt-cache depends {package} named no -common or kbuild package: {packages:?}"
    );
    let partial = root.with_file_name(format!("{release}.partial"));
    if partial.exists() {
        fs::remove_dir_all(&partial)?;
    }
    fs::create_dir_all(&partial)?;
    for package in &packages {
        eprintln!("xtask: unpacking {package}");
        let deb = apt.download(package, &partial)?;
        run_checked(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&partial))?;
        fs::remove_file(&deb)?;
    }
    // Relocated before the rename, so a tree at `root` is always usable.
    relocate_headers_makefile(
        &partial.join(format!("usr/src/linux-headers-{release}")),
        &root,
    )?;
    if root.exists() {
        fs::remove_dir_all(&root)?;
    }
    fs::rename(&partial, &root)?;
    Ok(build)
}

/// Debian's per-flavour Makefile includes its -common half by absolute path
/// (`include /usr/src/linux-headers-…-common/Makefile`), which only exists
/// once the package is installed; point it into the unpacked tree instead.
fn relocate_headers_makefile(build: &Path, root: &Path) -> anyhow::Result<()> {
    let makefile = build.join("Makefile");
    let text =
        fs::read_to_string(&makefile).with_context(|| format!("reading {}", makefile.display()))?;
    let unpacked = format!("{}/usr/src/", root.display());
    let relocated = text.replace(" /usr/src/", &format!(" {unpacked}"));
    ensure!(
        !relocated.contains(" /usr/src/"),
        "{} still names /usr/src",
        makefile.display()
    );
    if relocated != text {
        fs::write(&makefile, relocated)?;
    }
    Ok(())
}

/// lab/driver built against `release`'s headers; again only when its
/// source changed.
fn build_driver(series: Series, release: &str) -> anyhow::Result<PathBuf> {
    let source = workspace().join("lab/driver");
    let dir = lab_dir().join(series.name()).join("driver");
    let module = dir.join("gpu_standin.ko");
    let sources = ["gpu_standin.c", "Kbuild"];
    let fresh = sources
        .iter()
        .all(|f| fs::read(source.join(f)).ok() == fs::read(dir.join(f)).ok() && module.exists());
    if fresh {
        return Ok(module);
    }
    let build = headers(release)?;
    if dir.exists() {
        fs::remove_dir_all(&dir)?;
    }
    fs::create_dir_all(&dir)?;
    for f in sources {
        fs::copy(source.join(f), dir.join(f))?;
    }
    run_checked(
        Command::new("make")
            .arg("-C")
            .arg(&build)
            .arg(format!("M={}", dir.display()))
            // Kernels whose headers ship vmlinux (6.12) would make the
            // module's BTF with pahole, which the host may lack; the
            // stand-in needs none.
            .arg("CONFIG_DEBUG_INFO_BTF_MODULES=")
            .arg("modules")
            .stdout(Stdio::null()),
    )?;
    ensure!(module.exists(), "make built no {}", module.display());
    Ok(module)
}

/// busybox, the modules that reach the root disk (decompressed, in load
/// order as modprobe resolves them), and /init.
fn initramfs(series: Series, release: &str, modules: &Path) -> anyhow::Result<PathBuf> {
    let dir = lab_dir().join(series.name());
    let packed = dir.join("initramfs.cpio.gz");
    let init = dir.join("init");
    write_if_changed(&init, INITRAMFS_INIT)?;
    if packed.exists() && fs::metadata(&packed)?.modified()? > fs::metadata(&init)?.modified()? {
        return Ok(packed);
    }
    let package_root = modules
        .ancestors()
        .nth(3)
        .context("modules under lib/modules/RELEASE")?;
    ensure_depmod(package_root, release)?;
    let root = dir.join("initramfs");
    fresh_root(&root, &["bin", "dev", "proc", "sys", "modules"])?;
    install_busybox(&root)?;
    let mut order: Vec<String> = Vec::new();
    for module in BOOT_MODULES {
        let out = Command::new("modprobe")
            .arg("-d")
            .arg(package_root)
            .args(["-S", release, "--show-depends", module])
            .output()
            .context("running modprobe --show-depends")?;
        ensure!(
            out.status.success(),
            "modprobe --show-depends {module} for {release}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // "insmod /ROOT/lib/modules/R/kernel/.../x.ko.xz" or "builtin x"
            let Some(path) = line.strip_prefix("insmod ") else {
                continue;
            };
            let path = path.split_whitespace().next().unwrap_or_default();
            let within = &path[path.find("/kernel/").context("a module path")? + 1..];
            let file = modules.join(within);
            let name = Path::new(within)
                .file_name()
                .context("a module file")?
                .to_string_lossy()
                .trim_end_matches(".xz")
                .to_string();
            if order.contains(&name) {
                continue;
            }
            run_checked(
                bash(r#"case "$1" in *.xz) xz -dc "$1" ;; *) cat "$1" ;; esac >"$2""#)
                    .arg(&file)
                    .arg(root.join("modules").join(&name)),
            )?;
            order.push(name);
        }
    }
    fs::write(root.join("modules/order"), order.join("\n") + "\n")?;
    pack_initramfs_tree(&root, &init, &packed)?;
    Ok(packed)
}

/// Debian's kernel package ships no modules.dep.
fn ensure_depmod(package_root: &Path, release: &str) -> anyhow::Result<()> {
    let dep = package_root
        .join("lib/modules")
        .join(release)
        .join("modules.dep");
    if !dep.exists() {
        run_checked(
            Command::new("depmod")
                .arg("-b")
                .arg(package_root)
                .arg(release),
        )?;
    }
    Ok(())
}

/// The root filesystem with both lab kernels' modules (pruned of what a
/// guest without hardware never loads), as one ext4 image; made again only
/// when the root filesystem or a kernel changed.
fn root_disk(rootfs: &Path, kernels: &[LabKernel]) -> anyhow::Result<PathBuf> {
    let disk = lab_dir().join("root.img");
    let key = lab_dir().join("root.img.key");
    let wanted = format!(
        "{ROOTFS_VERSION} {}",
        kernels
            .iter()
            .map(|k| k.release.as_str())
            .collect::<Vec<_>>()
            .join(" ")
    );
    if disk.exists() && fs::read_to_string(&key).is_ok_and(|k| k == wanted) {
        return Ok(disk);
    }
    let target_modules = rootfs.join("lib/modules");
    if target_modules.exists() {
        fs::remove_dir_all(&target_modules)?;
    }
    fs::create_dir_all(&target_modules)?;
    for kernel in kernels {
        let copy = target_modules.join(&kernel.release);
        run_checked(Command::new("cp").arg("-a").arg(&kernel.modules).arg(&copy))?;
        for pruned in PRUNED_MODULES {
            let dir = copy.join(pruned);
            if dir.exists() {
                fs::remove_dir_all(&dir)?;
            }
        }
        for link in ["build", "source"] {
            let _ = fs::remove_file(copy.join(link));
        }
        run_checked(
            Command::new("depmod")
                .arg("-b")
                .arg(rootfs)
                .arg(&kernel.release),
        )?;
    }
    eprintln!("xtask: making the lab's root disk");
    let partial = lab_dir().join("root.img.partial");
    ext4_image(rootfs, "4G", &partial)?;
    fs::rename(&partial, &disk)?;
    fs::write(&key, wanted)?;
    Ok(disk)
}

/// The small second disk: gpu-trace, the kernel-test binary, the modules,
/// the busybox image, gpu-trace's image and DaemonSet, and the guest's
/// script.
fn payload_disk(binaries: &GuestBinaries, kernels: &[LabKernel]) -> anyhow::Result<PathBuf> {
    let dir = lab_dir().join("payload");
    if dir.exists() {
        fs::remove_dir_all(&dir)?;
    }
    fs::create_dir_all(&dir)?;
    fs::copy(&binaries.gpu_trace, dir.join("gpu-trace"))?;
    fs::copy(&binaries.lab_tests, dir.join("lab-tests"))?;
    let c_programs = dir.join("c-programs");
    fs::create_dir_all(&c_programs)?;
    for program in &binaries.c_programs {
        fs::copy(
            program,
            c_programs.join(program.file_name().expect("a file")),
        )?;
    }
    let script = dir.join("run");
    fs::write(
        &script,
        GUEST_SCRIPT.replace(
            "@STEP_FUNCTIONS@",
            &step_functions(INIT.prefix, INIT.marker),
        ),
    )?;
    // The packaged unit, to start under the guest's systemd.
    fs::copy(
        workspace().join("contrib/gpu-trace.service"),
        dir.join("gpu-trace.service"),
    )?;
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755))?;
    for kernel in kernels {
        let drivers = dir.join("drivers").join(&kernel.release);
        fs::create_dir_all(&drivers)?;
        fs::copy(&kernel.driver, drivers.join("gpu_standin.ko"))?;
    }
    busybox_image(&dir.join("busybox.tar"))?;
    // The DaemonSet as shipped: its manifest and the image it names.
    fs::copy(
        workspace().join("contrib/kubernetes/daemonset.yaml"),
        dir.join("daemonset.yaml"),
    )?;
    fs::copy(
        crate::image::current_tarball()?,
        dir.join("gpu-trace-image.tar"),
    )?;
    let disk = lab_dir().join("payload.img");
    ext4_image(&dir, "512M", &disk)?;
    Ok(disk)
}

/// A fresh ext4 image at `image`, `size` large (truncate's sizes), holding
/// the files of `dir`: how both of the lab's disks are made.
fn ext4_image(dir: &Path, size: &str, image: &Path) -> anyhow::Result<()> {
    let _ = fs::remove_file(image);
    run_checked(Command::new("truncate").args(["-s", size]).arg(image))?;
    run_checked(
        Command::new("mkfs.ext4")
            .args(["-q", "-F", "-d"])
            .arg(dir)
            .arg(image),
    )
}

/// A root filesystem of busybox alone, as a tarball `docker import` and
/// `podman import` take: no registry is reachable.
fn busybox_image(tarball: &Path) -> anyhow::Result<()> {
    let root = lab_dir().join("busybox-image");
    if root.exists() {
        fs::remove_dir_all(&root)?;
    }
    for d in ["bin", "dev", "etc", "proc", "sys", "tmp"] {
        fs::create_dir_all(root.join(d))?;
    }
    install_busybox(&root)?;
    fs::write(root.join("etc/passwd"), "root:x:0:0:root:/:/bin/sh\n")?;
    fs::write(root.join("etc/group"), "root:x:0:\nvideo:x:44:\n")?;
    run_checked(
        Command::new("tar")
            .arg("-C")
            .arg(&root)
            .arg("-cf")
            .arg(tarball)
            .arg("."),
    )
}

/// Boots the lab's guest on `kernel` from the root disk and the payload,
/// and judges it; with `shell`, on this terminal, with a shell after the
/// tests.
fn boot(
    kernel: &LabKernel,
    disk: &Path,
    payload: &Path,
    timeout: Duration,
    run: LabRun,
) -> anyhow::Result<Outcome> {
    let shell = run.shell;
    let dir = lab_dir().join(kernel.series.name());
    // intel_iommu=on: the VFIO scene's network card needs an IOMMU group.
    let mut append = String::from("root=/dev/vda rw quiet intel_iommu=on");
    if shell {
        append.push_str(" gpu-trace.lab_shell=1");
    }
    if let Some(only) = run.only {
        append.push_str(&format!(" gpu-trace.lab_only={only}"));
    }
    let machine = Machine {
        vmlinuz: &kernel.vmlinuz,
        initramfs: &kernel.initramfs,
        memory: "3G",
        append: &append,
        disks: &[disk, payload],
        iommu: true,
    };
    let run = if shell {
        shell_run(&machine, &dir)?
    } else {
        machine.boot(&dir, &format!("[lab {}] ", kernel.series.name()), timeout)?
    };
    let mut outcome = judge(kernel.series.name(), &run, &INIT);
    outcome.release = kernel.release.clone();
    if !outcome.problems.is_empty() && !shell {
        print_console_tail(&run.console, &run.console_log);
    }
    Ok(outcome)
}

/// The guest on this terminal, which is its console: the steps' statuses
/// still reach the result file.
fn shell_run(machine: &Machine, dir: &Path) -> anyhow::Result<GuestRun> {
    fs::create_dir_all(dir)?;
    let result_file = dir.join("result");
    if result_file.exists() {
        fs::remove_file(&result_file)?;
    }
    let started = Instant::now();
    let status = machine
        .command(&result_file)
        .status()
        .context("starting qemu-system-x86_64")?;
    if !status.success() {
        bail!("qemu exited {status}");
    }
    Ok(GuestRun {
        console: String::new(),
        console_log: dir.join("console.log"),
        result: fs::read_to_string(&result_file).unwrap_or_default(),
        ending: crate::guest::qemu::Ending::PoweredOff,
        seconds: started.elapsed().as_secs_f64(),
    })
}
