//! The uid of the thread running here, as bpf_get_current_uid_gid gives
//! it. That helper maps the uid and the gid through the initial user
//! namespace, a call and a loop each: about 7 ns of a repeat's 60 on the
//! machine measured (docs/benchmarks.md). Where the loader found the
//! chain to it (TASK_UID_CHAIN: the device hooks get their task typed by
//! BTF there), it is two loads the verifier checks against that BTF; the
//! initial namespace maps every uid to itself.

use core::ptr::read_volatile;

use aya_ebpf::helpers::{bpf_get_current_task_btf, bpf_get_current_uid_gid};

use crate::maps::TASK_UID_CHAIN;

#[inline(always)]
pub fn current_uid() -> u32 {
    // A read-only global: the verifier knows it, so each load below has a
    // fixed offset it checks, and the way not taken is not even loaded.
    let chain = TASK_UID_CHAIN.load();
    if chain.task_cred == 0 {
        return bpf_get_current_uid_gid() as u32;
    }
    // SAFETY: the running task, typed by BTF: the verifier checks each load
    // (task_struct.cred, then cred.uid), and a faulting one reads 0.
    unsafe {
        let task = bpf_get_current_task_btf().cast::<u8>();
        let cred = read_volatile(task.add(chain.task_cred as usize).cast::<*const u8>());
        read_volatile(cred.add(chain.cred_uid as usize).cast::<u32>())
    }
}
