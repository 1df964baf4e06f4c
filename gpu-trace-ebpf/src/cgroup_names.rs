//! Every cgroup2 directory made while gpu-trace runs, by id: a container's
//! cgroup is often gone by the time userspace reads its denial (a failed
//! CUDA launch exits at once, and the runtime removes the cgroup), and then
//! no walk of the tree can name it. cgroup:cgroup_mkdir is not a syscall
//! tracepoint, so it costs nothing on other paths.
//!
//! Attached as a raw tracepoint where the kernel's BTF says where a
//! cgroup keeps its hierarchy and id (its detach waits out no grace
//! periods); else as the trace event, whose record has both (its detach
//! waits out the tracepoints' grace periods, about 75 ms).

use aya_ebpf::{
    helpers::{bpf_get_current_uid_gid, bpf_probe_read_kernel, bpf_probe_read_kernel_str_bytes},
    macros::{raw_tracepoint, tracepoint},
    programs::{RawTracePointContext, TracePointContext},
    EbpfContext,
};
use gpu_trace_common::{cgroup_mkdir, CgroupMkdirChain, CgroupPath, PATH_LEN};

use crate::{
    maps::{CGROUP_MKDIR_CHAIN, CGROUP_PATHS},
    tracepoint_record::record_field,
};

/// The hierarchy id of cgroup2 (the default hierarchy).
const CGROUP2_ROOT: i32 = 0;
static EMPTY: CgroupPath = CgroupPath {
    path: [0; PATH_LEN],
    creator_uid: u32::MAX,
};

#[tracepoint]
pub fn note_cgroup_mkdir(ctx: TracePointContext) -> u32 {
    let root: i32 = record_field(&ctx, cgroup_mkdir::ROOT);
    let id: u64 = record_field(&ctx, cgroup_mkdir::ID);
    let path_loc: u32 = record_field(&ctx, cgroup_mkdir::PATH);
    if root != CGROUP2_ROOT {
        return 0;
    }
    // __data_loc: the string's offset in the record (low 16 bits).
    let path = ctx
        .as_ptr()
        .cast::<u8>()
        .wrapping_add((path_loc & 0xffff) as usize);
    note(id, path);
    0
}

/// The raw tracepoint's arguments: the new cgroup and its path.
#[raw_tracepoint]
pub fn note_cgroup_mkdir_raw(ctx: RawTracePointContext) -> u32 {
    let chain: CgroupMkdirChain = CGROUP_MKDIR_CHAIN.load();
    let cgroup: u64 = ctx.arg(0);
    let path: u64 = ctx.arg(1);
    // SAFETY (every read): kernel memory read with the fault-tolerant helper.
    let read_at = |base: u64, offset: u32| unsafe {
        bpf_probe_read_kernel((base + u64::from(offset)) as *const u64).ok()
    };
    let Some(root) = read_at(cgroup, chain.cgroup_root) else {
        return 0;
    };
    // SAFETY: as above; the hierarchy id is an int.
    let hierarchy =
        unsafe { bpf_probe_read_kernel((root + u64::from(chain.root_hierarchy_id)) as *const i32) };
    if hierarchy != Ok(CGROUP2_ROOT) {
        return 0;
    }
    let Some(id) = read_at(cgroup, chain.cgroup_kn).and_then(|kn| read_at(kn, chain.kn_id)) else {
        return 0;
    };
    note(id, path as *const u8);
    0
}

/// Remembers cgroup `id`'s path, a string in kernel memory at `path`.
#[inline(always)]
fn note(id: u64, path: *const u8) {
    // Written in place: the path does not fit on the BPF stack comfortably.
    // A full table evicts the least recently used id (LRU).
    if CGROUP_PATHS.insert(&id, &EMPTY, 0).is_err() {
        return;
    }
    let Some(slot) = CGROUP_PATHS.get_ptr_mut(&id) else {
        return;
    };
    // SAFETY: kernel memory read with the fault-tolerant helper into our own
    // slot; the slot is ours to write.
    unsafe {
        let _ = bpf_probe_read_kernel_str_bytes(path, &mut (*slot).path);
        // The low half is the uid.
        (*slot).creator_uid = bpf_get_current_uid_gid() as u32;
    }
}
