//! gpu-trace's developer tasks: install the eBPF toolchain, run the tool,
//! run the test suite. Each step checks first and does nothing when what it
//! would install is already there.

use std::{
    env,
    io::Write,
    path::{Path, PathBuf},
    process::{Command, ExitCode, Stdio},
    time::Duration,
};

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};

mod cargo_tools;
mod guest;
mod image;
mod lab;
mod phases;
mod promtool;
mod vm_bench;
mod vm_test;

/// Debian packages the eBPF build needs: rustc-web ships a precompiled `core`
/// for bpfel-unknown-none (libstd-rust-web-dev-bpf); bpf-linker links
/// against the same LLVM major (22).
const APT_PACKAGES: [&str; 3] = ["rustc-web", "libstd-rust-web-dev-bpf", "llvm-22-dev"];
/// What the kernel tests drive besides gpu-trace: real LXC and runc
/// containers with a busybox root filesystem, whose device policies the
/// runtimes generate themselves.
/// gcc-multilib: the 32-bit process of the kernel tests (open32.c).
/// docker.io: a private dockerd, whose containers this hybrid host confines
/// with cgroup v1 devices.list rules.
/// containerd: a private one driven through its CRI as the kubelet drives it
/// (a dependency of docker.io too, named for what it is used for).
const TEST_PACKAGES: [&str; 6] = [
    "lxc",
    "runc",
    "busybox-static",
    "gcc-multilib",
    "docker.io",
    "containerd",
];

/// `cargo ARGS` that builds and runs the kernel tests (gpu-trace/tests/kernel).
/// The kernel tests that run on this machine: the kernel's own, and the
/// container runtimes' (LXC, runc). The tiers are the folders of
/// gpu-trace/tests: `lab` runs in the field lab's guest, `lockdown` in the
/// qemu matrix's, last.
const NATIVE_KERNEL_TESTS: &str = "test --package gpu-trace --test kernel --test runtimes";
/// The test binaries the guests run, built statically with gpu-trace.
pub(crate) const GUEST_TESTS: &str =
    "test --package gpu-trace --test kernel --test lockdown --test lab";

const BPF_LINKER_VERSION: &str = "0.13.0";
const LLVM_PREFIX: &str = "/usr/lib/llvm-22";

