//! How a guest's run is judged and summed up: the steps its init reported
//! on the second serial port, what the kernel complained of, tests that
//! skipped or panicked, and one table for all kernels.

use std::path::Path;

/// The only reason a kernel test may skip in the guest: it is pure cgroup2.
pub(crate) const ACCEPTED_SKIP: &str = "no cgroup v1 devices controller";

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
