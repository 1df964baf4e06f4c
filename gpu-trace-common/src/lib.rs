//! Types and names shared by gpu-trace's kernel programs and its userspace.
//!
//! Everything here is `#[repr(C)]` with fixed-width fields and explicit
//! padding, so both sides agree on the layout byte for byte.
#![no_std]

/// Program names: the functions in gpu-trace-ebpf carry exactly these names.
pub mod program {
    pub const OBSERVER: &str = "observe_device";
    /// The observer for kernels whose device hook offers neither the thread
    /// id nor the verdict (before 6.1): the verdict comes from the open's errno.
    pub const OBSERVER_ERRNO: &str = "observe_device_errno";
    /// fexit on `FEXIT_TARGET`: the kernel's final verdict, BPF and cgroup v1 alike.
    pub const CHECK_PERMISSION_EXIT: &str = "check_permission_exit";
    /// The kernel function the fexit program is attached to.
    pub const FEXIT_TARGET: &str = "devcgroup_check_permission";
    pub const ENTER_OPENAT: &str = "enter_openat";
    pub const EXIT_OPENAT: &str = "exit_openat";
    pub const ENTER_OPENAT2: &str = "enter_openat2";
    pub const EXIT_OPENAT2: &str = "exit_openat2";
    pub const ENTER_OPEN: &str = "enter_open";
    pub const EXIT_OPEN: &str = "exit_open";
    /// fexit on `OPEN_FUNCTION`: the open calls' path and result where the
    /// kernel has BPF trampolines, without syscall tracepoints.
    pub const OPEN_FUNCTION_EXIT: &str = "open_function_exit";
    /// The kernel function every open, openat, openat2 and creat goes through.
    pub const OPEN_FUNCTION: &str = "do_sys_openat2";
    pub const FOLLOW_FORK: &str = "follow_fork";
    pub const FOLLOW_EXIT: &str = "follow_exit";
    /// On cgroup:cgroup_mkdir: remembers each new cgroup2 directory's path.
    pub const NOTE_CGROUP_MKDIR: &str = "note_cgroup_mkdir";
    /// The same on the raw tracepoint cgroup_mkdir, where BTF gives
    /// `CgroupMkdirChain` (as loaded, its name is the other's).
    pub const NOTE_CGROUP_MKDIR_RAW: &str = "note_cgroup_mkdir_raw";

    pub const DEVICE_HOOKS: [&str; 3] = [CHECK_PERMISSION_EXIT, OBSERVER, OBSERVER_ERRNO];
    pub const OPEN_CALLS: [&str; 7] = [
        ENTER_OPENAT,
        EXIT_OPENAT,
        ENTER_OPENAT2,
        EXIT_OPENAT2,
        ENTER_OPEN,
        EXIT_OPEN,
        OPEN_FUNCTION_EXIT,
    ];
    /// On task:task_rename, cgroup:cgroup_attach_task and
    /// sched:sched_process_exit: bumps map::IDENTITY_GENERATION, so that a
    /// repeat never counts under a key its thread's command or cgroup (or
    /// a reused thread id) no longer matches.
    pub const IDENTITY_CHANGED: &str = "identity_changed";
    /// The raw tracepoints `IDENTITY_CHANGED` is attached to (all three
    /// are also trace events: task, cgroup and sched).
    pub const IDENTITY_TRACEPOINTS: [&str; 3] =
        ["task_rename", "cgroup_attach_task", "sched_process_exit"];
    pub const OTHERS: [&str; 5] = [
        FOLLOW_FORK,
        FOLLOW_EXIT,
        NOTE_CGROUP_MKDIR,
        NOTE_CGROUP_MKDIR_RAW,
        IDENTITY_CHANGED,
    ];

    /// A program's name as the kernel keeps it (15 bytes), e.g. in
    /// `bpf_prog_info`: how tests and the benchmark find ours among the loaded.
    pub fn as_loaded(name: &str) -> &str {
        &name[..name.len().min(15)]
    }
}

