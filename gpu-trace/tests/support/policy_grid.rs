//! The evaluator against the kernel, for any policy: a grid of opens and
//! mknods from a child in the cgroup, each compared with what the evaluator
//! answers. Shared by the kernel tests and the runtimes' (LXC, runc).

use gpu_trace::{
    kernel::programs_in_force::{CgroupPolicy, ProgramCache},
    scenario::run_probe_in,
};
use gpu_trace_common::DEV_TYPE_CHAR;
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