#[derive(Parser)]
#[command(about = "gpu-trace's build, setup and test driver")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand)]
enum Task {
    /// Install what building the eBPF programs needs (idempotent; seconds when present).
    Setup,
    /// Set up, build gpu-trace (release) and run it with ARGS, e.g. `cargo xtask run -- selftest`.
    Run {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Set up, then lint and run every test tier: unit tests, a short fuzz run, the
    /// package check, the kernel tests and the kernel matrix in qemu (root).
    Test {
        /// Skip `cargo fmt --check` and clippy.
        #[arg(long)]
        no_lint: bool,
        /// Skip the kernel matrix (`vm-test`), about 10 minutes.
        #[arg(long)]
        no_vm: bool,
    },
    /// Measure overhead, throughput and start-up against baselines of the same run (root).
    Bench {
        /// Fewer and shorter runs.
        #[arg(long)]
        quick: bool,
        /// Where the machine-readable summary goes.
        #[arg(long, default_value = "bench/results.json")]
        json: PathBuf,
        /// Run one group only: overhead, repeats, throughput, liveness, startup, tenants,
        /// workload, guests (the open overhead inside the kernel matrix's qemu guests), or
        /// guest-repeats (the guests' repeated-denial group alone, kept beside their other
        /// results).
        #[arg(long)]
        only: Option<String>,
        /// With the guests: only this kernel (repeatable); all three by default.
        #[arg(long = "kernel", value_enum)]
        kernels: Vec<guest::kernels::Series>,
    },
    /// Build the release binary and a Debian package (target/dist/gpu-trace_*.deb).
    Dist {
        /// Then install the package, run `gpu-trace selftest` from PATH, check
        /// the man page, and remove it again.
        #[arg(long)]
        check: bool,
    },
    /// Set up, then boot Debian's 5.10, 6.1 and 6.12 kernels in qemu and run the
    /// selftest and the kernel tests inside each.
    VmTest {
        /// Only this kernel (repeatable); all three by default.
        #[arg(long = "kernel", value_enum)]
        kernels: Vec<guest::kernels::Series>,
        /// How long one kernel may take from boot to power-off.
        #[arg(long, default_value_t = vm_test::DEFAULT_TIMEOUT.as_secs())]
        timeout_secs: u64,
    },
    /// Set up, then boot the field lab: Debian with systemd, dockerd, podman and a
    /// stand-in GPU driver module, on the 6.1 and 6.12 kernels, and run its scenarios.
    Lab {
        /// Only this kernel (repeatable); 6.1 and 6.12 by default.
        #[arg(long = "kernel", value_enum)]
        kernels: Vec<guest::kernels::Series>,
        /// How long one kernel may take from boot to power-off.
        #[arg(long, default_value_t = lab::DEFAULT_TIMEOUT.as_secs())]
        timeout_secs: u64,
        /// After the scenarios, keep the guest up with a shell on this terminal.
        #[arg(long)]
        shell: bool,
        /// Only the lab tests whose names contain this (letters, digits, `_`, `:`).
        #[arg(long, value_name = "NAME")]
        only: Option<String>,
    },
    /// Build the container image gpu-trace:<version> (docker.io, from the static
    /// binary) and save it to target/dist/gpu-trace-image-<version>.tar.
    Image {
        /// Then load it into a fresh dockerd and run selftest in it with the
        /// DaemonSet's privileges.
        #[arg(long)]
        check: bool,
    },
    /// Fuzz the device-policy evaluator (cargo fuzz, nightly) for a while.
    Fuzz {
        #[arg(long, default_value_t = 60)]
        seconds: u32,
    },
}

fn main() -> ExitCode {
    let result = match Cli::parse().task {
        Task::Setup => setup(),
        Task::Run { args } => setup().and_then(|()| run(&args)),
        Task::Test { no_lint, no_vm } => test(!no_lint, !no_vm),
        Task::Fuzz { seconds } => fuzz(seconds),
        Task::VmTest {
            kernels,
            timeout_secs,
        } => setup().and_then(|()| vm_test::vm_test(&kernels, Duration::from_secs(timeout_secs))),
        Task::Lab {
            kernels,
            timeout_secs,
            shell,
            only,
        } => setup().and_then(|()| {
            let run = lab::LabRun {
                shell,
                only: only.as_deref(),
            };
            lab::lab(&kernels, Duration::from_secs(timeout_secs), run)
        }),
        Task::Dist { check } => setup().and_then(|()| dist(check)),
        Task::Image { check } => setup().and_then(|()| image::image(check).map(|_| ())),
        Task::Bench {
            quick,
            json,
            only,
            kernels,
        } => setup().and_then(|()| bench(quick, &json, only.as_deref(), &kernels)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn setup() -> anyhow::Result<()> {
    apt_install(&APT_PACKAGES)?;
    if !bpf_linker_ready() {
        eprintln!(
            "xtask: building bpf-linker {BPF_LINKER_VERSION} against LLVM 22 (about a minute)"
        );
        run_checked(
            Command::new(cargo())
                .args([
                    "install",
                    &format!("bpf-linker@{BPF_LINKER_VERSION}"),
                    "--locked",
                ])
                .args(["--no-default-features", "--features", "llvm-22"])
                .env("LLVM_PREFIX", LLVM_PREFIX),
        )?;
    }
    Ok(())
}

/// Installs the Debian packages of `packages` that are missing.
fn apt_install(packages: &[&str]) -> anyhow::Result<()> {
    let missing: Vec<&str> = packages
        .iter()
        .copied()
        .filter(|p| !dpkg_installed(p))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    require_root(&format!("installing {}", missing.join(" ")))?;
    eprintln!("xtask: installing Debian packages: {}", missing.join(" "));
    run_checked(Command::new("apt-get").args(["update", "-q"]))?;
    run_checked(
        Command::new("apt-get")
            .args(["install", "-y", "-q", "--no-install-recommends"])
            .args(&missing)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )
}

fn dpkg_installed(package: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", package])
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains("install ok installed"))
}

fn bpf_linker_ready() -> bool {
    Command::new("bpf-linker")
        .arg("--version")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).contains(BPF_LINKER_VERSION))
}

fn run(args: &[String]) -> anyhow::Result<()> {
    run_checked(Command::new(cargo()).args(["build", "--release", "--package", "gpu-trace"]))?;
    let binary = workspace().join("target/release/gpu-trace");
    let status = Command::new(&binary)
        .args(args)
        .status()
        .with_context(|| format!("running {}", binary.display()))?;
    if !status.success() {
        // gpu-trace has already said why; pass its status on.
        std::process::exit(status.code().unwrap_or(1));
    }
    Ok(())
}

fn test(lint: bool, vm: bool) -> anyhow::Result<()> {
    let mut phases = phases::Phases::new();
    phases.run("setup", setup)?;
    if lint {
        phases.run("lint", || {
            // Default members only: the eBPF crate builds for the BPF target alone.
            run_checked(Command::new(cargo()).args(["fmt", "--all", "--", "--check"]))?;
            run_checked(Command::new(cargo()).args([
                "clippy",
                "--all-targets",
                "--",
                "-D",
                "warnings",
            ]))?;
            dependency_policy()
        })?;
    }
    // promtool checks the alert rules, the dashboard's queries and a live /metrics.
    let promtool = match promtool::promtool() {
        Ok(path) => path,
        Err(e) if !is_root() => {
            eprintln!("xtask: no promtool ({e:#}): the Prometheus tests will say they skip");
            PathBuf::new()
        }
        Err(e) => return Err(e),
    };
    // Unit tests: no privileges needed.
    phases.run("unit tests", || {
        run_checked(
            Command::new(cargo())
                .args(["test", "--lib", "--bins", "--test", "deployment"])
                .env(promtool::ENV, &promtool)
                .env(
                    "GPU_TRACE_REQUIRE_KERNEL_TESTS",
                    if env::var_os("CI").is_some() { "1" } else { "" },
                ),
        )
    })?;
    phases.run("fuzz", || fuzz(CI_FUZZ_SECONDS))?;
    // The packages: the .deb built, installed, used from PATH, removed; the
    // RPM read back and its binary run; the image loaded and run in dockerd.
    if is_root() {
        phases.run("packages", || dist(true))?;
        phases.run("image", || image::image(true))?;
    }
    // Kernel tests: real cgroups, policies, device nodes, LXC and runc containers; one at a time.
    // Prometheus and Alertmanager carry an incident to an alert.
    phases.run("native kernel tests", || {
        let mut command = Command::new(cargo());
        if is_root() {
            apt_install(&TEST_PACKAGES)?;
            command
                .env(promtool::PROMETHEUS_ENV, promtool::prometheus()?)
                .env(promtool::ALERTMANAGER_ENV, promtool::alertmanager()?)
                // The binary the packages ship, as in the guests: what users
                // run, and it starts in a third of the test profile's time,
                // which the tests pay at every watch they start.
                .env("GPU_TRACE_BIN", static_binary()?);
        } else {
            eprintln!(
                "xtask: not root: the kernel tests will say they skip (run as root to run them)"
            );
        }
        run_checked(
            command
                .args(NATIVE_KERNEL_TESTS.split(' '))
                .args(["--", "--test-threads=1"])
                .env(promtool::ENV, &promtool)
                // In CI, a kernel test that skips is a failure.
                .env(
                    "GPU_TRACE_REQUIRE_KERNEL_TESTS",
                    if env::var_os("CI").is_some() { "1" } else { "" },
                ),
        )
    })?;
    // The same tests inside Debian's kernels, where fexit loads and the
    // layout is pure cgroup2 (the hosts users run).
    // And the field lab: policies written by systemd, dockerd and podman.
    match (vm, is_root()) {
        (true, true) => {
            phases.run("vm matrix", || {
                vm_test::vm_test(&[], vm_test::DEFAULT_TIMEOUT)
            })?;
            phases.run("field lab", || {
                lab::lab(
                    &lab::TEST_SERIES,
                    lab::DEFAULT_TIMEOUT,
                    lab::LabRun::default(),
                )
            })
        }
        (true, false) => {
            eprintln!("xtask: not root: the kernel matrix in qemu (vm-test) is skipped");
            Ok(())
        }
        (false, _) => Ok(()),
    }
}

/// rpmbuild makes the RPM; rpm, rpm2cpio and cpio read it back.
const RPM_PACKAGES: [&str; 2] = ["rpm", "cpio"];
/// The target of the statically linked builds (the RPM's binary, the test
/// guests'): given explicitly, so that RUSTFLAGS reaches only the target's
/// units and host build scripts, and the normal target/ builds, stay as they are.
pub(crate) const STATIC_TARGET: &str = "x86_64-unknown-linux-gnu";
/// glibc linked in statically, without debug info.
pub(crate) const STATIC_RUSTFLAGS: &str =
    "-C target-feature=+crt-static -C debuginfo=0 -C strip=debuginfo";
/// What `rpm -qpl` must list: the same files as the .deb, at EL paths.
const RPM_FILES: [&str; 7] = [
    "/etc/logrotate.d/gpu-trace",
    "/usr/bin/gpu-trace",
    "/usr/lib/systemd/system/gpu-trace.service",
    "/usr/share/bash-completion/completions/gpu-trace",
    "/usr/share/fish/vendor_completions.d/gpu-trace.fish",
    "/usr/share/man/man1/gpu-trace.1.gz",
    "/usr/share/zsh/site-functions/_gpu-trace",
];

/// The packages: the statically linked release binary (one build for the
/// .deb, the RPM and the image), its man page and completions rendered by
/// the binary itself, then cargo-deb with the assets listed in
/// gpu-trace/Cargo.toml and rpmbuild with contrib/gpu-trace.spec.
fn dist(check: bool) -> anyhow::Result<()> {
    let dist = workspace().join("target/dist");
    let completions = dist.join("completions");
    std::fs::create_dir_all(&completions)?;
    let binary = static_binary()?;
    let render = |args: &[&str]| -> anyhow::Result<Vec<u8>> {
        let out = Command::new(&binary)
            .args(args)
            .output()
            .with_context(|| format!("running gpu-trace {args:?}"))?;
        anyhow::ensure!(out.status.success(), "gpu-trace {args:?} failed");
        Ok(out.stdout)
    };
    let man = render(&["__man"])?;
    let mut gz = Command::new("gzip")
        .args(["-9n"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    gz.stdin.take().expect("piped").write_all(&man)?;
    std::fs::write(dist.join("gpu-trace.1.gz"), gz.wait_with_output()?.stdout)?;
    for (shell, file) in [
        ("bash", "gpu-trace.bash"),
        ("zsh", "_gpu-trace"),
        ("fish", "gpu-trace.fish"),
    ] {
        std::fs::write(completions.join(file), render(&["completions", shell])?)?;
    }
    cargo_tools::ensure(&cargo_tools::CARGO_DEB)?;
    let deb = dist.join(format!("gpu-trace_{}_amd64.deb", env!("CARGO_PKG_VERSION")));
    run_checked(
        Command::new(cargo())
            .args(["deb", "--package", "gpu-trace", "--no-build", "--target"])
            .arg(STATIC_TARGET)
            .arg("--output")
            .arg(&deb),
    )?;
    println!("xtask: built {}", deb.display());
    let rpm = build_rpm(&dist, &binary)?;
    println!("xtask: built {}", rpm.display());
    if check {
        check_package(&deb)?;
        check_rpm(&rpm)?;
    }
    Ok(())
}

/// The release binary linked statically, for the packages, the image and the test guests.
/// Built once per xtask run: `test` asks for it for the packages and again for the image,
/// and in CI the second cargo call rebuilt gpu-trace (a minute) for no change of ours.
pub(crate) fn static_binary() -> anyhow::Result<PathBuf> {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    if let Some(binary) = BUILT.get() {
        return Ok(binary.clone());
    }
    run_checked(
        Command::new(cargo())
            .args(["build", "--release", "--package", "gpu-trace", "--target"])
            .arg(STATIC_TARGET)
            .env("RUSTFLAGS", STATIC_RUSTFLAGS),
    )?;
    let binary = workspace()
        .join("target")
        .join(STATIC_TARGET)
        .join("release/gpu-trace");
    Ok(BUILT.get_or_init(|| binary).clone())
}

/// The RPM, around a statically linked build of the same sources: rpmbuild
/// (Debian's `rpm` package) with contrib/gpu-trace.spec, which lists the files.
fn build_rpm(dist: &Path, binary: &Path) -> anyhow::Result<PathBuf> {
    apt_install(&RPM_PACKAGES)?;
    let version = env!("CARGO_PKG_VERSION");
    let topdir = tempfile_dir("rpmbuild")?;
    // rpm would expand a % in a path as a macro; the spec quotes paths in "".
    for path in [&topdir, binary, dist, &workspace()] {
        anyhow::ensure!(
            !path.to_string_lossy().contains(['%', '"']),
            "rpmbuild cannot be given {}: it has a % or a \"",
            path.display()
        );
    }
    let define = |name: &str, value: &Path| format!("{name} {}", value.display());
    run_checked(
        Command::new("rpmbuild")
            .args(["-bb", "--quiet", "--target", "x86_64-linux"])
            .arg("--define")
            .arg(define("_topdir", &topdir))
            .arg("--define")
            .arg(format!("gpu_trace_version {version}"))
            .arg("--define")
            .arg(define("gpu_trace_binary", binary))
            .arg("--define")
            .arg(define("gpu_trace_contrib", &workspace().join("contrib")))
            .arg("--define")
            .arg(define("gpu_trace_dist", dist))
            // xz: read by every EL release's rpm, where zstd came later.
            .args(["--define", "_binary_payload w9.xzdio"])
            .arg(workspace().join("contrib/gpu-trace.spec")),
    )?;
    let built = topdir.join(format!("RPMS/x86_64/gpu-trace-{version}-1.x86_64.rpm"));
    let rpm = dist.join(built.file_name().expect("a file name"));
    std::fs::rename(&built, &rpm)
        .with_context(|| format!("moving {} to {}", built.display(), rpm.display()))?;
    Ok(rpm)
}

/// The RPM's file list and metadata as rpm(8) reads them (Debian's `rpm`
/// package), and its binary, unpacked, passes the selftest.
fn check_rpm(rpm: &Path) -> anyhow::Result<()> {
    apt_install(&RPM_PACKAGES)?;
    let query = |flags: &str| -> anyhow::Result<String> {
        let out = Command::new("rpm")
            .args(flags.split(' '))
            .arg("--nosignature")
            .arg(rpm)
            .output()?;
        anyhow::ensure!(out.status.success(), "rpm {flags}: {out:?}");
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let files: Vec<String> = query("-qpl")?.lines().map(str::to_owned).collect();
    anyhow::ensure!(
        files == RPM_FILES,
        "rpm -qpl lists {files:?}, not {RPM_FILES:?}"
    );
    let info = query("-qpi")?;
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.trim_start().strip_prefix(':'))
            .map(str::trim)
    };
    for (name, want) in [
        ("Name", "gpu-trace"),
        ("Version", env!("CARGO_PKG_VERSION")),
        ("Release", "1"),
        ("Architecture", "x86_64"),
        ("License", "MIT OR Apache-2.0"),
    ] {
        anyhow::ensure!(
            field(name) == Some(want),
            "rpm -qpi {name}: {:?}\n{info}",
            field(name)
        );
    }
    // Static: no shared library, so no glibc version, is required.
    let requires = query("-qpR")?;
    anyhow::ensure!(
        !requires.contains(".so"),
        "the RPM requires shared libraries:\n{requires}"
    );
    let compressor = query("-qp --qf=%{PAYLOADCOMPRESSOR}")?;
    anyhow::ensure!(compressor == "xz", "the payload is {compressor}, not xz");
    let config = query("-qpc")?;
    anyhow::ensure!(
        config.trim() == "/etc/logrotate.d/gpu-trace",
        "config files: {config}"
    );
    // The packaged binary itself, unpacked as rpm would lay it out.
    let root = tempfile_dir("rpm-root")?;
    run_checked(Command::new("sh").arg("-c").arg(format!(
        "rpm2cpio '{}' | (cd '{}' && cpio -idm --quiet)",
        rpm.display(),
        root.display()
    )))?;
    let binary = root.join("usr/bin/gpu-trace");
    let selftest = Command::new(&binary).arg("selftest").output()?;
    let stdout = String::from_utf8_lossy(&selftest.stdout);
    anyhow::ensure!(
        selftest.status.success() && stdout.lines().any(|l| l.starts_with("PASS")),
        "selftest of the RPM's binary: {stdout}"
    );
    std::fs::remove_dir_all(&root)?;
    println!("xtask: RPM lists its {} files, says who it is, requires no shared library, and its binary passes selftest", RPM_FILES.len());
    Ok(())
}

/// A fresh directory under target/tmp.
fn tempfile_dir(name: &str) -> anyhow::Result<PathBuf> {
    let dir = workspace().join("target/tmp").join(name);
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Installs the package as a host would, uses it from PATH, removes it.
fn check_package(deb: &Path) -> anyhow::Result<()> {
    require_root("installing the package")?;
    run_checked(
        Command::new("apt-get")
            .args(["install", "-y", "-q"])
            .arg(deb)
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    let selftest = Command::new("/usr/bin/gpu-trace")
        .arg("selftest")
        .output()?;
    let stdout = String::from_utf8_lossy(&selftest.stdout);
    anyhow::ensure!(
        selftest.status.success() && stdout.lines().any(|l| l.starts_with("PASS")),
        "selftest from PATH: {stdout}"
    );
    let man = Command::new("man").args(["-w", "gpu-trace"]).output();
    match man {
        Ok(out) => anyhow::ensure!(out.status.success(), "man -w gpu-trace finds no page"),
        Err(_) => anyhow::ensure!(
            Path::new("/usr/share/man/man1/gpu-trace.1.gz").exists(),
            "no man page installed"
        ),
    }
    run_checked(
        Command::new("apt-get")
            .args(["remove", "-y", "-q", "gpu-trace"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
    )?;
    anyhow::ensure!(
        !Path::new("/usr/bin/gpu-trace").exists(),
        "/usr/bin/gpu-trace left after removal"
    );
    println!("xtask: package installs, runs selftest from PATH (PASS), has its man page, and removes cleanly");
    Ok(())
}

/// The tools the benchmark compares gpu-trace with.
const BENCH_PACKAGES: [&str; 2] = ["bpftrace", "strace"];

/// The host's groups, then (unless `--only` names one of them) the guests'.
fn bench(
    quick: bool,
    json: &Path,
    only: Option<&str>,
    kernels: &[guest::kernels::Series],
) -> anyhow::Result<()> {
    const GROUPS: [&str; 9] = [
        "overhead",
        "repeats",
        "throughput",
        "liveness",
        "startup",
        "tenants",
        "workload",
        "guests",
        "guest-repeats",
    ];
    if let Some(group) = only.filter(|g| !GROUPS.contains(g)) {
        anyhow::bail!(
            "--only {group:?}: no such group (one of {})",
            GROUPS.join(", ")
        );
    }
    require_root("the benchmark (it attaches tracers)")?;
    let json = if json.is_absolute() {
        json.to_path_buf()
    } else {
        workspace().join(json)
    };
    if let Some(dir) = json.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let in_guests = match only {
        None | Some("guests") => Some(vm_bench::GuestGroups::All),
        Some("guest-repeats") => Some(vm_bench::GuestGroups::RepeatsOnly),
        Some(_) => None,
    };
    if !matches!(only, Some("guests" | "guest-repeats")) {
        host_bench(quick, &json, only)?;
    }
    if let Some(groups) = in_guests {
        vm_bench::vm_bench(kernels, quick, groups, &json)?;
    }
    Ok(())
}

/// The bench binary on this machine; it writes `json` afresh.
fn host_bench(quick: bool, json: &Path, only: Option<&str>) -> anyhow::Result<()> {
    apt_install(&BENCH_PACKAGES)?;
    let mut command = Command::new(cargo());
    command
        .args([
            "bench",
            "--package",
            "gpu-trace",
            "--bench",
            "gpu_trace",
            "--",
        ])
        .arg("--json")
        .arg(json);
    if quick {
        command.arg("--quick");
    }
    if let Some(group) = only {
        command.args(["--only", group]);
    }
    run_checked(&mut command)
}

/// cargo deny's checks that need no advisory database (deny.toml):
/// permissive licenses only, no wildcard versions, crates.io only.
fn dependency_policy() -> anyhow::Result<()> {
    cargo_tools::ensure(&cargo_tools::CARGO_DENY)?;
    run_checked(Command::new(cargo()).args(["deny", "check", "licenses", "bans", "sources"]))
}

/// How long `test` fuzzes: enough to catch a shallow panic, short for CI.
const CI_FUZZ_SECONDS: u32 = 20;

/// Runs the evaluator's fuzz target; installs cargo-fuzz when missing.
fn fuzz(seconds: u32) -> anyhow::Result<()> {
    cargo_tools::ensure(&cargo_tools::CARGO_FUZZ)?;
    // cargo fuzz needs the nightly compiler (sanitizer flags); rustup has one here.
    run_checked(
        Command::new("cargo")
            .args([
                "+nightly",
                "fuzz",
                "run",
                "evaluator",
                "--",
                &format!("-max_total_time={seconds}"),
            ])
            .current_dir(workspace().join("fuzz"))
            .env_remove("CARGO")
            .env_remove("RUSTC"),
    )
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| out.stdout.starts_with(b"0\n"))
}

fn require_root(what: &str) -> anyhow::Result<()> {
    if !is_root() {
        bail!("{what} needs root; run `sudo cargo xtask setup` once");
    }
    Ok(())
}

fn run_checked(command: &mut Command) -> anyhow::Result<()> {
    let shown = format!("{command:?}");
    let status = command
        .status()
        .with_context(|| format!("starting {shown}"))?;
    if !status.success() {
        bail!("{shown} failed: {status}");
    }
    Ok(())
}

fn cargo() -> String {
    env::var("CARGO").unwrap_or_else(|_| "cargo".into())
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask is in the workspace")
        .to_path_buf()
}
