//! The uid of the thread running here, as bpf_get_current_uid_gid gives
//! it. That helper maps the uid and the gid through the initial user
//! namespace, a call and a loop each: about 9 ns of a repeat on the
//! machine measured (docs/benchmarks.md). Where the loader found the
//! chain to it (TASK_UID_CHAIN: the device hooks get their task typed by
//! BTF there, and the kernel took these very loads), it is two loads the
//! verifier checks against that BTF; the initial namespace maps every uid
//! to itself.

use core::ptr::read_volatile;

use aya_ebpf::helpers::{bpf_get_current_task_btf, bpf_get_current_uid_gid};

use crate::maps::TASK_UID_CHAIN;

#[inline(always)]
pub fn current_uid() -> u32 {
    // A read-only global: the verifier knows it, so each load below has a
    // fixed offset it checks, and it walks only one of the two ways.
    let chain = TASK_UID_CHAIN.load();
    if chain.task_cred == 0 {
        return bpf_get_current_uid_gid() as u32;
    }
    // SAFETY: the running task, typed by BTF: the verifier checks each load
    // (task_struct.cred, then cred.uid), and a faulting one reads 0.
    unsafe {
        let task = bpf_get_current_task_btf().cast::<u8>();
        let cred = read_volatile(task.add(chain.task_cred as usize).cast::<*const u8>());
        // Never null for a running task, but where BTF tags the pointer
        // __rcu (kernels built with clang) the verifier requires the check.
        if cred.is_null() {
            return bpf_get_current_uid_gid() as u32;
        }
        read_volatile(cred.add(chain.cred_uid as usize).cast::<u32>())
    }
}
