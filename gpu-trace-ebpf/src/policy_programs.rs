//! The device programs in force on the current task's cgroup2 cgroup,
//! read at a denial's sighting: a launch's cgroup may be removed (LXC
//! does so within the millisecond its container exits) before userspace
//! reads the event, and with it the list of programs that denied it.
//! Their ids let userspace read the programs themselves, which outlive
//! the cgroup for a while.

use aya_ebpf::helpers::{bpf_get_current_task, bpf_probe_read_kernel};
use gpu_trace_common::{PolicyProgramsChain, SIGHTED_PROGRAMS};

use crate::maps::POLICY_PROGRAMS_CHAIN;

/// The ids in the kernel's order, 0 after the last; all 0 when the chain
/// is not set or the first reads fail.
#[inline(always)]
pub fn in_force() -> [u32; SIGHTED_PROGRAMS] {
    let mut ids = [0u32; SIGHTED_PROGRAMS];
    let chain: PolicyProgramsChain = POLICY_PROGRAMS_CHAIN.load();
    if chain.task_cgroups == 0 {
        return ids;
    }
    // SAFETY: a helper without arguments.
    let task = unsafe { bpf_get_current_task() };
    let Some(array) = effective_array(task, &chain) else {
        return ids;
    };
    let mut found = 0;
    for index in 0..SIGHTED_PROGRAMS {
        let item = array + u64::from(chain.array_items) + index as u64 * u64::from(chain.item_size);
        let Some(prog) = read::<u64>(item, chain.item_prog) else {
            break;
        };
        // The array ends with a null program.
        if prog == 0 {
            break;
        }
        // A program being detached in place is a dummy without an id.
        let Some(id) =
            read::<u64>(prog, chain.prog_aux).and_then(|aux| read::<u32>(aux, chain.aux_id))
        else {
            continue;
        };
        if id != 0 && found < SIGHTED_PROGRAMS {
            ids[found] = id;
            found += 1;
        }
    }
    ids
}

#[inline(always)]
fn effective_array(task: u64, chain: &PolicyProgramsChain) -> Option<u64> {
    let css_set = read::<u64>(task, chain.task_cgroups)?;
    let cgroup = read::<u64>(css_set, chain.css_set_dfl_cgrp)?;
    read::<u64>(cgroup, chain.cgroup_effective_device).filter(|&array| array != 0)
}

#[inline(always)]
fn read<T>(base: u64, offset: u32) -> Option<T> {
    // SAFETY: kernel memory read with the fault-tolerant helper.
    unsafe { bpf_probe_read_kernel((base + u64::from(offset)) as *const T).ok() }
}
