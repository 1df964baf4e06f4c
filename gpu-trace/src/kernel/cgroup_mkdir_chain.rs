//! Where a cgroup keeps its hierarchy's id and its own (gpu-trace-ebpf's
//! cgroup_names.rs), read from the kernel's BTF: with them the note of new
//! cgroups attaches to the raw tracepoint cgroup_mkdir, whose detach waits
//! for nothing. Without them the trace event stands in, its record giving
//! both; stopping then waits out the tracepoints' grace periods (about 75
//! ms here), which is no loss of facts, so no note is made.

use gpu_trace_common::CgroupMkdirChain;

use crate::host::kernel_btf::KernelBtf;

/// The chain for this kernel; all 0 (the trace event) when BTF lacks a link.
pub fn for_this_kernel(btf: Result<&KernelBtf, &str>) -> CgroupMkdirChain {
    btf.ok()
        .and_then(|btf| chain_in(btf).ok())
        .unwrap_or_default()
}

fn chain_in(btf: &KernelBtf) -> anyhow::Result<CgroupMkdirChain> {
    Ok(CgroupMkdirChain {
        cgroup_root: btf.member_offset("cgroup", "root")?,
        root_hierarchy_id: btf.member_offset("cgroup_root", "hierarchy_id")?,
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
        // None of the four is a struct's first member.
        assert!(
            [
                chain.cgroup_root,
                chain.root_hierarchy_id,
                chain.cgroup_kn,
                chain.kn_id
            ]
            .iter()
            .all(|&offset| offset > 0 && offset < 4096),
            "{chain:?}"
        );
        assert_eq!(for_this_kernel(Ok(&btf)), chain);
    }

    #[test]
    fn without_btf_the_chain_is_unknown() {
        assert_eq!(for_this_kernel(Err("no BTF")), CgroupMkdirChain::default());
    }
}
