//! How a guest's run is judged and summed up: the steps its init reported
//! on the second serial port, what the kernel complained of, tests that
//! skipped, panicked or ran none, and one table for all kernels.

use std::path::Path;

use crate::guest::qemu::GuestRun;

/// The only reason a kernel test may skip in a guest: it is pure cgroup2.
pub(crate) const ACCEPTED_SKIP: &str = "no cgroup v1 devices controller";

/// One kernel's run, judged.
pub(crate) struct Outcome {
    /// The kernel series, as `--kernel` names it.
    pub series: &'static str,
    /// `uname -r` as the guest's init said it.
    pub release: String,
    pub seconds: f64,
    /// The first test binary's result line.
    pub test_result: Option<String>,
    /// What the recipe adds to the table (vm-test: the selftests' hooks).
    pub notes: Vec<String>,
    /// Why the kernel failed; empty when it passed.
    pub problems: Vec<String>,
}

/// What the guest's init calls itself and reports, for `judge`.
pub(crate) struct Init<'a> {
    /// Its console lines' prefix ("gpu-trace-vm: ").
    pub prefix: &'a str,
    /// The start of its result line on the second serial port.
    pub marker: &'a str,
    /// The steps it runs, each of which must report status 0.
    pub steps: &'a [&'a str],
}

/// A kernel passes when its init reported every step at status 0, the
/// kernel did not complain, every test binary ran at least one test, none
/// panicked and none skipped but for the missing cgroup v1 controller.
/// A guest killed at its deadline or stuck fails with that first.
pub(crate) fn judge(series: &'static str, run: &GuestRun, init: &Init) -> Outcome {
    let mut problems: Vec<String> = run.ending.problem().into_iter().collect();
    problems.extend(step_problems(&run.result, init.marker, init.steps));
    problems.extend(kernel_complaints(&run.console));
    let lines: Vec<&str> = run.console.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        if let Some(skip) = skip_notice(line).filter(|s| !s.contains(ACCEPTED_SKIP)) {
            problems.push(format!("unexpected skip: {skip}"));
        }
        if line.contains("panicked at") {
            let message = lines.get(i + 1).unwrap_or(&"");
            problems.push(format!("{line} {message}"));
        }
        if line.contains("test result: ok. 0 passed") {
            problems.push("a test binary ran no test".into());
        }
    }
    let kernel_line = format!("{}kernel ", init.prefix);
    Outcome {
        series,
        release: lines
            .iter()
            .find_map(|l| l.strip_prefix(kernel_line.as_str()))
            .map(|rest| rest.split(',').next().unwrap_or(rest).to_string())
            .unwrap_or_else(|| "(unknown)".into()),
        seconds: run.seconds,
        test_result: lines
            .iter()
            .find_map(|l| l.strip_prefix("test result: "))
            .map(str::to_owned),
        notes: Vec::new(),
        problems,
    }
}

/// One line per kernel, its notes and its first problems; where the rest is.
pub(crate) fn print_summary(title: &str, outcomes: &[Outcome], consoles: &Path) {
    // A kernel that fails everything would bury the table; its console.log has the rest.
    const SHOWN_PROBLEMS: usize = 8;
    println!();
    println!("{title}");
    println!(
        "  {:<6} {:<26} {:<6} {:>7}  tests",
        "series", "kernel", "result", "seconds"
    );
    for o in outcomes {
        println!(
            "  {:<6} {:<26} {:<6} {:>7.0}  {}",
            o.series,
            o.release,
            if o.problems.is_empty() {
                "PASS"
            } else {
                "FAIL"
            },
            o.seconds,
            o.test_result.as_deref().unwrap_or("(no test result)")
        );
        for line in &o.notes {
            println!("         {line}");
        }
        for problem in o.problems.iter().take(SHOWN_PROBLEMS) {
            println!("         problem: {problem}");
        }
        let hidden = o.problems.len().saturating_sub(SHOWN_PROBLEMS);
        if hidden > 0 {
            println!(
                "         ... and {hidden} more in {}",
                consoles.join(o.series).join("console.log").display()
            );
        }
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
fn skip_notice(line: &str) -> Option<&str> {
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;
    use crate::guest::qemu::Ending;

    const INIT: Init = Init {
        prefix: "guest: ",
        marker: "guest-result",
        steps: &["selftest", "tests"],
    };

    fn run(console: &str, result: &str) -> GuestRun {
        GuestRun {
            console: console.into(),
            console_log: PathBuf::from("console.log"),
            result: result.into(),
            ending: Ending::PoweredOff,
            seconds: 1.0,
        }
    }

    #[test]
    fn a_clean_run_passes_with_its_release_and_first_result() {
        let console = "guest: kernel 6.1.0-57-amd64, systemd 252\ntest result: ok. 62 passed; 0 failed\ntest result: ok. 1 passed; 0 failed\n";
        let outcome = judge(
            "6.1",
            &run(console, "guest-result selftest=0 tests=0\n"),
            &INIT,
        );
        assert_eq!(outcome.problems, Vec::<String>::new());
        assert_eq!(outcome.release, "6.1.0-57-amd64");
        assert_eq!(
            outcome.test_result.as_deref(),
            Some("ok. 62 passed; 0 failed")
        );
    }

    #[test]
    fn failed_steps_skips_panics_and_empty_runs_each_fail_the_kernel() {
        let console = "test x ... skipping x: no fexit here\n\
            skipping y: no cgroup v1 devices controller (pure cgroup2)\n\
            thread 'z' panicked at a.rs:1:1:\nboom\n\
            test result: ok. 0 passed; 0 failed\n";
        let outcome = judge("6.1", &run(console, "guest-result selftest=1\n"), &INIT);
        assert_eq!(
            outcome.problems,
            [
                "selftest exited 1",
                "tests did not report",
                "unexpected skip: skipping x: no fexit here",
                "thread 'z' panicked at a.rs:1:1: boom",
                "a test binary ran no test",
            ]
        );
        let silent = judge("6.1", &run("", ""), &INIT);
        assert_eq!(
            silent.problems,
            ["the guest reported no result (boot failure, panic or hang)"]
        );
    }
}