/// Map names, shared for the same reason.
pub mod map {
    pub const EVENTS: &str = "EVENTS";
    pub const WATCHED_MAJORS: &str = "WATCHED_MAJORS";
    pub const IN_FLIGHT: &str = "IN_FLIGHT";
    pub const LOST_EVENTS: &str = "LOST_EVENTS";
    /// Process ids (and thread ids) of the followed process tree.
    pub const FOLLOWED: &str = "FOLLOWED";
    /// The errno observer's last sighting, by cgroup id.
    pub const LAST_DEVICE_CHECK: &str = "LAST_DEVICE_CHECK";
    /// Paths of the cgroup2 directories made since start, by cgroup id.
    pub const CGROUP_PATHS: &str = "CGROUP_PATHS";
    /// One value, `OPEN_CALLS_*`: which open route is attached, so that the
    /// device hook knows where to leave what it saw. A map rather than a
    /// load-time global: the route is chosen after the device hook is loaded.
    pub const OPEN_CALLS_TRACED: &str = "OPEN_CALLS_TRACED";
    /// Problems folded in the kernel: `RepeatKey` to `RepeatCount`.
    pub const REPEATS: &str = "REPEATS";
    /// One value, bumped by `program::IDENTITY_CHANGED` whenever a thread
    /// anywhere is renamed, moved to another cgroup or exits; 0 until
    /// userspace has attached it to all three (then it is 1 and up).
    pub const IDENTITY_GENERATION: &str = "IDENTITY_GENERATION";
    /// First sightings sent per cgroup and fold window: `CgroupWindow` to a count.
    pub const CGROUP_SENT: &str = "CGROUP_SENT";
    /// Problems held back past a cgroup's budget: `HeldBackKey` to `HeldBackCount`.
    pub const HELD_BACK: &str = "HELD_BACK";
    /// Events lost to a full ring buffer, by cgroup id.
    pub const LOST_BY_CGROUP: &str = "LOST_BY_CGROUP";
    /// `DropRecordBudget` by kind of drop record (`DROP_RECORD_KINDS`).
    pub const DROP_RECORD_BUDGET: &str = "DROP_RECORD_BUDGET";
    /// Per CPU: the key its latest folded thread counted under, and how
    /// many repeats were counted that way (ThreadLastFolded).
    pub const THREAD_LAST_FOLDED: &str = "THREAD_LAST_FOLDED";
}

/// Where the cgroup:cgroup_mkdir record keeps its fields (the same on every
/// kernel since the id became 64 bits in 5.5; userspace checks the format
/// file before attaching).
pub mod cgroup_mkdir {
    pub const ROOT: usize = 8;
    pub const ID: usize = 16;
    /// `__data_loc char[]`: offset (low 16 bits) and length of the string.
    pub const PATH: usize = 24;
}

/// Read-only globals set by userspace before the tracer is loaded.
pub mod global {
    /// Non-zero: every device is watched, the major filter is skipped.
    pub const WATCH_ALL_DEVICES: &str = "WATCH_ALL_DEVICES";
    /// Non-zero: allowed accesses are reported too, not only denied ones.
    pub const REPORT_ALLOWED: &str = "REPORT_ALLOWED";
    /// Non-zero: only processes in FOLLOWED are reported, and their forks join it.
    pub const FOLLOW_PROCESS_TREE: &str = "FOLLOW_PROCESS_TREE";
    /// Offset of `child_pid` in the sched:sched_process_fork record; it moved
    /// between kernel versions, so userspace reads it from the format file.
    pub const FORK_CHILD_PID_OFFSET: &str = "FORK_CHILD_PID_OFFSET";
    /// Non-zero: the errno observer is the device hook; open calls note when
    /// they entered, and their exits pick up its sighting in their cgroup.
    pub const VERDICT_FROM_ERRNO: &str = "VERDICT_FROM_ERRNO";
    /// Offset of `stack` in `struct task_struct`, from the kernel's BTF; 0
    /// leaves accesses outside traced open calls without their path.
    pub const TASK_STACK_OFFSET: &str = "TASK_STACK_OFFSET";
    /// Where the saved user registers (`struct pt_regs`) lie from the bottom
    /// of a task's kernel stack.
    pub const PT_REGS_OFFSET: &str = "PT_REGS_OFFSET";
    /// Offset of the thread's syscall status word (`thread_info.status`)
    /// in `struct task_struct`: its TS_COMPAT bit says which syscall table
    /// the current call came through. 0: told from the code segment.
    pub const COMPAT_STATUS_OFFSET: &str = "COMPAT_STATUS_OFFSET";
    /// The chain from a task to its v1 devices cgroup's kernfs id, as five
    /// offsets (`V1DevicesChain`), from the kernel's BTF; all 0 where no v1
    /// devices hierarchy is mounted.
    pub const V1_DEVICES_CHAIN: &str = "V1_DEVICES_CHAIN";
    /// `CgroupMkdirChain`, from the kernel's BTF; all 0 where it lacks one.
    pub const CGROUP_MKDIR_CHAIN: &str = "CGROUP_MKDIR_CHAIN";
    /// The offsets to the device programs in force, `PolicyProgramsChain`'s
    /// fields in its order, a global each; all 0 where the BTF lacks one.
    pub const POLICY_PROGRAMS_CHAIN: [&str; 8] = [
        "POLICY_TASK_CGROUPS",
        "POLICY_CSS_SET_DFL_CGRP",
        "POLICY_CGROUP_EFFECTIVE_DEVICE",
        "POLICY_ARRAY_ITEMS",
        "POLICY_ITEM_SIZE",
        "POLICY_ITEM_PROG",
        "POLICY_PROG_AUX",
        "POLICY_AUX_ID",
    ];
    /// `TaskChain`, from the kernel's BTF where the device hooks get
    /// their task typed; all 0 where they do not.
    pub const TASK_CHAIN: &str = "TASK_CHAIN";
    /// The fold window in ns: repeats of a problem within it are counted in
    /// `REPEATS` instead of sent. 0: every problem is sent.
    pub const FOLD_WINDOW_NS: &str = "FOLD_WINDOW_NS";
    /// `--bpf-log`'s level, aya-log's numbers (0 off, 1 error ... 4 debug):
    /// drop records above it are neither made nor counted.
    pub const DROP_RECORD_LEVEL: &str = "DROP_RECORD_LEVEL";
    /// The benchmark's breakdown (`bench_cut`): the device hook's report
    /// stops after this step. 0, outside the benchmark: every step runs.
    pub const BENCH_CUT: &str = "BENCH_CUT";
    /// 1 where BPF has compare-and-exchange (5.12): a repeat counts in its
    /// CPU's slot (`ThreadLastFolded::held`) rather than in `REPEATS`.
    pub const SLOT_COUNTS: &str = "SLOT_COUNTS";
}

