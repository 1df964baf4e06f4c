//! `stale-major`: the node carries a major its driver no longer has, per
//! /proc/devices: denied when the policy lacks the old major, ENXIO when
//! it allows it and no driver answers.

use super::prelude::*;
use crate::{
    analysis::diagnose::phrasing::todays_major,
    model::node::NvidiaNode,
    runtime::{allow_device, DeviceToAllow},
};

pub(super) fn find(facts: &Facts, cx: &Context) -> Option<Finding> {
    match facts.verdict {
        Verdict::Allowed => stale_node_opened(facts, cx),
        _ if facts.denied_by_policy() => node_with_an_old_major(facts, cx),
        _ => None,
    }
}

/// An allowed open that still failed with ENXIO because the node's major
/// belongs to no driver: the stale-major case where the policy let it by.
pub(super) fn stale_node_opened(facts: &Facts, cx: &Context) -> Option<Finding> {
    let enxio = facts.errno() == Some(libc::ENXIO) && facts.driver.is_none();
    enxio.then(|| node_with_an_old_major(facts, cx))?
}

/// The node carries a major that is not its driver's today.
fn node_with_an_old_major(facts: &Facts, cx: &Context) -> Option<Finding> {
    let node = NvidiaNode::from_path(facts.path.as_deref()?)?;
    let today = todays_major(node, cx.majors)?;
    if today == facts.major {
        return None;
    }
    let path = facts.path_text();
    let shown = prose(&path);
    // The host makes its own node, at the driver's path with the driver's
    // helper and mode: never the path, minor or mode of the node the
    // process opened, which may be a tenant's own mknod.
    let host_node = node.dev_path();
    let mut fix = vec![format!(
        "recreate {host_node} on the host with today's major: `{}`, then restart what bind-mounts it",
        node.maker()
    )];
    if node.is_one_of_many() {
        // Which GPU (or capability) the node stood for is only its name,
        // which the tenant may have chosen: no rule is built from it.
        fix.push(format!(
            "then allow the container the nodes it should have, each by its own minor (`ls -l {host_node}` on the host), not the whole major"
        ));
    } else {
        fix.extend(allow_device(
            facts.container(),
            &DeviceToAllow {
                path: &host_node,
                major: today,
                minor: None,
                driver: node.driver(),
                gpu_node: true,
                allocated_gpu: None,
            },
        ));
    }
    Some(Finding {
        explanation: format!(
            "{shown} is c {}:{} but {} has major {today} today (/proc/devices): the node, and maybe the allow rule, predate a reboot or driver update",
            facts.major,
            facts.minor,
            node.driver()
        ),
        fix,
    })
}

#[cfg(test)]
mod tests {
    use crate::analysis::diagnose::testing::*;

    #[test]
    fn node_with_an_old_major_is_stale() {
        let mut d = Diagnoser::default();
        // Denied: the old major 511 is not in the policy.
        let denied = denied("/lxc/200", "/dev/nvidia-uvm", 511, 0);
        let diag = diagnosed_as(&mut d, &denied, Cause::StaleMajor);
        assert_has(&diag.explanation, "major 509 today");
        assert!(
            diag.fix.iter().any(|f| f.contains("c 509:* rwm")),
            "{diag:?}"
        );
        // Allowed, but no driver behind the old major: ENXIO.
        let enxio = record(
            "/lxc/201",
            "/dev/nvidia-uvm",
            511,
            0,
            Verdict::Allowed,
            -libc::ENXIO,
        );
        assert_eq!(
            diagnose(&mut d, &enxio).map(|x| x.cause),
            Some(Cause::StaleMajor)
        );
    }

    #[test]
    fn the_host_remakes_its_own_node_never_the_tenants_path_minor_or_mode() {
        for name in HOSTILE {
            // A tenant's own node, with a major no driver has today.
            let path = format!("/tmp/{name}/nvidia-cap1");
            let stale = denied(DOCKER_CGROUPFS, &path, 240, 7);
            let majors = CharMajors::parse(
                "Character devices:\n195 nvidia-frontend\n236 nvidia-caps\n509 nvidia-uvm\n",
            );
            let diag = Diagnoser::default()
                .diagnose(&stale, &majors, 0, None, None)
                .expect("diagnosis");
            assert_eq!(diag.cause, Cause::StaleMajor);
            for fix in &diag.fix {
                assert!(!fix.contains(name) && !fix.contains("mknod"), "{fix}");
                assert!(!fix.contains(":7") && !fix.contains("666"), "{fix}");
            }
            assert_has(
                &diag.hint,
                "recreate /dev/nvidia-caps/nvidia-cap1 on the host",
            );
            assert_has(
                &diag.hint,
                "`ls -l /dev/nvidia-caps/nvidia-cap1` on the host",
            );
        }
        // A GPU node: which GPU is only its name, so no rule is built
        // from it, and never the whole major.
        let gpu = denied("/lxc/200", "/dev/nvidia3", 511, 3);
        let diag = diagnosis_naming(&gpu, Cause::StaleMajor);
        assert_has(&diag.hint, "`nvidia-modprobe -c=3`");
        assert_has(
            &diag.hint,
            "each by its own minor (`ls -l /dev/nvidia3` on the host)",
        );
        assert!(!diag.hint.contains("195:"), "{}", diag.hint);
    }
}
