//! `dynamic-major-not-allowed`: the policy lacks a major the kernel hands
//! out when a module loads (nvidia-uvm, caps, nvswitch; AMD's kfd), which
//! can change after a reboot or driver update.

use super::prelude::*;
use crate::{
    analysis::diagnose::phrasing::todays_major,
    model::node::NvidiaNode,
    runtime::{self, allow_device, DeviceToAllow},
};

/// AMD's compute node: its driver's name in /proc/devices, and its path.
const KFD_DRIVER: &str = "kfd";
const KFD_PATH: &str = "/dev/kfd";

pub(super) fn find(facts: &Facts, cx: &Context) -> Option<Finding> {
    if !facts.denied_by_policy() {
        return None;
    }
    match facts.node {
        Some(node) if node.has_dynamic_major() => Some(nvidia(facts, cx, node)),
        _ if facts.driver.as_deref() == Some(KFD_DRIVER) => Some(kfd(facts)),
        _ => None,
    }
}

fn nvidia(facts: &Facts, cx: &Context, node: NvidiaNode) -> Finding {
    let major = todays_major(node, cx.majors).unwrap_or(facts.major);
    let frontend = if cx.frontend_allowed {
        "it allows the NVIDIA frontend (major 195, seen allowed) but not"
    } else {
        "it does not allow"
    };
    Finding {
        explanation: format!(
            "{} denies {}: {frontend} {}'s major {major}, which the kernel assigns when the module loads and which can change after a reboot or driver update",
            facts.policy_text(),
            facts.device_text(),
            node.driver(),
        ),
        fix: allow_device(
            facts.container(),
            &DeviceToAllow {
                path: &node.dev_path(),
                major,
                minor: facts.denied_minor(),
                driver: node.driver(),
                gpu_node: true,
                allocated_gpu: None,
            },
        ),
    }
}

/// ROCm's /dev/kfd denied: like nvidia-uvm, its major is handed out when
/// amdgpu loads. ROCm needs a render node as well: the fix names the first
/// GPU's, never all of /dev/dri.
fn kfd(facts: &Facts) -> Finding {
    let major = facts.major;
    let container = facts.container();
    let fix = runtime::of(container.runtime).allow_rocm(
        container,
        &DeviceToAllow {
            path: KFD_PATH,
            major,
            minor: None,
            driver: KFD_DRIVER,
            gpu_node: true,
            allocated_gpu: None,
        },
    );
    Finding {
        explanation: format!(
            "{} denies {}: it does not allow kfd's major {major} (AMD's ROCm compute node), which the kernel assigns when amdgpu loads and which can change after a reboot or driver update",
            facts.policy_text(),
            facts.device_text(),
        ),
        fix,
    }
}

#[cfg(test)]
mod tests {
    use crate::{analysis::diagnose::testing::*, scenario::pasted::assert_paste_safe};

    #[test]
    fn uvm_denied_while_195_allowed_names_the_uvm_major_for_lxc() {
        let mut d = Diagnoser::default();
        let ctl = record("/lxc/200", "/dev/nvidiactl", 195, 255, Verdict::Allowed, 3);
        assert!(diagnose(&mut d, &ctl).is_none());
        let uvm = denied("/lxc/200", "/dev/nvidia-uvm", 509, 0);
        let diag = diagnosed_as(&mut d, &uvm, Cause::DynamicMajorNotAllowed);
        assert!(
            diag.explanation.contains("ct 200")
                && diag.explanation.contains("major 195, seen allowed"),
            "{diag:?}"
        );
        assert!(
            diag.fix[0].contains("/etc/pve/lxc/200.conf")
                && diag.fix[0].contains("lxc.cgroup2.devices.allow: c 509:* rwm"),
            "{diag:?}"
        );
        assert_has(&diag.hint, "pct reboot 200");
    }

    #[test]
    fn stand_in_major_with_no_driver_is_named_by_its_path() {
        let mut d = Diagnoser::default();
        let majors = CharMajors::parse("Character devices:\n  1 mem\n");
        let mut r = denied("/lxc.payload.box", "/tmp/n/nvidia-uvm", 511, 0);
        r.driver = None;
        let diag = d.diagnose(&r, &majors, 1, None, None).expect("diagnosis");
        assert_eq!(diag.cause, Cause::DynamicMajorNotAllowed);
        assert!(
            diag.fix[0].contains("c 511:* rwm") && diag.fix[0].contains("/var/lib/lxc/box/config"),
            "{diag:?}"
        );
    }

    #[test]
    fn kfd_denied_names_its_dynamic_major_and_rocms_fixes() {
        let mut r = denied("/lxc/300", "/dev/kfd", 511, 0);
        r.node = None;
        r.driver = Some("kfd".into());
        r.device = Some("kfd".into());
        let diag = diagnosis_naming(&r, Cause::DynamicMajorNotAllowed);
        assert_has(
            &diag.explanation,
            "kfd's major 511 (AMD's ROCm compute node)",
        );
        assert_has(&diag.hint, "lxc.cgroup2.devices.allow: c 511:* rwm");
        assert_has(&diag.hint, "c 226:128 rwm");
        assert!(!diag.hint.contains("c 226:* rwm`"), "{}", diag.hint);
        let mut r = denied(DOCKER_SCOPE, "/dev/kfd", 511, 0);
        r.node = None;
        r.driver = Some("kfd".into());
        let hint = diagnosis_of(&r).hint.clone();
        assert_has(&hint, "`--device /dev/kfd`");
        assert_has(&hint, "`--device /dev/dri/renderD128`");
        assert!(!hint.contains("`--device /dev/dri`"), "{hint}");
    }

    #[test]
    fn hostile_container_names_reach_commands_as_literal_words() {
        for name in HOSTILE {
            let r = denied(&format!("/lxc.payload.{name}"), "/dev/nvidia-uvm", 509, 0);
            let diag = diagnosis_of(&r);
            assert_has(&diag.hint, "lxc-stop -n");
            assert_paste_safe(&diag.hint, name);
        }
    }
}