/// Where the benchmark cuts the device hook's report short, to time each
/// step of a denial with the kernel's BPF run-time statistics (the time up
/// to a cut less the time up to the one before is that step's). Outside the
/// benchmark the cut is NONE; the verifier knows the read-only value and
/// drops the cuts from the program.
pub mod bench_cut {
    pub const NONE: u8 = 0;
    /// At once: what the hook costs with nothing in it.
    pub const ENTRY: u8 = 1;
    /// After the verdict and the checks that the device is watched and the
    /// process followed.
    pub const VERDICT: u8 = 2;
    /// After the thread id and the identity generation.
    pub const IDENTITY: u8 = 3;
    /// After a repeat's short way compared the thread's remembered key,
    /// before its uid, lookup and add.
    pub const SHORT_WAY: u8 = 4;
    /// A first sighting, after the short way missed, the uid, the clock and the cgroup.
    pub const CLOCK_AND_CGROUP: u8 = 5;
    /// After the command name, the key and its lookup.
    pub const COMMAND_AND_KEY: u8 = 6;
    /// After the walk to the saved registers' syscall and path pointer.
    pub const SAVED_REGISTERS: u8 = 7;
    /// After the ring buffer's reserve (the record is discarded).
    pub const RING_RESERVE: u8 = 8;
    /// After the path's copy into the record (discarded).
    pub const PATH: u8 = 9;
    /// After the device programs in force were copied (discarded).
    pub const PROGRAMS_IN_FORCE: u8 = 10;

    /// Each cut by the name the benchmark and `GPU_TRACE_BENCH_CUT` use.
    pub const NAMES: [(&str, u8); 10] = [
        ("entry", ENTRY),
        ("verdict", VERDICT),
        ("identity", IDENTITY),
        ("short-way", SHORT_WAY),
        ("clock-and-cgroup", CLOCK_AND_CGROUP),
        ("command-and-key", COMMAND_AND_KEY),
        ("saved-registers", SAVED_REGISTERS),
        ("ring-reserve", RING_RESERVE),
        ("path", PATH),
        ("programs-in-force", PROGRAMS_IN_FORCE),
    ];
}

/// The kinds of drop record (gpu-trace-ebpf's why_dropped.rs), by index in
/// `DROP_RECORD_BUDGET`; each record's text starts with its kind.
pub const DROP_RECORD_KINDS: [&str; 8] = [
    "ring-full",
    "held-back-full",
    "held-back",
    "repeats-full",
    "path-cut",
    "path-unread",
    "path-changed",
    "in-flight-evicted",
];

/// gpu-trace's programs that make events, by their `PROGRAM_*` number:
/// drop records carry the number, userspace prints the name.
pub const EVENT_PROGRAMS: [&str; 7] = [
    "an unknown program",
    "check_permission_exit (fexit on devcgroup_check_permission)",
    "observe_device (the cgroup_device observer)",
    "exit_openat (tracepoint syscalls:sys_exit_openat)",
    "exit_openat2 (tracepoint syscalls:sys_exit_openat2)",
    "exit_open (tracepoint syscalls:sys_exit_open)",
    "open_function_exit (fexit on do_sys_openat2)",
];
pub const PROGRAM_CHECK_PERMISSION_EXIT: u32 = 1;
pub const PROGRAM_OBSERVE_DEVICE: u32 = 2;
pub const PROGRAM_EXIT_OPENAT: u32 = 3;
pub const PROGRAM_EXIT_OPENAT2: u32 = 4;
pub const PROGRAM_EXIT_OPEN: u32 = 5;
pub const PROGRAM_OPEN_FUNCTION_EXIT: u32 = 6;

/// Drop records of one kind made per second, host-wide; the rest are only
/// counted, so that a flood of drops is not a flood of records.
pub const DROP_RECORDS_PER_SECOND: u64 = 10;

/// One kind of drop record's budget: the second it is for, the records
/// made in it, and all those left out since start.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct DropRecordBudget {
    pub second: u64,
    pub made: u64,
    pub left_out: u64,
}

