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
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{ensure, Context};
use clap::ValueEnum;

use crate::{
    apt_install,
    guest::{
        binaries::{build_guest_binaries, GuestBinaries},
        init::{step_functions, GUEST_MOUNTS},
        initramfs::{
            copy_with_libraries, fresh_root, install_busybox, newer_than_all, pack_initramfs_tree,
            write_if_changed, BUSYBOX,
        },
        judge::{judge, print_console_tail, print_summary, Init, Outcome},
        kernels::{install_qemu, kernel_image, Series},
        qemu::Machine,
        vm_dir,
    },
};

/// Host tools the kernel tests call whose busybox forms fall short: a test
/// drops to nobody with util-linux's `setpriv --reuid`, and the hostile-name
/// tests paste suggested commands into bash (its not-found handler stubs
/// every program out; busybox's ash has none), and the colour test runs
/// watch on a pseudo-terminal with util-linux's `script`.
const HOST_TOOLS: [&str; 3] = ["/usr/bin/setpriv", "/usr/bin/bash", "/usr/bin/script"];
/// What /init runs, in order; each reports its exit status in the marker line.
const STEPS: [&str; 4] = ["selftest", "selftest-observer", "kernel-tests", "lockdown"];
/// How long one kernel may take from boot to power-off: about 5 minutes is
/// usual on 2 cores without KVM (the tests' floods and cgroup fans run
/// under emulation).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(900);
/// What /init calls itself, the line it reports its steps in, and the steps.
const INIT: Init = Init {
    prefix: "gpu-trace-vm: ",
    marker: "gpu-trace-vm-result",
    steps: &STEPS,
};

/// PID 1 of the guest, after GUEST_MOUNTS: gpu-trace/tests/kernel, then
/// gpu-trace/tests/lockdown (the runtimes' tests need LXC and runc, which
/// the initramfs has not; they run natively and in the lab).
const INIT_STEPS: &str = r#"
echo "gpu-trace-vm: kernel $(uname -r)"

step selftest gpu-trace selftest
step selftest-observer gpu-trace selftest --hook observer
export GPU_TRACE_BIN=/bin/gpu-trace GPU_TRACE_REQUIRE_KERNEL_TESTS=1 GPU_TRACE_EXPECT_FEXIT=1
export GPU_TRACE_C_PROGRAMS=/bin
# promtool's checks, and the alerts Prometheus and Alertmanager raise, do
# not depend on the kernel: they run natively only.
export GPU_TRACE_PROMTOOL=native-only GPU_TRACE_PROMETHEUS=native-only GPU_TRACE_ALERTMANAGER=native-only
# OTLP's and colour's tests exercise encodings and terminals, not the
# kernel, beyond what the other tests cover: the newest guest runs them
# (and the host); the older ones are told so on their command line.
case " $(cat /proc/cmdline) " in
*" gpu-trace.newest_only=skip "*)
    set -- --skip otlp:: --skip otlp_tls:: --skip colour::
    echo "gpu-trace-vm: OTLP's and colour's tests run in the newest guest only" ;;
*) set -- ;;
esac
step kernel-tests kernel-tests --test-threads=1 --nocapture "$@"

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

report
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
    print_summary("vm-test summary", &outcomes, &vm_dir());
    let failed: Vec<&str> = outcomes
        .iter()
        .filter(|o| !o.problems.is_empty())
        .map(|o| o.series)
        .collect();
    ensure!(failed.is_empty(), "vm-test failed on {}", failed.join(", "));
    Ok(())
}

/// A gzip'd newc initramfs: busybox and its applets, the two binaries and
/// /init. Packed again only when one of them changed.
fn pack_initramfs(binaries: &GuestBinaries) -> anyhow::Result<PathBuf> {
    let initramfs = vm_dir().join("initramfs.cpio.gz");
    let init = vm_dir().join("init");
    let script = format!(
        "#!/bin/sh\n# PID 1 of the gpu-trace vm-test guest, written by xtask/src/vm_test.rs.\n{GUEST_MOUNTS}{}{INIT_STEPS}",
        step_functions(INIT.prefix, INIT.marker)
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

/// Boots `vmlinuz` with the initramfs, streams and keeps the console, and judges it.
fn boot(
    series: Series,
    vmlinuz: &Path,
    initramfs: &Path,
    timeout: Duration,
) -> anyhow::Result<Outcome> {
    let newest = Series::value_variants().last().map(|s| s.name()) == Some(series.name());
    let run = Machine {
        append: if newest {
            ""
        } else {
            "gpu-trace.newest_only=skip"
        },
        ..Machine::busybox(vmlinuz, initramfs)
    }
    .boot(
        &vm_dir().join(series.name()),
        &format!("[{}] ", series.name()),
        timeout,
    )?;
    let mut outcome = judge(series.name(), &run, &INIT);
    outcome.notes = selftest_hook_lines(&run.console.lines().collect::<Vec<_>>());
    if !outcome.problems.is_empty() {
        print_console_tail(&run.console, &run.console_log);
    }
    Ok(outcome)
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
