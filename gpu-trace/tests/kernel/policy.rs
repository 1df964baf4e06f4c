//! The policy evaluator against the kernel: for real policies, what the
//! evaluator answers must be what an open() or mknod() from a child in that
//! cgroup actually gets; and `check` built on it.

use std::{path::Path, process::Command};

use gpu_trace::{
    host::preflight::Host,
    kernel::programs_in_force::{CgroupPolicy, ProgramCache},
    scenario::{
        run_probe_in, DeviceNodes, OpenMode, ProbeOp, ScratchCgroup, ScratchPolicy,
        SCRATCH_POLICY_NAME,
    },
};
use gpu_trace_common::{ACCESS_MKNOD, ACCESS_READ, ACCESS_WRITE, DEV_TYPE_CHAR};
use gpu_trace_policy::{Answer, DeviceQuery};

use crate::common::*;

/// Opens (r, w, rw) and mknods over majors × minors; each op with the
/// access it asks of the device policy.
pub fn grid(nodes: &DeviceNodes, majors: &[u32]) -> Vec<(ProbeOp, DeviceQuery)> {
    let mut ops = Vec::new();
    for &major in majors {
        for minor in [0, 3, 255] {
            let name = format!("n-{major}-{minor}");
            let query = |access| DeviceQuery {
                dev_type: DEV_TYPE_CHAR,
                major,
                minor,
                access,
            };
            for (mode, access) in [
                (OpenMode::Read, ACCESS_READ),
                (OpenMode::Write, ACCESS_WRITE),
                (OpenMode::ReadWrite, ACCESS_READ | ACCESS_WRITE),
            ] {
                ops.push((
                    ProbeOp::Open {
                        path: nodes.path(&name),
                        mode,
                    },
                    query(access),
                ));
            }
            let made = nodes.path(&format!("made-{major}-{minor}"));
            ops.push((
                ProbeOp::Mknod {
                    path: made,
                    major,
                    minor,
                },
                query(ACCESS_MKNOD),
            ));
        }
    }
    ops
}

pub fn grid_nodes(majors: &[u32]) -> DeviceNodes {
    let names: Vec<(String, u32, u32)> = majors
        .iter()
        .flat_map(|&major| [0, 3, 255].map(|minor| (format!("n-{major}-{minor}"), major, minor)))
        .collect();
    let specs: Vec<(&str, u32, u32)> = names.iter().map(|(n, a, b)| (n.as_str(), *a, *b)).collect();
    DeviceNodes::create(&specs).expect("mknod grid")
}

/// Runs the grid in `cgroup_dir` and compares every errno with the
/// evaluator's answer for the policy in force there.
pub fn assert_evaluator_matches_kernel(
    host_mount: &Path,
    cgroup_dir: &Path,
    majors: &[u32],
) -> CgroupPolicy {
    let nodes = grid_nodes(majors);
    let ops = grid(&nodes, majors);
    let probe_ops: Vec<ProbeOp> = ops.iter().map(|(op, _)| op.clone()).collect();
    let outcome =
        run_probe_in(Path::new(gpu_trace()), &[cgroup_dir], &probe_ops).expect("probe in cgroup");
    let relative = Path::new("/").join(
        cgroup_dir
            .strip_prefix(host_mount)
            .expect("under the mount"),
    );
    let policy = CgroupPolicy::read(host_mount, &relative, &mut ProgramCache::default())
        .expect("read policy");
    assert!(
        !policy.programs.is_empty(),
        "a policy is in force on {}",
        relative.display()
    );
    let (mut denied, mut allowed) = (0, 0);
    for ((op, query), errno) in ops.iter().zip(&outcome.results) {
        let kernel_denied = *errno == libc::EPERM;
        match policy.answer(query) {
            Answer::DeniedBy(_) => {
                assert!(
                    kernel_denied,
                    "{op:?}: evaluator denies, kernel gave errno {errno}"
                );
                denied += 1;
            }
            Answer::Allowed => {
                assert!(
                    !kernel_denied,
                    "{op:?}: evaluator allows, kernel gave EPERM"
                );
                allowed += 1;
            }
            Answer::Unknown(i, why) => {
                panic!("cannot evaluate program {}: {why}", policy.programs[i].id)
            }
        }
    }
    eprintln!(
        "grid in {}: {denied} denied, {allowed} allowed",
        relative.display()
    );
    assert!(
        denied > 0 && allowed > 0,
        "the grid has both outcomes: {denied} denied, {allowed} allowed"
    );
    policy
}

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
    let Some(host) = kernel_test(test_name!()) else {
        return;
    };
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
    let Some(host) = kernel_test(test_name!()) else {
        return;
    };
    let _harden = JitHarden::set("2");
    let (_cgroup, _policy, read) = generated_policy_against_the_kernel(&host, "eval-hardened");
    assert!(blinded(&read), "the kernel blinded the policy: {read:#?}");
}

#[test]
fn check_exits_2_on_a_bad_target() {
    let Some(_host) = kernel_test(test_name!()) else {
        return;
    };
    let output = Command::new(gpu_trace())
        .args(["check", "--cgroup", "/no/such/gpu-trace/cgroup"])
        .output()
        .expect("run check");
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a cgroup"));
}
