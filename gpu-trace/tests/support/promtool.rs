//! promtool, Prometheus's own checker, for the tests of the rules, the
//! dashboard and /metrics. `cargo xtask test` fetches Debian's and passes
//! it in GPU_TRACE_PROMTOOL; else one on PATH is used.

// Each test binary uses its own part.
#![allow(dead_code)]

use std::{
    io::Write,
    path::PathBuf,
    process::{Command, Output, Stdio},
};

/// GPU_TRACE_PROMTOOL's value where the promtool checks run elsewhere.
pub const NATIVE_ONLY: &str = "native-only";

/// The promtool to use, or None (with the reason printed) when there is
/// none; where the suite requires every test to run, that is a failure.
pub fn promtool(test: &str) -> Option<PathBuf> {
    let given = std::env::var_os("GPU_TRACE_PROMTOOL").filter(|p| !p.is_empty());
    if given.as_deref() == Some(NATIVE_ONLY.as_ref()) {
        // The vm-test guest: promtool (48 MB) is not in its initramfs, and
        // what it checks (text formats, PromQL) does not depend on the kernel.
        eprintln!("note: {test}: promtool runs in the native test run, not in this guest");
        return None;
    }
    let found = given.map(PathBuf::from).or_else(|| {
        let on_path = Command::new("promtool").arg("--version").output();
        on_path
            .is_ok_and(|o| o.status.success())
            .then(|| PathBuf::from("promtool"))
    });
    if found.is_none() {
        super::skip::cannot_run(
            test,
            "no promtool (GPU_TRACE_PROMTOOL unset and none on PATH; `cargo xtask test` fetches it)",
        );
    }
    found
}

/// The Prometheus or Alertmanager server `env` names (GPU_TRACE_PROMETHEUS,
/// GPU_TRACE_ALERTMANAGER: `cargo xtask test` unpacks Debian's), or None
/// with the reason printed: in the guests they are native-only, like
/// promtool; elsewhere a missing one is a test that cannot run.
pub fn server(env: &str, test: &str) -> Option<PathBuf> {
    let given = std::env::var_os(env).filter(|p| !p.is_empty());
    if given.as_deref() == Some(NATIVE_ONLY.as_ref()) {
        eprintln!("note: {test}: Prometheus and Alertmanager run in the native test run, not in this guest");
        return None;
    }
    if given.is_none() {
        super::skip::cannot_run(test, &format!("{env} unset (`cargo xtask test` sets it)"));
    }
    given.map(PathBuf::from)
}

/// Runs promtool with `args`, `stdin` fed to it; the output, whatever the status.
pub fn run(promtool: &PathBuf, args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(promtool)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start promtool");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("feed promtool");
    child.wait_with_output().expect("promtool output")
}