/// `OPEN_CALLS_TRACED` values. No open route: the device hook reports at once.
pub const OPEN_CALLS_UNTRACED: u8 = 0;
/// The syscall tracepoints: each call's entry is stashed by thread, and the
/// device hook fills in the entry of the call in flight.
pub const OPEN_CALLS_BY_ENTRY: u8 = 1;
/// fexit on the open function alone: nothing runs at entry. The device
/// hook leaves a sighting worth reporting for the exit, found by thread
/// and path pointer; every other open costs the exit a comparison.
pub const OPEN_CALLS_BY_RESULT: u8 = 2;

/// `WATCHED_MAJORS` values, by char major. A major no driver has registered
/// (a stale node's): its open fails with ENXIO, which is worth its number.
pub const MAJOR_NO_DRIVER: u8 = 0;
/// A GPU driver's major (or one given with --major): reported.
pub const MAJOR_WATCHED: u8 = 1;
/// Another driver's major (/dev/null, ttys, disks): ignored at once.
pub const MAJOR_OTHER_DRIVER: u8 = 2;

/// Capacity of the per-thread table of open calls in flight.
pub const IN_FLIGHT_CAPACITY: u32 = 16384;
/// Capacity of the followed-process table.
pub const FOLLOWED_CAPACITY: u32 = 16384;
/// Device majors are 12 bits wide: the watched-majors filter is an array
/// indexed by major, which the verifier turns into a plain load (a hash
/// lookup cost every device open ~25 ns more).
pub const MAJOR_LIMIT: u32 = 1 << 12;
/// Capacity of the table of cgroups made since start (LRU).
pub const CGROUP_PATHS_CAPACITY: u32 = 4096;
/// Capacity of the errno observer's table of sightings (one per cgroup).
pub const LAST_DEVICE_CHECK_CAPACITY: u32 = 4096;
/// Ring buffer size in bytes (a power of two, a multiple of the page size).
pub const EVENTS_RING_BYTES: u32 = 4 << 20;
/// Bytes of the opened path kept per event, including the terminating NUL.
pub const PATH_LEN: usize = 256;
pub const COMM_LEN: usize = 16;

/// Device type in the cgroup device context (`BPF_DEVCG_DEV_*`).
pub const DEV_TYPE_BLOCK: u16 = 1;
pub const DEV_TYPE_CHAR: u16 = 2;

/// Access bits in the cgroup device context (`BPF_DEVCG_ACC_*`).
pub const ACCESS_MKNOD: u16 = 1;
pub const ACCESS_READ: u16 = 2;
pub const ACCESS_WRITE: u16 = 4;

/// Which syscall carried the access (0: none of the traced ones).
pub const SYSCALL_NONE: u16 = 0;
pub const SYSCALL_OPENAT: u16 = 1;
pub const SYSCALL_OPENAT2: u16 = 2;
pub const SYSCALL_OPEN: u16 = 3;
/// Only ever seen through the saved registers (see FLAG_PATH_FROM_REGS).
pub const SYSCALL_CREAT: u16 = 4;
pub const SYSCALL_MKNOD: u16 = 5;
pub const SYSCALL_MKNODAT: u16 = 6;
pub const SYSCALL_ACCESS: u16 = 7;
pub const SYSCALL_FACCESSAT: u16 = 8;
pub const SYSCALL_FACCESSAT2: u16 = 9;

/// `DeviceAccessEvent::flags` bits.
/// A device hook saw this access (device fields and `hook_verdict` are valid).
pub const FLAG_DEVICE_SEEN: u16 = 1;
/// The access happened inside a traced open call: `path` and `syscall_ret` are valid.
pub const FLAG_HAS_SYSCALL: u16 = 2;
/// The path did not fit in `path` and was cut.
pub const FLAG_PATH_TRUNCATED: u16 = 4;
/// No traced open call carried the access, but `path` and `syscall` were read
/// from the syscall's saved registers; `syscall_ret` is unknown.
pub const FLAG_PATH_FROM_REGS: u16 = 8;
/// The call's path buffer changed between the device check and the call's
/// end (another thread wrote it): `path` is left empty, the device fields
/// are the check's.
pub const FLAG_PATH_CHANGED: u16 = 16;

/// Failed opens of paths under these prefixes are reported even though they
/// never reached the device hook (ENOENT: node missing; EACCES: file mode;
/// ENXIO: no driver): NVIDIA's nodes, AMD's kfd, DRM's and the accel
/// subsystem's.
pub const NVIDIA_DEV_PREFIX: &[u8; 11] = b"/dev/nvidia";
pub const KFD_DEV_PREFIX: &[u8; 8] = b"/dev/kfd";
pub const DRI_DEV_PREFIX: &[u8; 9] = b"/dev/dri/";
pub const ACCEL_DEV_PREFIX: &[u8; 11] = b"/dev/accel/";
/// And the devices next to the GPU whose paths the prefixes above miss:
/// RDMA's, gdrcopy's and VFIO's (nvidia-fs, IMEX and NVSwitch nodes are
/// under /dev/nvidia).
pub const INFINIBAND_DEV_PREFIX: &[u8; 11] = b"/dev/infini";
pub const GDRDRV_DEV_PREFIX: &[u8; 11] = b"/dev/gdrdrv";
pub const VFIO_DEV_PREFIX: &[u8; 10] = b"/dev/vfio/";

