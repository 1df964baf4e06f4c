//! The device programs in force on the current task's cgroup2 cgroup,
//! read at a denial's sighting: a launch's cgroup may be removed (LXC
//! does so within the millisecond its container exits) before userspace
//! reads the event, and with it the list of programs that denied it.
//! Their ids let userspace read the programs themselves, which outlive
//! the cgroup for a while.

use aya_ebpf::helpers::{bpf_get_current_task, generated::bpf_probe_read_kernel};
use gpu_trace_common::{PolicyProgramsChain, SIGHTED_PROGRAMS};

use crate::maps::POLICY_PROGRAMS_CHAIN;

/// Writes the ids, in the kernel's order, to the SIGHTED_PROGRAMS slots at
/// `ids` (an event's, in the ring buffer), 0 after the last (and for a
/// program being detached in place, a dummy without one); all 0 unless
/// `denied`, or when the chain is not set or the first reads fail.
///
/// Written where they go, not gathered on the stack: the open function's
/// fexit program had 32 bytes too few for that on 5.10 (512 in all). And
/// straight-line: a failed read leaves 0 (the helper clears its
/// destination), so only the array's end branches; branches that rejoin
/// the loop multiplied the states the verifier walks.
///
/// # Safety
/// `ids` points to SIGHTED_PROGRAMS writable u32s.
#[inline(always)]
pub unsafe fn write_in_force(ids: *mut u32, denied: bool) {
    for index in 0..SIGHTED_PROGRAMS {
        // SAFETY: within the caller's slots.
        unsafe { ids.add(index).write(0) };
    }
    let chain: PolicyProgramsChain = POLICY_PROGRAMS_CHAIN.load();
    if !denied || chain.task_cgroups == 0 {
        return;
    }
    // SAFETY: a helper without arguments.
    let task = unsafe { bpf_get_current_task() };
    let css_set = read::<u64>(task, chain.task_cgroups);
    let cgroup = read::<u64>(css_set, chain.css_set_dfl_cgrp);
    let array = read::<u64>(cgroup, chain.cgroup_effective_device);
    if array == 0 {
        return;
    }
    let items = array + u64::from(chain.array_items);
    for index in 0..SIGHTED_PROGRAMS {
        let prog = read::<u64>(items + index as u64 * u64::from(chain.item_size), chain.item_prog);
        // The array ends with a null program.
        if prog == 0 {
            break;
        }
        let aux = read::<u64>(prog, chain.prog_aux);
        // SAFETY: within the caller's slots.
        unsafe { ids.add(index).write(read::<u32>(aux, chain.aux_id)) };
    }
}

/// The value at `base + offset`, or 0 where it cannot be read: the
/// helper's result is not looked at, which would be a branch.
#[inline(always)]
fn read<T: Default>(base: u64, offset: u32) -> T {
    let mut value = T::default();
    // SAFETY: kernel memory read with the fault-tolerant helper, into a
    // local of its size; on failure it zeroes the destination.
    unsafe {
        bpf_probe_read_kernel(
            (&raw mut value).cast(),
            core::mem::size_of::<T>() as u32,
            (base + u64::from(offset)) as *const _,
        )
    };
    value
}
