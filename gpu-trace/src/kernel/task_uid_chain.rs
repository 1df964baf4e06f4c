//! Where the running task's uid lies, for the device hooks' two-load read
//! of it (gpu-trace-ebpf's current_uid.rs): offsets from the kernel's BTF,
//! kept only where a device program may ask for its task typed by BTF
//! (bpf_get_current_task_btf) and the verifier takes the two loads the
//! programs make (asked with a program of six instructions that makes
//! them, so a kernel whose BTF types `cred` differently refuses the probe,
//! not the device hook). Elsewhere the uid comes from
//! bpf_get_current_uid_gid, the same uid a few ns dearer; no note is made.

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
        .filter(|&chain| device_programs_read(chain))
        .unwrap_or_default()
}

fn chain_in(btf: &KernelBtf) -> anyhow::Result<TaskUidChain> {
    Ok(TaskUidChain {
        task_cred: btf.member_offset("task_struct", "cred")?,
        cred_uid: btf.member_offset("cred", "uid")?,
    })
}

/// Whether a cgroup_device program may read the uid through `chain` as
/// current_uid.rs does (the fexit hook, a tracing program, got
/// bpf_get_current_task_btf before device programs did).
fn device_programs_read(chain: TaskUidChain) -> bool {
    let (Ok(task_cred), Ok(cred_uid)) = (
        i16::try_from(chain.task_cred),
        i16::try_from(chain.cred_uid),
    ) else {
        return false;
    };
    let insn = Insn::new;
    let probe = [
        insn(0x85, 0, 0, 0, GET_CURRENT_TASK_BTF), // call bpf_get_current_task_btf
        insn(0x79, 1, 0, task_cred, 0),            // r1 = task->cred
        insn(0x15, 1, 0, 1, 0),                    // null: skip the next load
        insn(0x61, 1, 1, cred_uid, 0),             // r1 = cred->uid
        insn(0xb7, 0, 0, 0, 1),                    // r0 = 1: allow
        insn(0x95, 0, 0, 0, 0),                    // exit
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