/// One device access, as the kernel side reports it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct DeviceAccessEvent {
    pub head: EventHead,
    /// The kernfs id of the task's cgroup in the v1 devices hierarchy, read
    /// at the sighting; 0 where no v1 devices hierarchy is mounted or its
    /// chain of offsets could not be found in the kernel's BTF.
    pub v1_devices_cgroup: u64,
    /// The ids of the cgroup_device programs in force on the task's cgroup2
    /// cgroup at a denial's sighting, in the kernel's order, 0 after the
    /// last (and where one was being detached); all 0 when not read (an
    /// allowed access, or no chain in the kernel's BTF). What attribution
    /// evaluates when the cgroup is gone by the time it reads the event.
    pub policy_programs: [u32; SIGHTED_PROGRAMS],
    pub comm: [u8; COMM_LEN],
    /// NUL-terminated path as the process passed it; what follows the NUL
    /// is left as it was (the kernel side does not clear the record: a
    /// 328-byte memset was its costliest step).
    pub path: [u8; PATH_LEN],
}

/// A device as a device hook saw it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DeviceFields {
    pub major: u32,
    pub minor: u32,
    /// `ACCESS_*` bits requested.
    pub access: u16,
    /// `DEV_TYPE_*`.
    pub dev_type: u16,
}

impl DeviceFields {
    pub const NONE: Self = Self {
        major: 0,
        minor: 0,
        access: 0,
        dev_type: 0,
    };

    /// An open that failed before any device check (a missing node, a
    /// file mode refusal) has no device to tell it apart by: a digest of
    /// its path (`UnresolvedPath`) stands in for one in the fold's keys, so
    /// that failures at two paths are two problems, not one's repeats.
    /// Type 0 (no device type): userspace shows no device for it.
    pub const fn of_unresolved_path(digest: u64) -> Self {
        Self {
            major: digest as u32,
            minor: (digest >> 32) as u32,
            access: 0,
            dev_type: 0,
        }
    }

    /// The digest `of_unresolved_path` was given.
    pub const fn unresolved_path_digest(&self) -> u64 {
        self.major as u64 | (self.minor as u64) << 32
    }
}

/// The digest of a path read in chunks of `PATH_HEAD_LEN` bytes, each
/// zero after the path's end: the kernel's name for a path that resolved
/// to no device (DeviceFields::of_unresolved_path). Not a secure hash: a
/// tenant that makes two of its own paths collide only folds its own
/// failures together.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnresolvedPath(pub u64);

impl UnresolvedPath {
    pub const START: Self = Self(0xcbf2_9ce4_8422_2325);

    #[inline(always)]
    pub fn with_chunk(self, chunk: &[u64; PATH_HEAD_LEN / 8]) -> Self {
        let mut digest = self.0;
        let mut i = 0;
        while i < chunk.len() {
            digest = (digest ^ chunk[i]).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            digest ^= digest >> 29;
            i += 1;
        }
        Self(digest)
    }
}

/// Byte offsets from a cgroup (`struct cgroup`, cgroup_mkdir's raw
/// tracepoint's first argument) to its hierarchy's id and its own:
/// `cgroup.root`, `cgroup_root.hierarchy_id`, `cgroup.kn`, `kernfs_node.id`.
/// `cgroup_kn` 0: unknown (the trace event, which has both in its record,
/// is attached instead).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupMkdirChain {
    pub cgroup_root: u32,
    pub root_hierarchy_id: u32,
    pub cgroup_kn: u32,
    pub kn_id: u32,
}

/// Byte offsets from a task to the kernfs id of its v1 devices cgroup:
/// `task_struct.cgroups` (its css_set), `css_set.subsys[devices_cgrp_id]`
/// (the controller's state), `cgroup_subsys_state.cgroup`, `cgroup.kn`,
/// `kernfs_node.id`. `task_cgroups` 0: not read.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct V1DevicesChain {
    pub task_cgroups: u32,
    pub css_set_devices: u32,
    pub css_cgroup: u32,
    pub cgroup_kn: u32,
    pub kn_id: u32,
}

/// Where the running task's ids and uid lie: `task_struct.pid` and
/// `.tgid`, then `task_struct.cred` and `cred.uid`. The device hooks read
/// them from their task, typed by BTF, with loads the verifier checks
/// against that BTF: one helper call where bpf_get_current_pid_tgid and
/// bpf_get_current_uid_gid are two (and the latter maps the uid through
/// the initial user namespace, which maps every uid to itself). All 0:
/// the helpers are called instead.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskChain {
    pub task_pid: u32,
    pub task_tgid: u32,
    pub task_cred: u32,
    pub cred_uid: u32,
}

