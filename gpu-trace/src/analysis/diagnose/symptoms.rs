//! What a user sees when a device next to the GPU is refused: often no
//! error at all, only a slower job. Said after whichever cause explains the
//! refusal, since the symptom is the device's, not the cause's.

use crate::model::vendor::Role;

/// The symptom of a refused node of `role`, for the devices next to the
/// GPU; None for a GPU's own nodes, whose symptoms the causes say.
pub(super) fn of(role: Role) -> Option<&'static str> {
    Some(match role {
        Role::Rdma => {
            "Without its RDMA nodes NCCL, UCX and MPI find no RDMA device and fall back to TCP sockets without an error: the job runs, slowly (`ibv_devinfo` in the container lists no device)."
        }
        Role::Imex => {
            "Without its IMEX channel CUDA's multi-node memory calls (cuMemCreate or cuMemImportFromShareableHandle with fabric handles) fail with CUDA_ERROR_NOT_PERMITTED."
        }
        Role::Gpudirect => {
            "Without it GPUDirect falls back to copies through host memory (gdrcopy's, or GPUDirect Storage's compatibility mode): the job runs, slower, often without an error."
        }
        Role::Vfio => {
            "Without its VFIO group the device cannot be passed through: the VM or user-space driver that needs it fails at start."
        }
        Role::Nvswitch => {
            "Without its NVSwitch nodes NVIDIA's Fabric Manager cannot manage the NVSwitch fabric and fails to start; on NVSwitch systems (HGX, DGX) CUDA then refuses work with CUDA_ERROR_SYSTEM_NOT_READY (\"system not yet initialized\")."
        }
        Role::Compute | Role::Render | Role::Display | Role::Control | Role::Uvm | Role::Caps => {
            return None
        }
    })
}

#[cfg(test)]
mod tests {
    use crate::{analysis::diagnose::testing::*, model::vendor::Role};

    #[test]
    fn a_denied_verbs_node_says_the_job_goes_slow_and_grants_that_node_alone() {
        let mut r = denied(DOCKER_CGROUPFS, "/dev/infiniband/uverbs1", 231, 193);
        r.driver = Some("infiniband_verbs".into());
        r.role = Some(Role::Rdma);
        let diag = diagnosis_naming(&r, Cause::DeviceDenied);
        assert!(
            diag.explanation
                .contains("fall back to TCP sockets without an error"),
            "{}",
            diag.explanation
        );
        // That NIC's node alone, by the numbers the kernel saw (never the
        // path opened, which the tenant may have made), and no GPU advice.
        assert_eq!(
            diag.hint,
            "recreate the container with `--device /dev/char/231:193` (or `--device-cgroup-rule='c 231:193 rmw'`)"
        );
    }

    #[test]
    fn each_neighbour_says_its_symptom_and_a_gpu_node_none() {
        for (role, words) in [
            (Role::Imex, "CUDA_ERROR_NOT_PERMITTED"),
            (Role::Gpudirect, "through host memory"),
            (Role::Vfio, "cannot be passed through"),
            (Role::Nvswitch, "CUDA_ERROR_SYSTEM_NOT_READY"),
        ] {
            let mut r = denied(DOCKER_CGROUPFS, "/dev/x", 500, 0);
            r.role = Some(role);
            assert!(diagnosis_of(&r).explanation.contains(words), "{role:?}");
        }
        let mut gpu = denied(DOCKER_CGROUPFS, "/dev/nvidia0", 195, 0);
        gpu.role = Some(Role::Compute);
        assert!(super::of(Role::Compute).is_none());
        assert!(!diagnosis_of(&gpu).explanation.contains("Without"));
    }
}
