//! Maps and load-time settings shared by the tracer's programs.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
    Global,
};
use gpu_trace_common::{
    CgroupMkdirChain, CgroupPath, CgroupWindow, HeldBackCount, HeldBackKey, LastDeviceCheck,
    OpenInFlight, RepeatCount, RepeatKey, TaskChain, ThreadLastFolded, V1DevicesChain,
    CGROUP_PATHS_CAPACITY, CGROUP_SENT_CAPACITY, DEV_TYPE_CHAR, EVENTS_RING_BYTES,
    FOLLOWED_CAPACITY, HELD_BACK_CAPACITY, IN_FLIGHT_CAPACITY, LAST_DEVICE_CHECK_CAPACITY,
    LOST_BY_CGROUP_CAPACITY, MAJOR_LIMIT, MAJOR_OTHER_DRIVER, MAJOR_WATCHED, OPEN_CALLS_UNTRACED,
    REPEATS_CAPACITY,
};

/// Finished events for userspace.
#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(EVENTS_RING_BYTES, 0);

/// What each char major is (`MAJOR_*` at the major's index): userspace
/// keeps it in step with the drivers registered.
#[map]
pub static WATCHED_MAJORS: Array<u8> = Array::with_max_entries(MAJOR_LIMIT, 0);

/// Open calls in flight, by thread id. LRU so that a thread that dies inside
/// a call can never fill the table.
#[map]
pub static IN_FLIGHT: LruHashMap<u32, OpenInFlight> =
    LruHashMap::with_max_entries(IN_FLIGHT_CAPACITY, 0);

/// Problems folded in the kernel (see fold.rs). Preallocated, as maps of
/// tracing programs must be (run-time allocation there makes 5.10 warn,
/// and RT kernels refuse it). Not LRU: an evicted key would take its
/// uncollected repeats with it; a full table sends new problems unfolded.
#[map]
pub static REPEATS: HashMap<RepeatKey, RepeatCount> =
    HashMap::with_max_entries(REPEATS_CAPACITY, 0);

/// The key each CPU's latest folded thread counts under (see fold.rs).
#[map]
pub static THREAD_LAST_FOLDED: PerCpuArray<ThreadLastFolded> = PerCpuArray::with_max_entries(1, 0);

/// Bumped whenever a thread is renamed, moved or exits (see
/// thread_identity.rs); 0 until userspace has attached what bumps it.
#[map]
pub static IDENTITY_GENERATION: Array<u64> = Array::with_max_entries(1, 0);

/// First sightings sent per cgroup and fold window (see fold.rs).
#[map]
pub static CGROUP_SENT: LruHashMap<CgroupWindow, u64> =
    LruHashMap::with_max_entries(CGROUP_SENT_CAPACITY, 0);

/// Problems held back past a cgroup's budget (see fold.rs). Not LRU, as
/// REPEATS: an evicted key would take its uncollected count with it.
#[map]
pub static HELD_BACK: HashMap<HeldBackKey, HeldBackCount> =
    HashMap::with_max_entries(HELD_BACK_CAPACITY, 0);

/// Events lost to a full ring buffer, by cgroup id: whose they were.
#[map]
pub static LOST_BY_CGROUP: LruHashMap<u64, u64> =
    LruHashMap::with_max_entries(LOST_BY_CGROUP_CAPACITY, 0);

/// Which open route is attached (`OPEN_CALLS_*`), set by userspace.
#[map]
pub static OPEN_CALLS_TRACED: Array<u8> = Array::with_max_entries(1, 0);

/// Events dropped because the ring buffer was full (one slot per CPU).
#[map]
pub static LOST_EVENTS: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// The followed process tree (`gpu-trace run`), by process and thread id.
#[map]
pub static FOLLOWED: HashMap<u32, u8> = HashMap::with_max_entries(FOLLOWED_CAPACITY, 0);

/// The errno observer's last sighting per cgroup id (see LastDeviceCheck).
/// LRU: cgroups come and go.
#[map]
pub static LAST_DEVICE_CHECK: LruHashMap<u64, LastDeviceCheck> =
    LruHashMap::with_max_entries(LAST_DEVICE_CHECK_CAPACITY, 0);

/// Paths of cgroup2 directories made since start, by cgroup id (see
/// cgroup_names). LRU: cgroups come and go.
#[map]
pub static CGROUP_PATHS: LruHashMap<u64, CgroupPath> =
    LruHashMap::with_max_entries(CGROUP_PATHS_CAPACITY, 0);

// Read-only globals: the loader patches them in .rodata by symbol name
// before load (see gpu_trace_common::global), so the names, types and sizes
// must match what userspace sets. `Global` reads them volatile so that the
// compiler does not fold in the defaults below.
#[unsafe(no_mangle)]
static WATCH_ALL_DEVICES: Global<u8> = Global::new(0);
#[unsafe(no_mangle)]
static REPORT_ALLOWED: Global<u8> = Global::new(0);
#[unsafe(no_mangle)]
static FOLLOW_PROCESS_TREE: Global<u8> = Global::new(0);
#[unsafe(no_mangle)]
pub static FORK_CHILD_PID_OFFSET: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
static VERDICT_FROM_ERRNO: Global<u8> = Global::new(0);
#[unsafe(no_mangle)]
pub static TASK_STACK_OFFSET: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static PT_REGS_OFFSET: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static COMPAT_STATUS_OFFSET: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static TASK_CHAIN: Global<TaskChain> = Global::new(TaskChain {
    task_pid: 0,
    task_tgid: 0,
    task_cred: 0,
    cred_uid: 0,
});
#[unsafe(no_mangle)]
pub static FOLD_WINDOW_NS: Global<u64> = Global::new(0);
/// 1 where BPF has compare-and-exchange (gpu_trace_common::global). Where
/// it has not, that code never runs, and the loader turns its exchanges
/// into adds, which older verifiers accept (kernel/without_atomics.rs).
#[unsafe(no_mangle)]
static SLOT_COUNTS: Global<u8> = Global::new(0);
#[unsafe(no_mangle)]
pub static CGROUP_MKDIR_CHAIN: Global<CgroupMkdirChain> = Global::new(CgroupMkdirChain {
    cgroup_root: 0,
    root_hierarchy_id: 0,
    cgroup_kn: 0,
    kn_id: 0,
});
#[unsafe(no_mangle)]
pub static V1_DEVICES_CHAIN: Global<V1DevicesChain> = Global::new(V1DevicesChain {
    task_cgroups: 0,
    css_set_devices: 0,
    css_cgroup: 0,
    cgroup_kn: 0,
    kn_id: 0,
});