/// Where, in this kernel's memory, the device programs in force on a
/// task's cgroup2 cgroup are: task->cgroups->dfl_cgrp->bpf.effective[device]
/// is an array of items, each a program whose aux holds its id. Offsets
/// from the kernel's BTF; all 0 (not followed) when it lacks a link.
#[derive(Clone, Copy, Debug, Default)]
pub struct PolicyProgramsChain {
    pub task_cgroups: u32,
    pub css_set_dfl_cgrp: u32,
    /// cgroup.bpf.effective[the device attach type].
    pub cgroup_effective_device: u32,
    pub array_items: u32,
    pub item_size: u32,
    pub item_prog: u32,
    pub prog_aux: u32,
    pub aux_id: u32,
}

impl PolicyProgramsChain {
    /// The fields in `global::POLICY_PROGRAMS_CHAIN`'s order.
    pub const fn fields(&self) -> [u32; 8] {
        [
            self.task_cgroups,
            self.css_set_dfl_cgrp,
            self.cgroup_effective_device,
            self.array_items,
            self.item_size,
            self.item_prog,
            self.prog_aux,
            self.aux_id,
        ]
    }
}

/// The fixed-size fields of an event, written in one go.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct EventHead {
    /// `bpf_ktime_get_boot_ns()` when the device hook ran.
    pub boot_ns: u64,
    /// Inode number of the task's cgroup2 directory.
    pub cgroup_id: u64,
    /// Process id (tgid) and thread id.
    pub pid: u32,
    pub tid: u32,
    pub uid: u32,
    pub device: DeviceFields,
    /// The device hook's verdict, 0 allowed or a negative errno: the BPF
    /// policies' (observer, `bpf_get_retval`) or the kernel's final one
    /// (fexit). Always 0 from the errno observer, which cannot see it.
    pub hook_verdict: i32,
    /// Return value of the open call: fd (>= 0) or negative errno.
    pub syscall_ret: i32,
    /// `SYSCALL_*`.
    pub syscall: u16,
    /// `FLAG_*`.
    pub flags: u16,
    /// Which of gpu-trace's programs made the event (`PROGRAM_*`), as drop
    /// records name it.
    pub program: u32,
}

const _: () = assert!(core::mem::size_of::<EventHead>() == 56);
const _: () = assert!(
    core::mem::size_of::<DeviceAccessEvent>()
        == 56 + 8 + 4 * SIGHTED_PROGRAMS + COMM_LEN + PATH_LEN
);

/// How many programs in force a sighting records (runtimes attach one or
/// two; systemd, a hook and gpu-trace's own observer add theirs).
pub const SIGHTED_PROGRAMS: usize = 8;

/// Per-thread state between the entry and the exit of an open call. Small on
/// purpose: it is written on every open on the host. The observer fills in the
/// device fields when the call reaches the device hook.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct OpenInFlight {
    /// User pointer to the path argument.
    pub path_ptr: u64,
    /// When the device hook ran; with VERDICT_FROM_ERRNO, until then, when
    /// the call entered.
    pub boot_ns: u64,
    pub cgroup_id: u64,
    pub uid: u32,
    pub device: DeviceFields,
    pub hook_verdict: i32,
    /// `SYSCALL_*` of the call in flight.
    pub syscall: u16,
    /// `SEEN_*` bits: whether the observer filled in the device fields, and
    /// whether the device is a watched one.
    pub seen: u16,
    /// With fexit alone: the path's first `PATH_HEAD_LEN` bytes as the
    /// device hook read them, zero-padded, so the open's exit can tell its
    /// own sighting from one an earlier open left with the same buffer.
    pub path_head: [u64; PATH_HEAD_LEN / 8],
}

/// How much of the path a sighting keeps (`OpenInFlight::path_head`): enough
/// to tell /dev/dri/renderD128 from renderD129 and nvidia-uvm from
/// nvidia-uvm-tools.
pub const PATH_HEAD_LEN: usize = 32;

impl OpenInFlight {
    /// A call just entered: only the path pointer, the syscall and (with
    /// VERDICT_FROM_ERRNO) the time are known.
    pub const fn entered(path_ptr: u64, syscall: u16, boot_ns: u64) -> Self {
        Self {
            path_ptr,
            boot_ns,
            cgroup_id: 0,
            uid: 0,
            device: DeviceFields::NONE,
            hook_verdict: 0,
            syscall,
            seen: 0,
            path_head: [0; PATH_HEAD_LEN / 8],
        }
    }
}

const _: () = assert!(core::mem::size_of::<OpenInFlight>() == 48 + PATH_HEAD_LEN);

/// What the errno observer saw last in a cgroup. Kernels before 6.1 give a
/// cgroup_device program no thread id, so the open call it belongs to is
/// found the other way round: the call's exit claims its cgroup's sighting.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LastDeviceCheck {
    /// 0 once claimed.
    pub boot_ns: u64,
    pub cgroup_id: u64,
    pub uid: u32,
    pub device: DeviceFields,
}

