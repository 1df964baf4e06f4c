//! The thread running here: its ids, and its uid when asked. Where the
//! loader found the chain to them (TASK_CHAIN: the device hooks may get
//! their task typed by BTF there, as the open path's programs may, and the
//! kernel took these very loads), one helper call (bpf_get_current_task_btf)
//! and loads the verifier checks against that BTF; elsewhere bpf_get_current_pid_tgid, and
//! bpf_get_current_uid_gid for the uid, which maps it through the initial
//! user namespace (a call and a loop; that namespace maps every uid to
//! itself). Each helper call is a few ns of a repeat where returns go
//! through a thunk (docs/benchmarks.md).

use core::ptr::{null, read_volatile};

use aya_ebpf::helpers::{
    bpf_get_current_pid_tgid, bpf_get_current_task_btf, bpf_get_current_uid_gid,
};
use gpu_trace_common::TaskChain;

use crate::maps::TASK_CHAIN;

pub struct CurrentThread {
    /// As bpf_get_current_pid_tgid gives it: the process id above, the
    /// thread id below.
    pub pid_tgid: u64,
    /// The task, typed by BTF; null (and unread: see `typed_task`) where
    /// the chain is unknown.
    task: *const u8,
}

/// The running task typed by BTF, where the chain is known (a program
/// that needs none of the thread's ids; see CurrentThread::typed_task).
#[inline(always)]
pub fn typed_task() -> Option<*const u8> {
    chain().map(|_| task_btf())
}

/// Only where the chain is known: the verifier knows no other way to it.
#[inline(always)]
fn task_btf() -> *const u8 {
    // SAFETY: a helper without arguments.
    unsafe { bpf_get_current_task_btf() }
        .cast::<u8>()
        .cast_const()
}

/// Where the chain is known. Decided by the read-only global alone (not
/// by the task pointer's null check, which verifiers before 6.4 cannot
/// settle for a task typed by BTF, and would walk both ways after).
#[inline(always)]
fn chain() -> Option<TaskChain> {
    let chain = TASK_CHAIN.load();
    (chain.task_cred != 0).then_some(chain)
}

impl CurrentThread {
    #[inline(always)]
    pub fn here() -> Self {
        // A read-only global: the verifier knows it, so each load below has
        // a fixed offset it checks, and it walks only one of the two ways.
        let Some(chain) = chain() else {
            return Self {
                pid_tgid: bpf_get_current_pid_tgid(),
                task: null(),
            };
        };
        let task = task_btf();
        // SAFETY: the running task, typed by BTF: the verifier checks each
        // load (a faulting one would read 0).
        unsafe {
            let tid = read_volatile(task.add(chain.task_pid as usize).cast::<u32>());
            let pid = read_volatile(task.add(chain.task_tgid as usize).cast::<u32>());
            Self {
                pid_tgid: ((pid as u64) << 32) | tid as u64,
                task,
            }
        }
    }

    #[inline(always)]
    pub fn uid(&self) -> u32 {
        let Some(chain) = chain() else {
            return bpf_get_current_uid_gid() as u32;
        };
        // SAFETY: as in `here`: task_struct.cred, then cred.uid.
        unsafe {
            let cred = read_volatile(self.task.add(chain.task_cred as usize).cast::<*const u8>());
            // Never null for a running task, but where BTF tags the pointer
            // __rcu (kernels built with clang) the verifier requires the check.
            if cred.is_null() {
                return bpf_get_current_uid_gid() as u32;
            }
            read_volatile(cred.add(chain.cred_uid as usize).cast::<u32>())
        }
    }

    /// The task typed by BTF, where the chain is known: loads of its own
    /// members (at offsets from the same BTF the loader's probe tried)
    /// need no helper call.
    #[inline(always)]
    pub fn typed_task(&self) -> Option<*const u8> {
        chain().map(|_| self.task)
    }
}
