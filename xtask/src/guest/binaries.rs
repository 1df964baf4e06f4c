//! The static binaries the guests run: gpu-trace, the test binaries and
//! the tests' C programs (the guests have no libc and no compiler).

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use anyhow::{ensure, Context};

use crate::{
    apt_install, cargo,
    guest::{initramfs::newer_than_all, vm_dir},
    run_checked, static_binary, workspace, GUEST_TESTS, STATIC_RUSTFLAGS, STATIC_TARGET,
};

pub(crate) struct GuestBinaries {
    pub gpu_trace: PathBuf,
    /// gpu-trace/tests/kernel, lockdown and lab.
    pub kernel_tests: PathBuf,
    pub lockdown_tests: PathBuf,
    pub lab_tests: PathBuf,
    /// The kernel tests' C programs (GPU_TRACE_C_PROGRAMS), by file name;
    /// the lab's too.
    pub c_programs: Vec<PathBuf>,
}

/// The kernel tests' C programs (tests/kernel/NAME.c) and their flags.
const KERNEL_TEST_C_PROGRAMS: [(&str, &[&str]); 10] = [
    ("open32", &["-m32"]),
    ("uring_open", &[]),
    ("flip_open", &["-pthread"]),
    ("mknod_cycle", &[]),
    ("open_paced", &[]),
    ("cgroup_fan", &[]),
    ("evict_in_flight", &["-pthread"]),
    ("unmap_path", &["-pthread"]),
    ("launch_and_remove", &[]),
    // The CRI pods' sandbox, in the lab.
    ("pause", &[]),
];

/// gpu-trace, the kernel-test binary and the tests' C programs, linked
/// statically for the guest. gpu-trace is the release build the packages
/// ship, not the test profile's: the guests test what users run, and under
/// emulation the unoptimised build took about 3 s to start (parsing the
/// kernel's BTF), which every scene of the guests paid.
pub(crate) fn build_guest_binaries() -> anyhow::Result<GuestBinaries> {
    let messages = build_static(&GUEST_TESTS.split(' ').collect::<Vec<_>>())?;
    apt_install(&["gcc-multilib"])?;
    Ok(GuestBinaries {
        gpu_trace: static_binary()?,
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