const _: () = assert!(core::mem::size_of::<LastDeviceCheck>() == 32);

/// A cgroup's path relative to the cgroup2 mount, NUL-terminated, and who
/// made it.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CgroupPath {
    pub path: [u8; PATH_LEN],
    /// The uid (in the initial user namespace) of the task that made the
    /// directory: what its owner was, once it is gone.
    pub creator_uid: u32,
}

/// `OpenInFlight::seen` bits.
pub const SEEN_DEVICE: u16 = 1;
pub const SEEN_WATCHED: u16 = 2;
/// With fexit alone: the device hook counted this call's denial as a
/// repeat already; the open's exit only takes the mark (no other field but
/// the path pointer, syscall and verdict is this call's).
pub const SEEN_COUNTED: u16 = 4;

/// What makes two problems "the same" for the kernel's fold: cgroup,
/// device, access and command, as userspace folds them, the outcome (so
/// that a repeat decodes to the same verdict and errno), and the fold
/// window it fell in (boot time / window length): a window's keys get no
/// more repeats once it is over, so userspace can take their last count
/// and remove them with no program left to write to them.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct RepeatKey {
    pub cgroup_id: u64,
    pub window: u64,
    pub device: DeviceFields,
    /// `FLAG_*` of the first event, but FLAG_PATH_TRUNCATED and
    /// FLAG_PATH_FROM_REGS: a repeat is decided before the saved registers
    /// are read (userspace keeps the first's flags with its path).
    pub flags: u16,
    pub _pad: u16,
    pub hook_verdict: i32,
    pub syscall_ret: i32,
    pub comm: [u8; COMM_LEN],
}

const _: () = assert!(core::mem::size_of::<RepeatKey>() == 56);

impl RepeatKey {
    /// The key of a problem about to be sent (the kernel side) or just
    /// received (userspace): both must make the very same one.
    #[inline(always)]
    pub fn of(head: &EventHead, comm: &[u8; COMM_LEN], window_ns: u64) -> Self {
        RepeatKey {
            cgroup_id: head.cgroup_id,
            window: head.boot_ns / window_ns,
            device: head.device,
            flags: head.flags & !(FLAG_PATH_TRUNCATED | FLAG_PATH_FROM_REGS),
            _pad: 0,
            hook_verdict: head.hook_verdict,
            syscall_ret: head.syscall_ret,
            comm: *comm,
        }
    }

    /// Is this a problem, the only kind of event folded?
    #[inline(always)]
    pub fn is_problem(head: &EventHead) -> bool {
        head.hook_verdict != 0 || head.syscall_ret < 0
    }
}

/// The repeats of one `RepeatKey`: counted in the kernel instead of sent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RepeatCount {
    /// Repeats counted (atomically, by every CPU); userspace takes differences.
    pub repeats: u64,
    /// The latest repeat's time, process and thread, uid and syscall (the
    /// syscall SYSCALL_NONE where the repeat was known before the saved
    /// registers would have named it: userspace takes the first's).
    pub last_ns: u64,
    pub last_pid: u32,
    pub last_tid: u32,
    pub last_uid: u32,
    pub last_syscall: u16,
    pub _pad: u16,
}

/// Keys the kernel folds at once; past it, problems are sent unfolded.
pub const REPEATS_CAPACITY: u32 = 16384;

/// The key a thread's latest problem was folded under, kept per CPU (see
/// gpu-trace-ebpf's fold.rs): the thread's next denial of the same device
/// on that CPU counts under it without reading its cgroup and command name.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadLastFolded {
    /// Odd while the slot is being written. Two programs on one CPU (a
    /// preempted one and the one that preempted it) may both use the slot:
    /// a writer that finds it odd leaves it alone, and a reader trusts
    /// what it read only if the sequence was even and unchanged around it.
    pub sequence: u64,
    /// `bpf_get_current_pid_tgid()` of the thread.
    pub pid_tgid: u64,
    pub key: RepeatKey,
    /// The identity generation (map::IDENTITY_GENERATION) read before the
    /// key's cgroup and command were: the key holds while it is unchanged.
    pub generation: u64,
    /// The boot time of the problem that made or last found the key: the
    /// time of the repeats that read no clock.
    pub remembered_ns: u64,
    /// `bpf_jiffies64()` just after `remembered_ns` was read: a repeat
    /// that finds the same tick is less than a tick later, still in the
    /// key's window (u64::MAX when the window ends too soon for that).
    pub tick: u64,
    /// Repeats this CPU counted under the slot's key, never reset: how
    /// often the short way served. Added to without an atomic (one CPU's
    /// line): a program preempted mid-add may lose one.
    pub by_thread: u64,
    /// Counted up each time the slot takes a key: what `held` is tagged with.
    pub assignment: u64,
    /// Where BPF has compare-and-exchange: the repeats of `key` counted in
    /// the slot itself (a CPU's own cache line, where `REPEATS`'s count is
    /// every CPU's), tagged with the assignment they were counted under
    /// (see `held`). Handed to `REPEATS` when the slot takes another key;
    /// userspace adds them meanwhile.
    pub held: u64,
    /// The time and uid of the latest repeat counted in `held` (its thread
    /// is the slot's).
    pub held_ns: u64,
    pub held_uid: u32,
    pub _pad: u32,
    /// Repeats this CPU counted in `held`, never reset: how often the
    /// slot's own count served (as `by_thread`, without an atomic).
    pub in_slot: u64,
}