// The offsets of `PolicyProgramsChain`, a global each: loaded one by one,
// they need no stack, where a copy of the struct cost the open function's
// fexit program more than 5.10 allows it.
#[unsafe(no_mangle)]
pub static POLICY_TASK_CGROUPS: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static POLICY_CSS_SET_DFL_CGRP: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static POLICY_CGROUP_EFFECTIVE_DEVICE: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static POLICY_ARRAY_ITEMS: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static POLICY_ITEM_SIZE: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static POLICY_ITEM_PROG: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static POLICY_PROG_AUX: Global<u32> = Global::new(0);
#[unsafe(no_mangle)]
pub static POLICY_AUX_ID: Global<u32> = Global::new(0);

/// The flags are u8 (0 or 1) on the wire.
#[inline(always)]
fn flag(global: &Global<u8>) -> bool {
    global.load() != 0
}

pub fn watch_all_devices() -> bool {
    flag(&WATCH_ALL_DEVICES)
}

pub fn report_allowed() -> bool {
    flag(&REPORT_ALLOWED)
}

pub fn follow_process_tree() -> bool {
    flag(&FOLLOW_PROCESS_TREE)
}

pub fn verdict_from_errno() -> bool {
    flag(&VERDICT_FROM_ERRNO)
}

/// Whether a repeat counts in its CPU's slot (fold.rs).
#[inline(always)]
pub fn slot_counts() -> bool {
    flag(&SLOT_COUNTS)
}

/// The open route attached (`OPEN_CALLS_*`, see gpu_trace_common::map::OPEN_CALLS_TRACED).
/// An array lookup, which the verifier inlines to a plain load.
#[inline(always)]
pub fn open_calls_traced() -> u8 {
    OPEN_CALLS_TRACED
        .get(0)
        .map_or(OPEN_CALLS_UNTRACED, |route| *route)
}

/// `MAJOR_*` of a device: a block device counts as another driver's.
#[inline(always)]
pub fn major_class(dev_type: u16, major: u32) -> u8 {
    if watch_all_devices() {
        return MAJOR_WATCHED;
    }
    if dev_type != DEV_TYPE_CHAR {
        return MAJOR_OTHER_DRIVER;
    }
    WATCHED_MAJORS
        .get(major)
        .map_or(MAJOR_OTHER_DRIVER, |class| *class)
}

/// Is this a device to report: a watched char major, or any with --all-devices?
#[inline(always)]
pub fn is_watched(dev_type: u16, major: u32) -> bool {
    major_class(dev_type, major) == MAJOR_WATCHED
}

/// Is the current process one to report? Always, unless a tree is followed.
#[inline(always)]
pub fn current_is_followed() -> bool {
    if !follow_process_tree() {
        return true;
    }
    followed_process(bpf_get_current_pid_tgid())
}

/// current_is_followed for the thread `pid_tgid`, running here.
#[inline(always)]
pub fn is_followed(pid_tgid: u64) -> bool {
    !follow_process_tree() || followed_process(pid_tgid)
}

#[inline(always)]
fn followed_process(pid_tgid: u64) -> bool {
    let tgid = (pid_tgid >> 32) as u32;
    // SAFETY: the value is a u8 flag, read at once.
    unsafe { FOLLOWED.get(tgid).is_some() }
}

/// One event of `cgroup_id` that could not be handed over.
pub fn count_lost_event(cgroup_id: u64) {
    if let Some(counter) = LOST_EVENTS.get_ptr_mut(0) {
        // SAFETY: per-CPU slot, no other writer while this program runs on this CPU.
        unsafe { *counter += 1 };
    }
    add_one(&LOST_BY_CGROUP, &cgroup_id);
}

/// Adds one to `map[key]`, making it at 0 first: atomically, as programs
/// on other CPUs count the same key. The count after, as read just after
/// (the kernels of 5.10 have no fetching add, so two CPUs adding at once
/// may both read the second's); None when the key could not be made.
#[inline(always)]
pub fn add_one<K>(map: &LruHashMap<K, u64>, key: &K) -> Option<u64> {
    let mut counter = map.get_ptr_mut(key);
    if counter.is_none() {
        // On the stack, written there: a promoted constant 0 may share its
        // bytes in .rodata with a load-time global the loader then patches
        // (it became the fold window, 10^9).
        let mut zero = 0u64;
        // SAFETY: a write to our own stack slot.
        unsafe { core::ptr::write_volatile(&mut zero, 0) };
        let _ = map.insert(key, &zero, NOEXIST);
        counter = map.get_ptr_mut(key);
    }
    let counter = counter?;
    // SAFETY: a map value, alive until this program returns.
    unsafe {
        core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
            counter, 1,
        );
        Some(*counter)
    }
}

/// BPF_NOEXIST: insert only if the key is new (another CPU may have made it).
pub const NOEXIST: u64 = 1;
