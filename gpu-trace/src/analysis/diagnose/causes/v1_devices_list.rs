//! `v1-devices-list`: the BPF policies allowed it and the open still got
//! EPERM: cgroup v1's devices controller refused it.

use super::prelude::*;

pub(super) fn find(facts: &Facts, _: &Context) -> Option<Finding> {
    if facts.verdict != Verdict::DeniedAfterBpf {
        return None;
    }
    // The denied minor alone where its node is one of many on the major.
    let rule = facts.denied_rule();
    let explanation = format!(
        "the BPF device policies allowed {} for {}, but the open still got EPERM: the cgroup v1 devices controller (devices.list) denies it",
        facts.device_text(),
        facts.label()
    );
    // A pod's rules are the kubelet's and its runtime's to write: a hand
    // edit of devices.allow lasts until the pod's container is made again.
    if facts.container().pod.is_some() {
        return Some(Finding {
            explanation,
            fix: facts.allow_denied(),
        });
    }
    Some(Finding {
        explanation,
        fix: vec![
            format!(
                "for now: `echo '{rule} rwm' > /sys/fs/cgroup/devices/CGROUP/devices.allow`, CGROUP being the process's devices cgroup (see /proc/PID/cgroup)"
            ),
            format!(
                "to keep it: add the rule to the runtime's config (LXC on cgroup v1: `lxc.cgroup.devices.allow: {rule} rwm`; Docker: `--device-cgroup-rule='{rule} rmw'`)"
            ),
        ],
    })
}

#[cfg(test)]
mod tests {
    use crate::analysis::diagnose::testing::*;

    #[test]
    fn v1_denial_points_at_devices_list() {
        let r = record(
            "/docker/abc",
            "/dev/nvidia-uvm",
            509,
            0,
            Verdict::DeniedAfterBpf,
            -1,
        );
        let diag = diagnosis_naming(&r, Cause::V1DevicesList);
        assert!(diag.hint.contains("devices.allow") && diag.hint.contains("c 509:* rmw"));
        // One GPU of the node: its minor, not the major.
        let gpu = record(
            "/docker/abc",
            "/dev/nvidia2",
            195,
            2,
            Verdict::DeniedAfterBpf,
            -1,
        );
        let hint = diagnosis_of(&gpu).hint.clone();
        assert!(hint.contains("echo 'c 195:2 rwm'"), "{hint}");
        assert!(!hint.contains("195:*"), "{hint}");
    }

    #[test]
    fn a_pods_v1_denial_names_the_device_plugin_never_a_hand_edit() {
        let mut gpu = record(
            "/kubepods/burstable/pod0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0/3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8",
            "/dev/nvidia2",
            195,
            2,
            Verdict::DeniedAfterBpf,
            -1,
        );
        let mut container = (**gpu.container).clone();
        container.pod = Some("trainer-0".into());
        gpu.container = std::rc::Rc::new(crate::model::rendered::Rendered::new(container));
        let hint = diagnosis_naming(&gpu, Cause::V1DevicesList).hint.clone();
        assert_starts(&hint, "request GPUs through the NVIDIA device plugin");
        assert!(!hint.contains("devices.allow"), "{hint}");
        assert!(!hint.contains("195:*"), "{hint}");
    }
}
