//! The policy evaluator against the kernel: for real policies, what the
//! evaluator answers must be what an open() or mknod() from a child in that
//! cgroup actually gets; and `check` built on it.

use gpu_trace::{
    host::preflight::Host, kernel::programs_in_force::CgroupPolicy, scenario::SCRATCH_POLICY_NAME,
};

use crate::{common::*, policy_grid::*};

/// A generated policy (the stand-in major denied rwm, the one below it
/// denied w) on a scratch cgroup, and the grid run against it.
fn generated_policy_against_the_kernel(
    host: &Host,
    test: &str,
) -> (ScratchCgroup, ScratchPolicy, CgroupPolicy) {
    let major = uvm_standin();
    let cgroup = scratch_cgroup(host, test);
    let policy = ScratchPolicy::attach(
        &cgroup,
        &[
            (major, ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD),
            (major - 1, ACCESS_WRITE),
        ],
    )
    .expect("attach policy");
    let read = assert_evaluator_matches_kernel(
        &host.cgroup2_mount,
        cgroup.path(),
        &[195, major, major - 1],
    );
    (cgroup, policy, read)
}

#[test]
fn evaluator_matches_the_kernel_for_a_generated_policy() {
    let host = or_skip!(kernel_test);
    let (cgroup, policy, read) = generated_policy_against_the_kernel(&host, "eval-generated");
    assert_eq!(read.programs.len(), 1, "{read:#?}");
    assert_eq!(Some(read.programs[0].id), policy.program_id());
    assert_eq!(read.programs[0].name, SCRATCH_POLICY_NAME);
    assert_eq!(
        read.programs[0].attached_at,
        cgroup.relative_path().to_str().expect("utf-8")
    );
    assert_eq!(
        read.programs[0].attach_mode, "multi",
        "attached with a link"
    );
}

#[test]
fn evaluator_matches_the_kernel_under_a_hardened_jit() {
    let host = or_skip!(kernel_test);
    let _harden = JitHarden::set("2");
    let (_cgroup, _policy, read) = generated_policy_against_the_kernel(&host, "eval-hardened");
    assert!(blinded(&read), "the kernel blinded the policy: {read:#?}");
}

#[test]
fn check_exits_2_on_a_bad_target() {
    let _host = or_skip!(kernel_test);
    let output = Command::new(gpu_trace())
        .args(["check", "--cgroup", "/no/such/gpu-trace/cgroup"])
        .output()
        .expect("run check");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a cgroup"));
}
