//! The device programs in force on the current task's cgroup2 cgroup,
//! read at a denial's sighting: a launch's cgroup may be removed (LXC
//! does so within the millisecond its container exits) before userspace
//! reads the event, and with it the list of programs that denied it.
//! Their ids let userspace read the programs themselves, which outlive
//! the cgroup for a while.

use aya_ebpf::helpers::{bpf_get_current_task, generated::bpf_probe_read_kernel};
use gpu_trace_common::SIGHTED_PROGRAMS;

use crate::maps::{
    POLICY_ARRAY_ITEMS, POLICY_AUX_ID, POLICY_CGROUP_EFFECTIVE_DEVICE, POLICY_CSS_SET_DFL_CGRP,
    POLICY_ITEM_PROG, POLICY_ITEM_SIZE, POLICY_PROG_AUX, POLICY_TASK_CGROUPS,
};

/// Writes the ids, in the kernel's order, to the SIGHTED_PROGRAMS slots at
/// `ids` (an event's, in the ring buffer), 0 after the last (and for a
/// program being detached in place, a dummy without one); all 0 unless
/// `denied`, or when the chain is not set or the first reads fail.
///
/// No stack: the open function's fexit program has none to spare on 5.10
/// (512 bytes in all, and 32 more were refused), so each read lands in
/// `scratch`, 8 bytes of the same event that the caller fills in after.
/// And straight-line: a failed read leaves 0, so only the array's end
/// branches; branches that rejoin the loop multiplied the states the
/// verifier walks.
///
/// # Safety
/// `ids` points to SIGHTED_PROGRAMS writable u32s, `scratch` to a
/// writable u64, both in the caller's reserved record.
#[inline(always)]
pub unsafe fn write_in_force(ids: *mut u32, scratch: *mut u64, denied: bool) {
    for index in 0..SIGHTED_PROGRAMS {
        // SAFETY: within the caller's slots.
        unsafe { ids.add(index).write(0) };
    }
    let task_cgroups = POLICY_TASK_CGROUPS.load();
    if !denied || task_cgroups == 0 {
        return;
    }
    // SAFETY (each read): `scratch` is the caller's, as above.
    let read =
        |base: u64, offset: u32, size: u32| unsafe { read_into(scratch, base, offset, size) };
    // SAFETY: a helper without arguments.
    let task = unsafe { bpf_get_current_task() };
    let css_set = read(task, task_cgroups, 8);
    let cgroup = read(css_set, POLICY_CSS_SET_DFL_CGRP.load(), 8);
    let array = read(cgroup, POLICY_CGROUP_EFFECTIVE_DEVICE.load(), 8);
    if array == 0 {
        return;
    }
    let items = array + u64::from(POLICY_ARRAY_ITEMS.load());
    let item_size = u64::from(POLICY_ITEM_SIZE.load());
    for index in 0..SIGHTED_PROGRAMS {
        let prog = read(items + index as u64 * item_size, POLICY_ITEM_PROG.load(), 8);
        // The array ends with a null program.
        if prog == 0 {
            break;
        }
        let aux = read(prog, POLICY_PROG_AUX.load(), 8);
        let id = read(aux, POLICY_AUX_ID.load(), 4) as u32;
        // SAFETY: within the caller's slots.
        unsafe { ids.add(index).write(id) };
    }
}

/// The `size` bytes (4 or 8) at `base + offset`, read into `scratch`; 0
/// where they cannot be read (the helper clears its destination, and its
/// result is not looked at, which would be a branch).
///
/// # Safety
/// `scratch` points to a writable u64.
#[inline(always)]
unsafe fn read_into(scratch: *mut u64, base: u64, offset: u32, size: u32) -> u64 {
    // SAFETY: per the caller; the kernel memory is read with the
    // fault-tolerant helper.
    unsafe {
        scratch.write(0);
        bpf_probe_read_kernel(scratch.cast(), size, (base + u64::from(offset)) as *const _);
        scratch.read()
    }
}
