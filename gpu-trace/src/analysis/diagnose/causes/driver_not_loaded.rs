//! `driver-not-loaded`: the device check let the open by, and it failed
//! with ENXIO because no driver has the node's major at all: the module
//! was never loaded, or failed to load (often after a kernel update, when
//! DKMS did not build it for the new kernel). stale-major, tried before,
//! covers a driver that is loaded on another major.

use super::{
    super::{neighbour_modules, symptoms},
    prelude::*,
};
use crate::model::node::NvidiaNode;

pub(super) fn find(facts: &Facts, cx: &Context) -> Option<Finding> {
    let enxio = facts.verdict == Verdict::Allowed && facts.errno() == Some(libc::ENXIO);
    if !enxio || facts.driver.is_some() || cx.majors.is_registered(facts.major) {
        return None;
    }
    let path = facts.path_text();
    let neighbour = neighbour_modules::by_path(&path);
    let (module, load) = match neighbour {
        Some(n) => (n.module, n.load),
        None => module_of(facts, &path),
    };
    // What the job sees without a device next to the GPU: often nothing.
    let symptom = neighbour
        .and_then(|n| symptoms::of(n.role))
        .map(|s| format!(" {s}"))
        .unwrap_or_default();
    Some(Finding {
        explanation: format!(
            "{} is c {}:{} and the device policy allowed it, but no driver has major {} in /proc/devices: {module} is not loaded, so the node leads nowhere (ENXIO).{symptom}",
            prose(&path),
            facts.major,
            facts.minor,
            facts.major,
        ),
        fix: vec![
            format!("load it on the host: {load}"),
            "if it does not load (`modprobe` finds no module, or `dmesg` shows a version mismatch), it was not built for the running kernel: `dkms autoinstall -k \"$(uname -r)\"`, or reinstall the driver package for this kernel".to_string(),
        ],
    })
}

/// The module that gives the node's major, and how to load it.
fn module_of(facts: &Facts, path: &str) -> (&'static str, &'static str) {
    match facts.path.as_deref().and_then(NvidiaNode::from_path) {
        Some(NvidiaNode::Uvm | NvidiaNode::UvmTools) => (
            "nvidia_uvm",
            "`nvidia-modprobe -u -c=0` (or `modprobe nvidia_uvm`)",
        ),
        Some(NvidiaNode::Modeset) => ("nvidia_modeset", "`modprobe nvidia_modeset`"),
        Some(NvidiaNode::Nvlink) => ("nvidia's NVLink driver", "`modprobe nvidia`"),
        Some(_) => ("the nvidia module", "`modprobe nvidia` (or `nvidia-modprobe -c=0`)"),
        None if path.starts_with("/dev/kfd") => ("amdgpu", "`modprobe amdgpu`"),
        None if path.starts_with("/dev/dri/") => (
            "the GPU's DRM driver",
            "the GPU's driver (`modprobe i915`, `xe`, `amdgpu` or `nouveau`; `lspci -k` says which)",
        ),
        None if path.starts_with("/dev/accel/") => (
            "the accelerator's driver",
            "`modprobe habanalabs` or `modprobe intel_vpu`, as the device needs",
        ),
        None => (
            "the driver that made this node",
            "the module that registers this major (`lspci -k` names the device's driver)",
        ),
    }
}

#[cfg(test)]
mod tests {
    use crate::analysis::diagnose::testing::*;

    #[test]
    fn enxio_on_a_major_no_driver_has_is_a_driver_not_loaded() {
        // 600: no driver in the test's /proc/devices has it, nor has
        // nvidia-caps any major there (else it would be stale-major's).
        let r = allowed_failing(
            "/lxc/200",
            "/dev/nvidia-caps/nvidia-cap1",
            600,
            1,
            libc::ENXIO,
        );
        let diag = diagnosis_naming(&r, Cause::DriverNotLoaded);
        assert_has(
            &diag.explanation,
            "is c 600:1 and the device policy allowed it, but no driver has major 600 in /proc/devices: the nvidia module is not loaded",
        );
        assert_starts(&diag.hint, "load it on the host: `modprobe nvidia`");
        assert_has(&diag.hint, "dkms autoinstall -k \"$(uname -r)\"");
        let kfd = allowed_failing("/lxc/200", "/dev/kfd", 600, 0, libc::ENXIO);
        assert_has(
            &diagnosis_naming(&kfd, Cause::DriverNotLoaded).hint,
            "`modprobe amdgpu`",
        );
    }

    #[test]
    fn a_device_next_to_the_gpu_without_its_driver_names_its_module_and_what_the_job_sees() {
        for (path, module, load, sees) in [
            (
                "/dev/infiniband/uverbs0",
                "ib_uverbs is not loaded",
                "load it on the host: `modprobe ib_uverbs` with the NIC's RDMA driver",
                "fall back to TCP sockets",
            ),
            (
                "/dev/infiniband/umad0",
                "ib_umad is not loaded",
                "load it on the host: `modprobe ib_umad`",
                "fall back to TCP sockets",
            ),
            (
                "/dev/nvidia-caps-imex-channels/channel0",
                "the nvidia module (it registers the IMEX channels) is not loaded",
                "load it on the host: `modprobe nvidia`",
                "CUDA_ERROR_NOT_PERMITTED",
            ),
            (
                "/dev/gdrdrv",
                "gdrdrv (gdrcopy's module) is not loaded",
                "load it on the host: `modprobe gdrdrv`",
                "through host memory",
            ),
            (
                "/dev/nvidia-fs3",
                "nvidia-fs (GPUDirect Storage's module) is not loaded",
                "load it on the host: `modprobe nvidia-fs`",
                "through host memory",
            ),
            (
                "/dev/vfio/12",
                "vfio is not loaded",
                "load it on the host: `modprobe vfio-pci`",
                "cannot be passed through",
            ),
        ] {
            let r = allowed_failing("/lxc/200", path, 600, 0, libc::ENXIO);
            let diag = diagnosis_naming(&r, Cause::DriverNotLoaded);
            assert_has(&diag.explanation, module);
            assert_has(&diag.explanation, sees);
            assert_starts(&diag.hint, load);
        }
    }

    #[test]
    fn a_major_a_driver_has_is_not_this_cause() {
        // 195 is in the test's /proc/devices: a driver answers there.
        let r = allowed_failing("/lxc/200", "/dev/nvidia0", 195, 0, libc::ENXIO);
        assert!(diagnose(&mut Diagnoser::default(), &r)
            .is_none_or(|d| d.cause != Cause::DriverNotLoaded));
        // nvidia-uvm loaded on 509, its node on 600: stale-major, tried first.
        let stale = allowed_failing("/lxc/200", "/dev/nvidia-uvm", 600, 0, libc::ENXIO);
        assert_eq!(diagnosis_of(&stale).cause, Cause::StaleMajor);
        let eperm = allowed_failing("/lxc/200", "/dev/nvidia-uvm", 600, 0, libc::EPERM);
        assert!(diagnose(&mut Diagnoser::default(), &eperm)
            .is_none_or(|d| d.cause != Cause::DriverNotLoaded));
    }
}
