//! `node-missing`: the open failed before the device check and the node is
//! not there (ENOENT; EACCES is file-permissions', tried before).

use super::{
    super::{
        neighbour_modules::{self, NeighbourModule},
        symptoms,
    },
    prelude::*,
};
use crate::{model::node::NvidiaNode, runtime};

pub(super) fn find(facts: &Facts, cx: &Context) -> Option<Finding> {
    if facts.verdict != Verdict::FailedBeforeDeviceCheck {
        return None;
    }
    let path = facts.path_text();
    if let Some(neighbour) = neighbour_modules::by_path(&path) {
        return Some(neighbour_missing(facts, &path, neighbour));
    }
    let (why, fix) = match NvidiaNode::from_path(path.as_bytes()) {
        Some(NvidiaNode::Uvm | NvidiaNode::UvmTools) => (
            if (cx.host.uvm_loaded)() {
                "the nvidia_uvm module is loaded but the node was never created"
            } else {
                "the nvidia_uvm module is not loaded, so the node was never created"
            },
            "on the host: `nvidia-modprobe -u -c=0` (loads nvidia_uvm and creates /dev/nvidia-uvm and /dev/nvidia-uvm-tools)".to_string(),
        ),
        Some(NvidiaNode::Modeset) => (
            "nvidia-modeset was never created",
            "on the host: `nvidia-modprobe -m` (loads nvidia_modeset and creates /dev/nvidia-modeset)".to_string(),
        ),
        Some(NvidiaNode::Gpu(n)) => ("the GPU node was never created", format!("on the host: `nvidia-modprobe -c={n}`")),
        Some(NvidiaNode::Cap(_)) => (
            "the MIG capability node was never created",
            "on the host: `nvidia-modprobe -f /proc/driver/nvidia/capabilities/...` for the capability, or `nvidia-ctk system create-device-nodes --control-devices`".to_string(),
        ),
        _ if path.starts_with("/dev/kfd") => (
            "AMD's kfd node was never created (amdgpu makes it when it loads)",
            "on the host: check that amdgpu is loaded (`lsmod | grep amdgpu`, `ls /sys/class/kfd`)".to_string(),
        ),
        _ if path.starts_with("/dev/dri/") => (
            "the DRM node does not exist",
            "on the host: check that the GPU's driver is loaded (`ls /sys/class/drm`)".to_string(),
        ),
        _ if path.starts_with("/dev/accel/") => (
            "the accel node does not exist",
            "on the host: check that the accelerator's driver is loaded (`ls /sys/class/accel`: habanalabs, intel_vpu)".to_string(),
        ),
        _ => ("the node does not exist", "check that the NVIDIA driver is loaded on the host (`nvidia-smi`)".to_string()),
    };
    Some(Finding {
        explanation: format!("{} does not exist (ENOENT): {why}", prose(&path)),
        fix: with_visibility(facts, fix),
    })
}

/// A device next to the GPU that is not there: its driver is not loaded,
/// or (the usual case in a container) the node was never passed in. What
/// the job then sees is the symptom's, often nothing but a slower run.
fn neighbour_missing(facts: &Facts, path: &str, neighbour: &NeighbourModule) -> Finding {
    Finding {
        explanation: format!(
            "{} does not exist (ENOENT): {} is not loaded on the host, or the node was not passed in.{}",
            prose(path),
            neighbour.module,
            symptoms::of(neighbour.role)
                .map(|s| format!(" {s}"))
                .unwrap_or_default()
        ),
        fix: with_visibility(facts, format!("on the host, if it is not loaded: {}", neighbour.load)),
    }
}

/// `fix`, then, in a container, making the node visible there.
fn with_visibility(facts: &Facts, fix: String) -> Vec<String> {
    let mut fixes = vec![fix];
    if runtime::of(facts.container().runtime).is_container() {
        fixes.push(format!(
            "then make it visible in {} (it needs the node bind-mounted or passed as a device)",
            facts.label()
        ));
    }
    fixes
}

#[cfg(test)]
mod tests {
    use crate::analysis::diagnose::testing::*;

    #[test]
    fn enoent_is_a_missing_node_with_its_modprobe() {
        let mut d = Diagnoser::default();
        d.host.uvm_loaded = || false;
        let missing = failed_before_check("/", "/dev/nvidia-uvm", 0, 0, libc::ENOENT);
        let diag = diagnosed_as(&mut d, &missing, Cause::NodeMissing);
        assert_has(&diag.fix[0], "nvidia-modprobe -u -c=0");
        assert_has(&diag.explanation, "the nvidia_uvm module is not loaded");
        let modeset = failed_before_check("/", "/dev/nvidia-modeset", 0, 0, libc::ENOENT);
        assert_has(
            &diagnose(&mut d, &modeset).expect("diagnosis").fix[0],
            "nvidia-modprobe -m",
        );
        // The module read goes through the seam.
        let mut d = Diagnoser::default();
        d.host.uvm_loaded = || true;
        let diag = diagnose(&mut d, &missing).expect("diagnosis");
        assert_has(&diag.explanation, "the nvidia_uvm module is loaded but");
    }

    #[test]
    fn a_missing_node_next_to_the_gpu_names_its_module_and_what_the_job_sees() {
        let mut d = Diagnoser::default();
        let verbs =
            failed_before_check(DOCKER_SCOPE, "/dev/infiniband/uverbs0", 0, 0, libc::ENOENT);
        let diag = diagnosed_as(&mut d, &verbs, Cause::NodeMissing);
        assert_has(
            &diag.explanation,
            "does not exist (ENOENT): ib_uverbs is not loaded on the host, or the node was not passed in.",
        );
        assert_has(
            &diag.explanation,
            "fall back to TCP sockets without an error",
        );
        assert_starts(
            &diag.fix[0],
            "on the host, if it is not loaded: `modprobe ib_uverbs`",
        );
        assert_starts(&diag.fix[1], "then make it visible in");
        assert!(!diag.hint.contains("nvidia-smi"), "{}", diag.hint);
        let group = failed_before_check(DOCKER_SCOPE, "/dev/vfio/12", 0, 0, libc::ENOENT);
        let diag = diagnosed_as(&mut d, &group, Cause::NodeMissing);
        assert_has(&diag.explanation, "cannot be passed through");
    }
}
