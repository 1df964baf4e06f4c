//! Where, in this kernel's memory, a task's v1 devices cgroup is: the five
//! offsets the kernel programs follow at a sighting (gpu-trace-ebpf's
//! v1_devices.rs), read from the kernel's BTF. Only where a v1 devices
//! hierarchy is mounted: elsewhere no devices.list can deny, and the
//! programs read nothing.

use gpu_trace_common::V1DevicesChain;

use crate::host::{kernel_btf::KernelBtf, mountinfo::v1_controller_mount_in};

/// The chain for this host; all 0 (not followed) without a v1 devices
/// hierarchy or when the BTF lacks a link, with a note saying what that costs.
pub fn for_this_host(btf: Result<&KernelBtf, &str>, notes: &mut Vec<String>) -> V1DevicesChain {
    let mounted = std::fs::read_to_string("/proc/self/mountinfo")
        .ok()
        .and_then(|m| v1_controller_mount_in(&m, "devices"))
        .is_some();
    if !mounted {
        return V1DevicesChain::default();
    }
    match btf.map_err(|e| anyhow::anyhow!("{e}")).and_then(chain_in) {
        Ok(chain) => chain,
        Err(e) => {
            notes.push(format!(
                "{e:#}: a cgroup v1 devices.list denial is traced to its cgroup through \
                 /proc/PID/cgroup, which a process that exits at once no longer has"
            ));
            V1DevicesChain::default()
        }
    }
}

fn chain_in(btf: &KernelBtf) -> anyhow::Result<V1DevicesChain> {
    let devices = btf.enum_value("cgroup_subsys_id", "devices_cgrp_id")?;
    const POINTER: u32 = 8;
    Ok(V1DevicesChain {
        task_cgroups: btf.member_offset("task_struct", "cgroups")?,
        css_set_devices: btf.member_offset("css_set", "subsys")? + devices * POINTER,
        css_cgroup: btf.member_offset("cgroup_subsys_state", "cgroup")?,
        cgroup_kn: btf.member_offset("cgroup", "kn")?,
        kn_id: btf.member_offset("kernfs_node", "id")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_kernels_chain_is_found_in_its_btf() {
        let Some(btf) = KernelBtf::for_test() else {
            return;
        };
        let chain = chain_in(&btf).unwrap();
        // task_struct.cgroups lies far into the task; the rest are small.
        assert!(chain.task_cgroups > 256, "{chain:?}");
        assert!(chain.css_set_devices > 0 && chain.kn_id < 512, "{chain:?}");
    }
}
