//! The current task's cgroup in the v1 devices hierarchy, read at the
//! sighting: by the time userspace reads the event, a short-lived process
//! (a `docker exec` probe, a crashing CUDA launch) is gone, and with it the
//! /proc/PID/cgroup line that named the devices.list which denied it.

use aya_ebpf::helpers::{bpf_get_current_task, bpf_probe_read_kernel};
use gpu_trace_common::V1DevicesChain;

use crate::maps::V1_DEVICES_CHAIN;

/// The kernfs id of the current task's v1 devices cgroup
/// (task->cgroups->subsys[devices]->cgroup->kn->id); 0 when the chain is
/// not set (no v1 devices hierarchy) or a read fails.
#[inline(always)]
pub fn current_cgroup() -> u64 {
    let chain: V1DevicesChain = V1_DEVICES_CHAIN.load();
    if chain.task_cgroups == 0 {
        return 0;
    }
    // SAFETY: a helper without arguments.
    let task = unsafe { bpf_get_current_task() };
    follow(task, &chain).unwrap_or(0)
}

#[inline(always)]
fn follow(task: u64, chain: &V1DevicesChain) -> Option<u64> {
    // SAFETY (every read): kernel memory read with the fault-tolerant helper.
    let pointer_at = |base: u64, offset: u32| unsafe {
        bpf_probe_read_kernel((base + u64::from(offset)) as *const u64).ok()
    };
    let css_set = pointer_at(task, chain.task_cgroups)?;
    let css = pointer_at(css_set, chain.css_set_devices)?;
    let cgroup = pointer_at(css, chain.css_cgroup)?;
    let kn = pointer_at(cgroup, chain.cgroup_kn)?;
    pointer_at(kn, chain.kn_id)
}
