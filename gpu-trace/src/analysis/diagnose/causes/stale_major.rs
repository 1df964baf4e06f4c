//! `stale-major`: the node carries a major its driver no longer has, per
//! /proc/devices: denied when the policy lacks the old major, ENXIO when
//! it allows it and no driver answers.

use crate::{
    analysis::diagnose::{
        facts::{Context, Facts},
        phrasing::{todays_major, Finding},
    },
    model::{access::Verdict, node::NvidiaNode},
    runtime::{allow_device, DeviceToAllow, NODE_PATH},
    text::shell_word::{command_word, prose},
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
    let mut fix = vec![format!(
        "recreate {shown} with today's major: on the host `nvidia-modprobe -u -c=0` (or `mknod -m 666 -- {} c {today} {}`), and restart what bind-mounts it",
        command_word(&path, NODE_PATH),
        facts.minor
    )];
    fix.extend(allow_device(
        facts.container(),
        &DeviceToAllow {
            path: &node.dev_path(),
            major: today,
            driver: node.driver(),
        },
    ));
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
    use crate::{
        analysis::{
            diagnose::{
                testing::{assert_has, denied, diagnose, diagnosis_of, HOSTILE},
                Diagnoser,
            },
            test_support::record,
        },
        model::{access::Verdict, diagnosis::Cause},
        scenario::pasted::assert_paste_safe,
    };

    #[test]
    fn node_with_an_old_major_is_stale() {
        let mut d = Diagnoser::default();
        // Denied: the old major 511 is not in the policy.
        let denied = denied("/lxc/200", "/dev/nvidia-uvm", 511, 0);
        let diag = diagnose(&mut d, &denied).expect("diagnosis");
        assert_eq!(diag.cause, Cause::StaleMajor);
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
    fn hostile_paths_reach_the_mknod_hint_as_literal_words() {
        for name in HOSTILE {
            let path = format!("/tmp/{name}/nvidia-uvm");
            // A stale major (511 is not nvidia-uvm's 509): the mknod hint.
            let stale = denied(
                "/docker/3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8",
                &path,
                511,
                0,
            );
            let diag = diagnosis_of(&stale);
            assert_eq!(diag.cause, Cause::StaleMajor);
            assert_has(&diag.hint, "mknod");
            assert_paste_safe(&diag.hint, &path);
        }
    }
}
