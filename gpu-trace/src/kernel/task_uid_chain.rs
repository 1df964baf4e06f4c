//! Where the running task's uid lies, for the device hooks' two-load read
//! of it (gpu-trace-ebpf's current_uid.rs): offsets from the kernel's BTF,
//! kept only where a device program may ask for its task typed by BTF
//! (bpf_get_current_task_btf; the kernel is asked with a program of three
//! instructions). Elsewhere the uid comes from bpf_get_current_uid_gid, a
//! few ns dearer per denial; no note is made, nothing is lost.

use gpu_trace_common::TaskUidChain;
use gpu_trace_policy::Insn;

use crate::host::kernel_btf::KernelBtf;
use crate::kernel::bpf_sys::load_device_program;

/// bpf_get_current_task_btf's number in the kernel's list of helpers.
const GET_CURRENT_TASK_BTF: i32 = 158;

/// The chain for this kernel; all 0 (the helper) where it cannot be used.
pub fn for_this_kernel(btf: Result<&KernelBtf, &str>) -> TaskUidChain {
    btf.ok()
        .and_then(|btf| chain_in(btf).ok())
        .filter(|_| device_programs_get_their_task())
        .unwrap_or_default()
}

fn chain_in(btf: &KernelBtf) -> anyhow::Result<TaskUidChain> {
    Ok(TaskUidChain {
        task_cred: btf.member_offset("task_struct", "cred")?,
        cred_uid: btf.member_offset("cred", "uid")?,
    })
}

/// Whether a cgroup_device program may call bpf_get_current_task_btf (the
/// fexit hook, a tracing program, may wherever that one may).
fn device_programs_get_their_task() -> bool {
    let insn = |code, dst, imm| Insn {
        code,
        dst,
        src: 0,
        off: 0,
        imm,
    };
    let probe = [
        insn(0x85, 0, GET_CURRENT_TASK_BTF), // call bpf_get_current_task_btf
        insn(0xb7, 0, 1),                    // r0 = 1: allow
        insn(0x95, 0, 0),                    // exit
    ];
    load_device_program("gpu_trace_uid", &probe).is_ok()
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
        // Neither is its struct's first member.
        assert!(
            [chain.task_cred, chain.cred_uid]
                .iter()
                .all(|&offset| offset > 0 && offset < 8192),
            "{chain:?}"
        );
    }

    #[test]
    fn without_btf_the_helper_reads_the_uid() {
        assert_eq!(for_this_kernel(Err("no BTF")), TaskUidChain::default());
    }
}