/// `ThreadLastFolded::held`: the assignment's low 31 bits, whether the
/// slot counts (armed: its key is in `REPEATS`, so nothing is counted for
/// a first that was lost), and the count. Every change is one atomic
/// exchange: a repeat's add fails once the slot has taken another key.
pub mod held {
    const TAG_SHIFT: u32 = 33;
    /// Set once the slot's key is known to be in `REPEATS`.
    pub const ARMED: u64 = 1 << 32;
    /// Past this many, repeats go to `REPEATS` directly.
    pub const COUNT_LIMIT: u64 = (1 << 32) - 1;

    /// `held` of a slot that has just taken assignment `assignment`.
    #[inline(always)]
    pub fn unarmed(assignment: u64) -> u64 {
        assignment << TAG_SHIFT
    }

    /// Whether `held` was counted under `assignment` and counts.
    #[inline(always)]
    pub fn armed_for(held: u64, assignment: u64) -> bool {
        held & !COUNT_LIMIT == unarmed(assignment) | ARMED
    }

    #[inline(always)]
    pub fn count(held: u64) -> u64 {
        held & COUNT_LIMIT
    }

    /// The assignment `held` counts for (its low 31 bits).
    #[inline(always)]
    pub fn tag(held: u64) -> u64 {
        held >> TAG_SHIFT
    }

    /// Whether `held` is tagged with `assignment` (armed or not): false
    /// from the hand-over's exchange until the slot's assignment is
    /// rewritten after it.
    #[inline(always)]
    pub fn tagged(held: u64, assignment: u64) -> bool {
        tag(held) == tag(unarmed(assignment))
    }
}

/// One cgroup in one fold window (`RepeatKey::window`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CgroupWindow {
    pub cgroup_id: u64,
    pub window: u64,
}

/// First sightings one cgroup sends per fold window. Past them, its new
/// problems are counted per (cgroup, major, access) instead of sent: one
/// tenant cannot fill the fold table or the ring buffer for the others.
/// Above watch's own default per cgroup (50), which then decides.
pub const KERNEL_BUDGET_PER_CGROUP: u64 = 64;
/// Cgroups whose sightings are counted per window (LRU: an evicted one only
/// gets a fresh budget).
pub const CGROUP_SENT_CAPACITY: u32 = 16384;

/// Problems a cgroup had past its budget in one window, by device major,
/// access and outcome (so that a count never mixes denials with other
/// failures). Past HELD_BACK_KEYS_PER_CGROUP of them, one key with major,
/// access and type 0 holds the rest of that cgroup's window, and from the
/// first, its failures before any device check (which have no device).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct HeldBackKey {
    pub cgroup_id: u64,
    pub window: u64,
    pub major: u32,
    pub access: u16,
    pub dev_type: u16,
    pub hook_verdict: i32,
    pub syscall_ret: i32,
}

/// Held-back keys one cgroup makes per window before the rest share one.
pub const HELD_BACK_KEYS_PER_CGROUP: u64 = 64;

/// How many were held back, and the latest of them as it would have been
/// sent (without its path).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct HeldBackCount {
    /// Counted atomically, by every CPU; userspace takes differences.
    pub count: u64,
    pub latest: EventHead,
    pub latest_comm: [u8; COMM_LEN],
}

/// Held-back keys at once; past it, a problem held back is counted lost
/// (for its cgroup).
pub const HELD_BACK_CAPACITY: u32 = 4096;
/// Cgroups whose lost events are counted apart (LRU).
pub const LOST_BY_CGROUP_CAPACITY: u32 = 4096;

#[cfg(feature = "user")]
mod user {
    // SAFETY: plain-old-data, every bit pattern is valid.
    unsafe impl aya::Pod for super::DeviceAccessEvent {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::CgroupPath {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::RepeatKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::RepeatCount {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::CgroupWindow {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::HeldBackKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::HeldBackCount {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ThreadLastFolded {}
    // SAFETY: repr(C), three u64, no padding.
    unsafe impl aya::Pod for super::DropRecordBudget {}
    // SAFETY: repr(C), five u32, no padding.
    unsafe impl aya::Pod for super::V1DevicesChain {}
    // SAFETY: repr(C), four u32, no padding.
    unsafe impl aya::Pod for super::TaskChain {}
    // SAFETY: repr(C), four u32, no padding.
    unsafe impl aya::Pod for super::CgroupMkdirChain {}
}
