//! Where the running task's ids and uid lie, for the device hooks' reads
//! of them (gpu-trace-ebpf's current_thread.rs): offsets from the kernel's
//! BTF, kept only where a device program may ask for its task typed by BTF
//! (bpf_get_current_task_btf) and the verifier takes the loads the
//! programs make (asked with a small program that makes them, so a kernel
//! whose BTF types them differently refuses the probe, not the device
//! hook). The same task then gives the saved registers' words too (its
//! stack pointer and syscall status, syscall_regs.rs). Elsewhere the ids
//! and uid come from bpf_get_current_pid_tgid and bpf_get_current_uid_gid,
//! and those words from bpf_probe_read_kernel: the same values a few ns
//! dearer; no note is made.

use gpu_trace_common::TaskChain;
use gpu_trace_policy::Insn;

use crate::host::kernel_btf::KernelBtf;
use crate::kernel::bpf_sys::load_device_program;

/// bpf_get_current_task_btf's number in the kernel's list of helpers.
const GET_CURRENT_TASK_BTF: i32 = 158;

/// The chain for this kernel; all 0 (the helpers) where it cannot be used.
/// `saved_registers`: the offsets of task_struct's stack pointer and
/// syscall status word the programs read too (0: not read).
pub fn for_this_kernel(
    btf: Result<&KernelBtf, &str>,
    saved_registers: SavedRegisterWords,
) -> TaskChain {
    btf.ok()
        .and_then(|btf| chain_in(btf).ok())
        .filter(|&chain| device_programs_read(chain, saved_registers))
        .unwrap_or_default()
}

/// Where task_struct's words that lead to the saved registers lie (see
/// tracer.rs): 0 for one the programs do not read.
#[derive(Clone, Copy, Default)]
pub struct SavedRegisterWords {
    /// `stack`, a pointer.
    pub task_stack: u32,
    /// `thread_info.status`, 32 bits.
    pub compat_status: u32,
}

fn chain_in(btf: &KernelBtf) -> anyhow::Result<TaskChain> {
    Ok(TaskChain {
        task_pid: btf.member_offset("task_struct", "pid")?,
        task_tgid: btf.member_offset("task_struct", "tgid")?,
        task_cred: btf.member_offset("task_struct", "cred")?,
        cred_uid: btf.member_offset("cred", "uid")?,
    })
}

/// Whether a cgroup_device program may read the ids, uid and saved
/// register words through `chain` as current_thread.rs and syscall_regs.rs
/// do (the fexit hook, a tracing program, got bpf_get_current_task_btf
/// before device programs did).
fn device_programs_read(chain: TaskChain, saved_registers: SavedRegisterWords) -> bool {
    let offsets = [
        chain.task_pid,
        chain.task_tgid,
        chain.task_cred,
        chain.cred_uid,
        saved_registers.task_stack,
        saved_registers.compat_status,
    ]
    .map(i16::try_from);
    let [Ok(task_pid), Ok(task_tgid), Ok(task_cred), Ok(cred_uid), Ok(task_stack), Ok(compat_status)] =
        offsets
    else {
        return false;
    };
    let insn = Insn::new;
    let mut probe = vec![
        insn(0x85, 0, 0, 0, GET_CURRENT_TASK_BTF), // call bpf_get_current_task_btf
        insn(0x61, 1, 0, task_pid, 0),             // r1 = task->pid
        insn(0x61, 1, 0, task_tgid, 0),            // r1 = task->tgid
    ];
    if task_stack != 0 {
        probe.push(insn(0x79, 1, 0, task_stack, 0)); // r1 = task->stack
    }
    if compat_status != 0 {
        probe.push(insn(0x61, 1, 0, compat_status, 0)); // r1 = task->thread_info.status
    }
    probe.extend([
        insn(0x79, 1, 0, task_cred, 0), // r1 = task->cred
        insn(0x15, 1, 0, 1, 0),         // null: skip the next load
        insn(0x61, 1, 1, cred_uid, 0),  // r1 = cred->uid
        insn(0xb7, 0, 0, 0, 1),         // r0 = 1: allow
        insn(0x95, 0, 0, 0, 0),         // exit
    ]);
    load_device_program("gpu_trace_task", &probe).is_ok()
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
        // Within their structs, and none of task_struct's ids or pointer
        // is its first member (its thread_info or state is, even where
        // CONFIG_RANDSTRUCT shuffles the rest); the ids are two.
        let task = [chain.task_pid, chain.task_tgid, chain.task_cred];
        assert!(
            task.iter().all(|&offset| offset > 0 && offset < 16384) && chain.cred_uid < 1024,
            "{chain:?}"
        );
        assert_ne!(chain.task_pid, chain.task_tgid, "{chain:?}");
    }

    /// Nothing else tells which way the device hooks read the thread: a
    /// kernel that should take the typed loads and refuses the probe would
    /// only cost a few ns per denial, unseen.
    #[test]
    fn device_programs_take_the_typed_loads_from_5_15_with_btf() {
        use aya::util::KernelVersion;
        let new_enough =
            KernelVersion::current().is_ok_and(|version| version >= KernelVersion::new(5, 15, 0));
        if !nix::unistd::geteuid().is_root() || !new_enough {
            eprintln!("skipping: the probe loads a program (root, 5.15 or later)");
            return;
        }
        let Some(btf) = KernelBtf::for_test() else {
            return;
        };
        // The words tracer.rs finds on x86_64, so the probe is the one it loads.
        let offset = |name, member| btf.member_offset(name, member).unwrap();
        let words = SavedRegisterWords {
            task_stack: offset("task_struct", "stack"),
            compat_status: offset("task_struct", "thread_info") + offset("thread_info", "status"),
        };
        let chain = for_this_kernel(Ok(&btf), words);
        assert_eq!(chain, chain_in(&btf).unwrap());
    }

    #[test]
    fn without_btf_the_helpers_read_the_ids_and_uid() {
        assert_eq!(
            for_this_kernel(Err("no BTF"), SavedRegisterWords::default()),
            TaskChain::default()
        );
    }
}
