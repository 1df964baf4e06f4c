//! Where, in this kernel's memory, the device programs in force on a
//! task's cgroup2 cgroup are: the offsets gpu-trace-ebpf's
//! policy_programs.rs follows at a denial's sighting, from the kernel's BTF.

use gpu_trace_common::PolicyProgramsChain;

use crate::host::kernel_btf::KernelBtf;

/// The chain for this kernel; all 0 (not followed), with a note saying
/// what that costs, when the BTF lacks a link.
pub fn for_this_kernel(
    btf: Result<&KernelBtf, &str>,
    notes: &mut Vec<String>,
) -> PolicyProgramsChain {
    match btf.map_err(|e| anyhow::anyhow!("{e}")).and_then(chain_in) {
        Ok(chain) => chain,
        Err(e) => {
            notes.push(format!(
                "{e:#}: a denial in a cgroup removed before its event is read keeps no culprit"
            ));
            PolicyProgramsChain::default()
        }
    }
}

fn chain_in(btf: &KernelBtf) -> anyhow::Result<PolicyProgramsChain> {
    const POINTER: u32 = 8;
    // The array's index: cgroup_bpf_attach_type since 5.15, the UAPI's
    // bpf_attach_type before.
    let device = btf
        .enum_value("cgroup_bpf_attach_type", "CGROUP_DEVICE")
        .or_else(|_| btf.enum_value("bpf_attach_type", "BPF_CGROUP_DEVICE"))?;
    Ok(PolicyProgramsChain {
        task_cgroups: btf.member_offset("task_struct", "cgroups")?,
        css_set_dfl_cgrp: btf.member_offset("css_set", "dfl_cgrp")?,
        cgroup_effective_device: btf.member_offset("cgroup", "bpf")?
            + btf.member_offset("cgroup_bpf", "effective")?
            + device * POINTER,
        array_items: btf.member_offset("bpf_prog_array", "items")?,
        item_size: btf.struct_size("bpf_prog_array_item")?,
        item_prog: btf.member_offset("bpf_prog_array_item", "prog")?,
        prog_aux: btf.member_offset("bpf_prog", "aux")?,
        aux_id: btf.member_offset("bpf_prog_aux", "id")?,
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
        // An item is a program and its storage (or cookie): 16 or 24 bytes.
        assert!(matches!(chain.item_size, 16 | 24), "{chain:?}");
        assert!(chain.task_cgroups > 256 && chain.aux_id < 512, "{chain:?}");
    }
}
