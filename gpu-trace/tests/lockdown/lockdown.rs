//! A kernel in lockdown (confidentiality): watch, run and selftest stop
//! with one line that says so and what still works, and `check` works.
//!
//! Lockdown cannot be lowered once raised, so only the vm-test guest raises
//! it, after all its other tests, and runs this module with
//! GPU_TRACE_EXPECT_LOCKDOWN=1; elsewhere it says it skips.

use gpu_trace::host::preflight::{lockdown_in_force, LOCKDOWN};

use crate::common::*;

/// True when the kernel is in confidentiality lockdown; otherwise says why
/// the test skips (or fails, where lockdown was expected).
fn locked_down(name: &str) -> bool {
    let level = std::fs::read_to_string(LOCKDOWN).unwrap_or_default();
    if lockdown_in_force(&level) == Some("confidentiality") {
        return true;
    }
    let why = format!(
        "the kernel is not in confidentiality lockdown ({LOCKDOWN}: {:?}); it cannot be lowered once raised, so only the vm-test guest raises it",
        level.trim()
    );
    if std::env::var("GPU_TRACE_EXPECT_LOCKDOWN").is_ok_and(|v| v == "1") {
        panic!("{name} expected lockdown: {why}");
    }
    eprintln!("skipping {name}: {why}");
    false
}

#[test]
fn lockdown_is_one_line_that_says_what_still_works() {
    let host = or_skip!(kernel_test);
    if !locked_down(test_name!()) {
        return;
    }
    for args in [
        &["watch"][..],
        &["run", "--", "true"],
        &["selftest"],
        &["watch", "--hook", "observer"],
    ] {
        let output = Command::new(gpu_trace())
            .args(args)
            .output()
            .expect("run gpu-trace");
        let stderr = String::from_utf8_lossy(&output.stderr);
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with("gpu-trace"))
            .collect();
        assert_eq!(output.status.code(), Some(7), "{args:?}: {stderr}");
        assert_eq!(lines.len(), 1, "{args:?}: one line: {stderr}");
        assert!(
            lines[0].starts_with("gpu-trace: error: the kernel is locked down (confidentiality"),
            "{args:?}: {stderr}"
        );
        assert!(
            lines[0].contains("`gpu-trace check` still works"),
            "{stderr}"
        );
        assert!(!stderr.contains("Verifier"), "{args:?}: {stderr}");
        // Refused before it made or printed anything (selftest's scratch cgroup).
        assert!(output.stdout.is_empty(), "{args:?}: {output:?}");
    }

    // check reads the programs in force without loading any of its own.
    let incident = Incident::new(&host, "lockdown");
    let cgroup = incident.cgroup.relative_path().to_str().expect("UTF-8");
    let (status, report) = check_json_with(&["--cgroup", cgroup], None);
    assert!(matches!(status, Some(0 | 1)), "{status:?}: {report}");
    let programs = report["programs"].as_array().expect("programs");
    assert_eq!(programs.len(), 1, "{report}");
    assert_eq!(programs[0]["name"], "gt_scratch_dev", "{report}");
    assert_eq!(
        programs[0]["id"].as_u64(),
        incident.policy.program_id().map(u64::from),
        "{report}"
    );
}
