//! `not-allocated`: a Kubernetes container was denied a GPU the kubelet did
//! not allocate to it. NVML and DCGM open every GPU node they can see (a
//! node with all of /dev/nvidia* mounted, the legacy hook's way), so on an
//! 8-GPU node a pod given one GPU is denied the other seven at start: a
//! probe, harmless, and no incident (DCGM#90). An allocated GPU that is
//! denied is not this cause: it is the real incident, told by the causes
//! after this one.

use super::prelude::*;

pub(super) fn find(facts: &Facts, _: &Context) -> Option<Finding> {
    let denied = facts.denied_by_policy() || facts.verdict == Verdict::DeniedAfterBpf;
    let allocation = facts.allocation.as_ref().map(|a| &**a.0)?;
    if !denied || allocation.allocated {
        return None;
    }
    let given = match allocation.container_gpus.as_slice() {
        [] => "no GPU".to_string(),
        gpus => gpus.join(", "),
    };
    Some(Finding {
        explanation: format!(
            "{} is GPU {}, which the kubelet did not allocate to {} (it was given {given}): the container probed a GPU it may not use, as NVML and DCGM do with every GPU node they can see; the denial is expected and the workload's own GPUs are unaffected",
            facts.device_text(),
            allocation.gpu,
            facts.label(),
        ),
        fix: vec![
            "nothing, if the workload needs only the GPUs it was given".to_string(),
            "if it needs this one too, request it: `resources.limits: {nvidia.com/gpu: N}` in the pod's spec (the device plugin picks the GPUs and passes their nodes)".to_string(),
            "to stop the probes, do not show the container other GPUs' nodes: the device plugin's `deviceListStrategy` (volume-mounts or cdi-annotations) or `PASS_DEVICE_SPECS=true` pass the allocated GPUs' nodes alone".to_string(),
        ],
    })
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use crate::{
        analysis::diagnose::testing::*,
        model::{allocation::GpuAllocation, container::Container, rendered::Rendered},
    };

    const POD_CGROUP: &str = "/kubepods/burstable/pod0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0/3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";

    /// A denial of nvidia3 in a pod's container, with the kubelet's answer.
    fn pod_denied(allocated: bool, verdict: Verdict) -> crate::model::record::Record {
        let mut r = denied(POD_CGROUP, "/dev/nvidia3", 195, 3);
        r.access.verdict = verdict;
        let mut container = (**r.container).clone();
        container.namespace = Some("ml".into());
        container.pod = Some("trainer-0".into());
        container.name = Some("cuda".into());
        r.container = Rc::new(Rendered::new(Container { ..container }));
        r.allocation = Some(Rc::new(Rendered::new(GpuAllocation {
            gpu: "GPU-3".into(),
            allocated,
            container_gpus: vec!["GPU-0".into()],
        })));
        r
    }

    #[test]
    fn a_gpu_the_pod_was_not_given_is_a_probe_with_no_wildcard_fix() {
        for verdict in [Verdict::DeniedByBpfPolicy, Verdict::DeniedAfterBpf] {
            let diag = diagnosis_naming(&pod_denied(false, verdict), Cause::NotAllocated);
            assert_has(&diag.explanation, "nvidia3 (c 195:3) is GPU GPU-3, which the kubelet did not allocate to pod ml/trainer-0 (container cuda) (it was given GPU-0)");
            assert_starts(
                &diag.hint,
                "nothing, if the workload needs only the GPUs it was given",
            );
            assert_has(&diag.hint, "`resources.limits: {nvidia.com/gpu: N}`");
            assert!(!diag.hint.contains("195:*"), "{}", diag.hint);
        }
    }

    #[test]
    fn an_allocated_gpu_denied_is_the_incident_not_a_probe() {
        let r = pod_denied(true, Verdict::DeniedByBpfPolicy);
        let diag = diagnosis_of(&r);
        assert_ne!(diag.cause, Cause::NotAllocated);
        // Requested and allocated: the device plugin did not pass it.
        assert_starts(
            &diag.hint,
            "the kubelet allocated GPU GPU-3 to this container, yet its device rules do not allow the node",
        );
        assert_has(&diag.hint, "`PASS_DEVICE_SPECS=true`");
        assert_has(&diag.hint, "c 195:3 rw");
        assert!(!diag.hint.contains("195:*"), "{}", diag.hint);
    }
}
