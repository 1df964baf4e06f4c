//! Loads the kernel programs, attaches them, and reads their events.
//!
//! Every attachment is a link owned by a file descriptor of this process, so
//! the kernel detaches everything when the process ends, even on SIGKILL.

use std::path::Path;

use anyhow::Context;
use aya::{
    maps::{Array, HashMap, MapData, PerCpuArray, RingBuf},
    Ebpf, EbpfLoader,
};
use gpu_trace_common::{
    cgroup_mkdir, global, map, program, CgroupMkdirChain, CgroupPath, DeviceAccessEvent,
    PolicyProgramsChain, TaskChain, V1DevicesChain,
};

use crate::{
    host::{kernel_btf::KernelBtf, preflight::Unsupported, proc_devices::CharMajors},
    kernel::{
        attach::{attach_raw_tracepoint, attach_tracepoint, take_map, Hook, TraceLink},
        bench_cut,
        bpf_log::{self, BpfLog, BpfLogLevel},
        cgroup_mkdir_chain,
        cgroups_made::CgroupsMade,
        device_hook::{DeviceHook, HookChoice, Loaded},
        held_back::HeldBack,
        lazy_btf::LazyBtf,
        lost_by_cgroup::LostByCgroup,
        open_route::{self, OpenRoute, OpensChoice},
        policy_programs_chain,
        repeats::KernelRepeats,
        task_chain, thread_identity, v1_devices_chain, without_atomics,
    },
    model::{
        access::{DeviceAccess, VerdictSource},
        cgroup_note::CgroupNote,
    },
};

/// The tracer object, built from gpu-trace-ebpf by build.rs.
static TRACER_OBJECT: &[u8] =
    aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/gpu-trace-tracer"));

#[cfg(test)]
pub(crate) fn tracer_object() -> &'static [u8] {
    TRACER_OBJECT
}

/// Events handed over per `drain` call before the caller gets control back.
pub const DRAIN_BATCH: usize = 4096;

/// At most this many events fit in the ring buffer: what a final drain at
/// shutdown may find, whatever keeps arriving meanwhile.
pub const RING_CAPACITY_EVENTS: usize =
    gpu_trace_common::EVENTS_RING_BYTES as usize / size_of::<DeviceAccessEvent>();

/// Which device accesses to report.
#[derive(Debug, Clone, Default)]
pub struct TracerConfig {
    /// Char majors to watch (ignored with `all_devices`).
    pub majors: Vec<u32>,
    pub all_devices: bool,
    /// Report allowed accesses too, not only denied ones.
    pub report_allowed: bool,
    /// Report only processes added with `follow` and their descendants.
    pub follow_process_tree: bool,
    /// Which device hook to use.
    pub hook: HookChoice,
    /// How the open calls' path and result are traced, if at all.
    pub opens: OpensChoice,
    /// Repeats of a problem within this window are counted in the kernel,
    /// not sent (zero: every problem is sent).
    pub fold_window: std::time::Duration,
    /// The kernel programs' records of what they drop (`--bpf-log`).
    pub bpf_log: BpfLogLevel,
}

pub struct Tracer {
    // Holds the programs and their links; dropping it detaches everything.
    _ebpf: Ebpf,
    events: RingBuf<MapData>,
    watched_majors: WatchedMajors,
    followed: Option<HashMap<MapData, u32, u8>>,
    /// Paths of the cgroups made since start, for CgroupResolver to take.
    cgroup_paths: Option<HashMap<MapData, u64, CgroupPath>>,
    lost_events: PerCpuArray<MapData, u64>,
    repeats: Option<KernelRepeats>,
    held_back: Option<HeldBack>,
    lost_by_cgroup: LostByCgroup,
    hooks: Vec<Hook>,
    verdict_source: VerdictSource,
    open_route: OpenRoute,
    /// What the open route costs and misses, for the ready line.
    open_route_summary: String,
    open_route_upgrade_watch: Option<std::path::PathBuf>,
    notes: Vec<String>,
    /// Owned here (not by `_ebpf`) so that `Drop` can detach them together.
    tracepoint_links: Vec<TraceLink>,
    bpf_log: Option<BpfLog>,
}

impl Drop for Tracer {
    fn drop(&mut self) {
        // Detaching a trace event waits for the tracepoints' grace periods
        // (about 75 ms on the build machine); one after another, eight of
        // them made `run` take half a second to exit. Side by side they
        // cost about one. A raw tracepoint's detach does not wait for them
        // (at most for one grace period, where other programs share its
        // tracepoint).
        let (events, raw): (Vec<_>, Vec<_>) = std::mem::take(&mut self.tracepoint_links)
            .into_iter()
            .partition(|link| matches!(link, TraceLink::Event(_)));
        drop(raw);
        std::thread::scope(|scope| {
            for link in events {
                scope.spawn(move || drop(link));
            }
        });
    }
}

impl Tracer {
    /// Loads the device hook the kernel accepts, then attaches: tracepoints
    /// first, so that the device hook, once in place, always finds the open
    /// call it belongs to.
    pub fn start(cgroup2_mount: &Path, config: &TracerConfig) -> anyhow::Result<Self> {
        anyhow::ensure!(
            option_env!("GPU_TRACE_EBPF_SKIPPED").is_none(),
            "this gpu-trace was built with GPU_TRACE_BUILD_SKIP set: it has no kernel programs"
        );
        let mut notes = Vec::new();
        let settings = LoadSettings::for_this_kernel(config, &mut notes)?;
        let pt_regs_offset = settings.pt_regs_offset;
        let slot_counts = settings.slot_counts;
        let mut btf = LazyBtf::default();
        let (mut ebpf, device_hook, refused) = load_device_hook(config, settings, &mut btf)?;
        let mut hooks = refused;

        // Filled before anything attaches, so no early access is missed.
        let watched_majors = WatchedMajors::fill(&mut ebpf, &config.majors)?;

        let mut tracepoint_links = Vec::new();
        let cgroup_paths = cgroups_made(
            &mut ebpf,
            settings.cgroup_mkdir,
            &mut tracepoint_links,
            &mut notes,
        )?;
        if !config.fold_window.is_zero() {
            if let Err(e) = thread_identity::watch(&mut ebpf, &mut tracepoint_links) {
                notes.push(format!(
                    "{e:#}: each repeated denial reads its cgroup and command name again"
                ));
            }
        }
        let followed = if config.follow_process_tree {
            let (links, hook) = follow_process_tree(&mut ebpf)?;
            tracepoint_links.extend(links);
            hooks.push(hook);
            Some(HashMap::try_from(take_map(&mut ebpf, map::FOLLOWED)?)?)
        } else {
            None
        };
        let opens = open_route::attach(
            &mut ebpf,
            config.opens,
            device_hook,
            config.hook,
            pt_regs_offset != 0,
            &mut btf,
        )?;
        tracepoint_links.extend(opens.links);
        hooks.extend(opens.hooks);
        device_hook.attach(&mut ebpf, cgroup2_mount)?;
        hooks.push(Hook {
            name: device_hook.describe(cgroup2_mount),
            refused: None,
            stood_in_for: false,
        });

        // Loading read the kernel's BTF (5 MB) and parsed the object; malloc
        // keeps what was freed, and a long-running watch would hold it for
        // good. Hand it back to the kernel, the BTF first.
        drop(btf);
        // SAFETY: no arguments beyond the padding to keep; glibc's own lock.
        unsafe { libc::malloc_trim(0) };
        let events = RingBuf::try_from(take_map(&mut ebpf, map::EVENTS)?)?;
        let lost_events = PerCpuArray::try_from(take_map(&mut ebpf, map::LOST_EVENTS)?)?;
        let (repeats, held_back) = if config.fold_window.is_zero() {
            (None, None)
        } else {
            let map = HashMap::try_from(take_map(&mut ebpf, map::REPEATS)?)?;
            let held = HashMap::try_from(take_map(&mut ebpf, map::HELD_BACK)?)?;
            let slots = PerCpuArray::try_from(take_map(&mut ebpf, map::THREAD_LAST_FOLDED)?)?;
            (
                Some(KernelRepeats::new(
                    map,
                    slots,
                    slot_counts,
                    config.fold_window,
                )),
                Some(HeldBack::new(held, config.fold_window)),
            )
        };
        let lost_by_cgroup = LostByCgroup::new(HashMap::try_from(take_map(
            &mut ebpf,
            map::LOST_BY_CGROUP,
        )?)?);
        let bpf_log = BpfLog::start(&mut ebpf, config.bpf_log)?;
        Ok(Self {
            _ebpf: ebpf,
            events,
            watched_majors,
            followed,
            cgroup_paths,
            lost_events,
            repeats,
            held_back,
            lost_by_cgroup,
            hooks,
            verdict_source: device_hook.verdict_source(),
            open_route: opens.route,
            open_route_summary: opens.summary,
            open_route_upgrade_watch: opens.upgrade_watch,
            notes,
            tracepoint_links,
            bpf_log,
        })
    }

    /// Prints what the kernel programs recorded (`--bpf-log`), if asked.
    pub fn flush_bpf_log(&mut self) {
        if let Some(log) = &mut self.bpf_log {
            log.flush();
        }
    }

    /// The kernel programs' records since the last read, without their
    /// left-out counts (the tick says those).
    pub fn read_bpf_log(&mut self) {
        if let Some(log) = &mut self.bpf_log {
            log.read();
        }
    }

    /// The last of the kernel programs' records, with what the rate limit
    /// left out.
    pub fn finish_bpf_log(&mut self) {
        if let Some(log) = &mut self.bpf_log {
            log.finish();
        }
    }

    /// The kernel's record of cgroups made since start, as a lookup of a
    /// path by cgroup id (None if the tracepoint was refused, or already taken).
    pub fn take_cgroup_paths(&mut self) -> Option<impl Fn(u64) -> Option<CgroupNote> + 'static> {
        let made = CgroupsMade(self.cgroup_paths.take()?);
        Some(move |id| made.note(id))
    }

    pub fn hooks(&self) -> &[Hook] {
        &self.hooks
    }

    /// Where the verdicts of this tracer's events come from.
    pub fn verdict_source(&self) -> VerdictSource {
        self.verdict_source
    }

    /// How open calls are traced: their results are unseen without a route.
    pub fn open_route(&self) -> OpenRoute {
        self.open_route
    }

    /// What the open route costs and what it misses, in one line.
    pub fn open_route_summary(&self) -> &str {
        &self.open_route_summary
    }

    /// Where a change would call for the syscall tracepoints after all: the
    /// unpopulated cgroup v1 devices hierarchy that `--opens auto` left them
    /// out for.
    pub fn open_route_upgrade_watch(&self) -> Option<&Path> {
        self.open_route_upgrade_watch.as_deref()
    }

    /// Attaches the syscall tracepoints now (`because` says why, for the
    /// summary); a no-op where open calls are traced already.
    pub fn trace_open_calls_now(&mut self, because: &str) -> anyhow::Result<()> {
        if self.open_route != OpenRoute::None {
            return Ok(());
        }
        let opens = open_route::attach_syscall_tracepoints(&mut self._ebpf, because)?;
        self.tracepoint_links.extend(opens.links);
        self.hooks
            .retain(|hook| !hook.name.starts_with("tracepoints syscalls:"));
        self.hooks.extend(opens.hooks);
        self.open_route = opens.route;
        self.open_route_summary = opens.summary;
        self.open_route_upgrade_watch = None;
        Ok(())
    }

    /// Things done to the host on the way (e.g. mounting tracefs), to tell the user once.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Adds majors to the kernel-side filter (already present ones are kept).
    pub fn watch_majors(&mut self, majors: &[u32]) -> anyhow::Result<()> {
        self.watched_majors.add(majors)
    }

    /// Tells the kernel side which majors have a driver now (see
    /// `MAJOR_OTHER_DRIVER`), from the kernel's own list (`read_kernel`,
    /// never a copy given for diagnosis): after a driver is loaded or unloaded.
    pub fn refresh_driver_majors(&mut self, kernel: &CharMajors) -> anyhow::Result<()> {
        self.watched_majors.mark_other_drivers(kernel)
    }

    /// Adds a process to the followed tree; its later forks join by themselves.
    pub fn follow(&mut self, pid: u32) -> anyhow::Result<()> {
        let followed = self
            .followed
            .as_mut()
            .context("the tracer was not started to follow a process tree")?;
        followed
            .insert(pid, 1, 0)
            .with_context(|| format!("following pid {pid}"))?;
        Ok(())
    }

    pub fn unfollow(&mut self, pid: u32) -> anyhow::Result<()> {
        let followed = self
            .followed
            .as_mut()
            .context("the tracer was not started to follow a process tree")?;
        // Already gone (it exited) is fine.
        let _ = followed.remove(&pid);
        Ok(())
    }

    pub fn watched_majors(&self) -> Vec<u32> {
        self.watched_majors.majors.clone()
    }

    /// A duplicate of the ring buffer's fd, for a poller that must own its
    /// fd: polling either one sees the same ring.
    pub fn events_fd_owned(&self) -> std::io::Result<std::os::fd::OwnedFd> {
        use std::os::fd::AsFd;
        self.events.as_fd().try_clone_to_owned()
    }

    /// Hands the events waiting in the ring buffer to `each`, at most
    /// `limit` of them: under a sustained flood the buffer never empties, and
    /// the caller must get to write, flush and handle signals in between.
    /// Returns how many were handed over.
    pub fn drain(&mut self, limit: usize, mut each: impl FnMut(DeviceAccess)) -> usize {
        let mut count = 0;
        while count < limit {
            let Some(item) = self.events.next() else {
                break;
            };
            if item.len() < size_of::<DeviceAccessEvent>() {
                continue;
            }
            // SAFETY: the kernel wrote a whole DeviceAccessEvent here; the
            // read copes with any alignment.
            let raw = unsafe { item.as_ptr().cast::<DeviceAccessEvent>().read_unaligned() };
            if let Some(repeats) = &mut self.repeats {
                repeats.note_sent(&raw);
            }
            each(DeviceAccess::decode(&raw, self.verdict_source));
            count += 1;
        }
        count
    }

    /// What the kernel counted rather than sent since the last call (no
    /// repeats and nothing held back without a fold window); `last` before
    /// the tracer stops (see KernelRepeats::collect).
    pub fn counted_in_kernel(&mut self, last: bool) -> CountedInKernel {
        let verdict_source = self.verdict_source;
        let mut counted = CountedInKernel::default();
        if let Some(repeats) = &mut self.repeats {
            counted.repeats = repeats.collect(verdict_source, last);
        }
        if let Some(held) = &mut self.held_back {
            counted.held_back = held.collect(verdict_source);
        }
        counted.lost_by_cgroup = self.lost_by_cgroup.since_last();
        counted
    }

    /// Repeats counted under their thread's remembered key, on every CPU
    /// (the short way, fold.rs): without a lookup of their cgroup and
    /// command name. 0 without folding.
    pub fn folded_by_thread(&self) -> u64 {
        self.repeats
            .as_ref()
            .map_or(0, KernelRepeats::folded_by_thread)
    }

    /// Of those, the repeats counted in their CPU's own count (0 before
    /// 5.12, and without folding).
    pub fn folded_in_slot(&self) -> u64 {
        self.repeats
            .as_ref()
            .map_or(0, KernelRepeats::folded_in_slot)
    }

    /// Events the kernel side could not hand over because the ring buffer was full.
    pub fn lost_events(&self) -> u64 {
        self.lost_events
            .get(&0, 0)
            .map(|per_cpu| per_cpu.iter().sum())
            .unwrap_or(0)
    }
}

/// What the kernel counted rather than sent.
#[derive(Default)]
pub struct CountedInKernel {
    /// Repeats of problems sent before: the latest of each, and how many.
    pub repeats: Vec<(DeviceAccess, u64)>,
    /// Problems past their cgroup's budget: the latest of each key, and how many.
    pub held_back: Vec<(DeviceAccess, u64)>,
    /// Events lost to a full ring buffer, by cgroup id.
    pub lost_by_cgroup: Vec<(u64, u64)>,
}

/// What the kernel side needs to know besides the config.
#[derive(Clone, Copy)]
struct LoadSettings {
    child_pid_offset: u32,
    task_stack_offset: u32,
    pt_regs_offset: u32,
    compat_status_offset: u32,
    task: TaskChain,
    verdict_from_errno: bool,
    v1_devices: V1DevicesChain,
    cgroup_mkdir: CgroupMkdirChain,
    policy_programs: PolicyProgramsChain,
    /// `gpu_trace_common::bench_cut`'s step: NONE outside the benchmark.
    bench_cut: u8,
    /// Whether BPF has compare-and-exchange here (global::SLOT_COUNTS).
    slot_counts: bool,
}

impl LoadSettings {
    /// What the programs need to know of this kernel's layout, read from
    /// tracefs and BTF; `notes` says what could not be read and what that costs.
    fn for_this_kernel(config: &TracerConfig, notes: &mut Vec<String>) -> anyhow::Result<Self> {
        notes.extend(crate::host::tracefs::ensure_mounted()?);
        let child_pid_offset = if config.follow_process_tree {
            crate::host::tracefs::field_offset("sched", "sched_process_fork", "child_pid")?
        } else {
            0
        };
        // Read once: the saved registers and the v1 devices chain both need it.
        let btf = KernelBtf::read().map_err(|e| format!("{e:#}"));
        let btf = btf.as_ref().map_err(String::as_str);
        let (task_stack_offset, pt_regs_offset) = saved_registers(btf, notes);
        let compat_status_offset = compat_status(btf, notes);
        let saved_register_words = task_chain::SavedRegisterWords {
            task_stack: task_stack_offset,
            compat_status: compat_status_offset,
        };
        Ok(Self {
            child_pid_offset,
            task_stack_offset,
            pt_regs_offset,
            compat_status_offset,
            task: task_chain::for_this_kernel(btf, saved_register_words),
            verdict_from_errno: false,
            v1_devices: v1_devices_chain::for_this_host(btf, notes),
            cgroup_mkdir: cgroup_mkdir_chain::for_this_kernel(btf),
            policy_programs: policy_programs_chain::for_this_kernel(btf, notes),
            bench_cut: bench_cut::from_env(config.opens, notes)?,
            slot_counts: bpf_has_compare_and_exchange(),
        })
    }
}

/// BPF's atomic instructions beyond the add came with 5.12; an older
/// kernel's verifier refuses them (the slot's count is then left out, see
/// gpu-trace-ebpf's slot_count.rs). A kernel whose version cannot be read
/// is taken for an old one.
fn bpf_has_compare_and_exchange() -> bool {
    aya::util::KernelVersion::current().is_ok_and(|v| v >= aya::util::KernelVersion::new(5, 12, 0))
}

/// Where the saved user registers of a task are: `task_struct.stack`'s
/// offset, and theirs from the bottom of that stack (x86_64 only). Both 0,
/// with a note, when unknown: accesses outside traced open calls then come
/// without their path.
fn saved_registers(btf: Result<&KernelBtf, &str>, notes: &mut Vec<String>) -> (u32, u32) {
    /// x86_64's kernel stack (32 KiB only with KASAN, which no distribution
    /// kernel enables; the device hook then finds no 64-bit user frame
    /// there and reports no path).
    const THREAD_SIZE: u32 = 16 << 10;
    const PT_REGS_SIZE: u32 = 21 * 8;
    if !cfg!(target_arch = "x86_64") {
        return (0, 0);
    }
    let found = btf.map_err(|e| anyhow::anyhow!("{e}")).and_then(|btf| {
        let stack = btf.member_offset("task_struct", "stack")?;
        // TOP_OF_KERNEL_STACK_PADDING: 16 bytes above the registers on
        // kernels built with FRED (6.9+), whose BTF has its frame type.
        let padding = if btf.has_struct("fred_frame")? { 16 } else { 0 };
        Ok((stack, THREAD_SIZE - padding - PT_REGS_SIZE))
    });
    found.unwrap_or_else(|e| {
        notes.push(format!(
            "{e:#}: device accesses outside traced open calls are reported without their path"
        ));
        (0, 0)
    })
}

/// Where a task's syscall status word lies in its task_struct
/// (`thread_info.status`, thread_info being the struct's first member on
/// x86_64): its TS_COMPAT bit, not the code segment, tells a 64-bit
/// process's `int $0x80` call from a 64-bit one. 0 where BTF lacks either
/// member (the code segment decides then, and `notes` says what that costs).
fn compat_status(btf: Result<&KernelBtf, &str>, notes: &mut Vec<String>) -> u32 {
    if !cfg!(target_arch = "x86_64") {
        return 0;
    }
    // Without BTF at all, saved_registers has said so already.
    let Ok(btf) = btf else {
        return 0;
    };
    let found = btf
        .member_offset("task_struct", "thread_info")
        .and_then(|thread_info| Ok(thread_info + btf.member_offset("thread_info", "status")?));
    found.unwrap_or_else(|e| {
        notes.push(format!(
            "{e:#}: a 64-bit process's 32-bit calls (int 0x80) are taken for 64-bit ones, and their path is read from the wrong register"
        ));
        0
    })
}

/// Parses the object and creates its maps, with the settings baked in as
/// read-only globals; programs are loaded one by one afterwards.
fn load_object(config: &TracerConfig, settings: &LoadSettings) -> anyhow::Result<Ebpf> {
    let patched;
    let object = if settings.slot_counts {
        TRACER_OBJECT
    } else {
        patched = without_atomics::without_atomics(TRACER_OBJECT)?.0;
        patched.bytes()
    };
    let mut loader = EbpfLoader::new();
    let chain = settings.policy_programs.fields();
    for (name, offset) in global::POLICY_PROGRAMS_CHAIN.iter().zip(&chain) {
        loader.override_global(name, offset, true);
    }
    loader
        .override_global(
            global::WATCH_ALL_DEVICES,
            &u8::from(config.all_devices),
            true,
        )
        .override_global(
            global::REPORT_ALLOWED,
            &u8::from(config.report_allowed),
            true,
        )
        .override_global(
            global::FOLLOW_PROCESS_TREE,
            &u8::from(config.follow_process_tree),
            true,
        )
        .override_global(
            global::FORK_CHILD_PID_OFFSET,
            &settings.child_pid_offset,
            true,
        )
        .override_global(global::TASK_STACK_OFFSET, &settings.task_stack_offset, true)
        .override_global(global::V1_DEVICES_CHAIN, &settings.v1_devices, true)
        .override_global(global::CGROUP_MKDIR_CHAIN, &settings.cgroup_mkdir, true)
        .override_global(global::PT_REGS_OFFSET, &settings.pt_regs_offset, true)
        .override_global(
            global::COMPAT_STATUS_OFFSET,
            &settings.compat_status_offset,
            true,
        )
        .override_global(global::TASK_CHAIN, &settings.task, true)
        .override_global(
            global::FOLD_WINDOW_NS,
            &(config.fold_window.as_nanos() as u64),
            true,
        )
        .override_global(
            global::VERDICT_FROM_ERRNO,
            &u8::from(settings.verdict_from_errno),
            true,
        )
        .override_global(bpf_log::LEVEL_GLOBAL, &config.bpf_log.in_kernel(), true)
        .override_global(global::DROP_RECORD_LEVEL, &config.bpf_log.in_kernel(), true)
        .override_global(global::BENCH_CUT, &settings.bench_cut, true)
        .override_global(global::SLOT_COUNTS, &u8::from(settings.slot_counts), true)
        .load(object)
        .context("loading gpu-trace's eBPF object")
}

/// The kernel-side major filter (`MAJOR_*` by major), and the majors in
/// it (an array cannot list its set entries without a lookup per index).
struct WatchedMajors {
    filter: Array<MapData, u8>,
    /// Watched (`MAJOR_WATCHED`), sorted.
    majors: Vec<u32>,
    /// Registered by a driver and not watched (`MAJOR_OTHER_DRIVER`), sorted.
    other_drivers: Vec<u32>,
}

impl WatchedMajors {
    /// The kernel-side filter, filled with `majors`, and the majors other
    /// drivers hold today marked as such.
    fn fill(ebpf: &mut Ebpf, majors: &[u32]) -> anyhow::Result<Self> {
        let mut watched = WatchedMajors {
            filter: Array::try_from(take_map(ebpf, map::WATCHED_MAJORS)?)?,
            majors: Vec::new(),
            other_drivers: Vec::new(),
        };
        watched.add(majors)?;
        watched.mark_other_drivers(&CharMajors::read_kernel().context("reading /proc/devices")?)?;
        Ok(watched)
    }

    /// Marks the majors this kernel's drivers hold now (`kernel`): every
    /// other major stays `MAJOR_NO_DRIVER`, whose nodes the open route
    /// reports with their number when they fail.
    fn mark_other_drivers(&mut self, kernel: &CharMajors) -> anyhow::Result<()> {
        let now: Vec<u32> = kernel
            .iter()
            .map(|(major, _)| major)
            .filter(|m| *m < gpu_trace_common::MAJOR_LIMIT && self.majors.binary_search(m).is_err())
            .collect();
        for &gone in self.other_drivers.iter().filter(|m| !now.contains(m)) {
            self.filter
                .set(gone, gpu_trace_common::MAJOR_NO_DRIVER, 0)
                .with_context(|| format!("marking major {gone} driverless"))?;
        }
        for &major in now.iter().filter(|m| !self.other_drivers.contains(m)) {
            self.filter
                .set(major, gpu_trace_common::MAJOR_OTHER_DRIVER, 0)
                .with_context(|| format!("marking major {major} as another driver's"))?;
        }
        self.other_drivers = now;
        Ok(())
    }

    fn add(&mut self, majors: &[u32]) -> anyhow::Result<()> {
        for &major in majors {
            anyhow::ensure!(
                major < gpu_trace_common::MAJOR_LIMIT,
                "major {major} is out of range: device majors are below {}",
                gpu_trace_common::MAJOR_LIMIT
            );
            self.filter
                .set(major, gpu_trace_common::MAJOR_WATCHED, 0)
                .with_context(|| format!("adding major {major} to the watch list"))?;
            self.other_drivers.retain(|m| *m != major);
            if let Err(at) = self.majors.binary_search(&major) {
                self.majors.insert(at, major);
            }
        }
        Ok(())
    }
}

/// The kernel's note of cgroups made from now on: on the raw tracepoint
/// where BTF gave `chain` (its detach waits out no grace periods), else on the
/// trace event; where neither attaches, a note that says what that costs.
fn cgroups_made(
    ebpf: &mut Ebpf,
    chain: CgroupMkdirChain,
    links: &mut Vec<TraceLink>,
    notes: &mut Vec<String>,
) -> anyhow::Result<Option<HashMap<MapData, u64, CgroupPath>>> {
    let attached = if chain.cgroup_kn == 0 {
        // Without the chain the trace event is the way: nothing to say.
        note_new_cgroups(ebpf)
    } else {
        match attach_raw_tracepoint(ebpf, program::NOTE_CGROUP_MKDIR_RAW, "cgroup_mkdir") {
            Ok(link) => Ok(link),
            Err(refused) => match note_new_cgroups(ebpf) {
                Ok(link) => {
                    notes.push(format!(
                        "{refused:#}: the cgroup_mkdir trace event stands in, and stopping \
                         waits out its grace periods"
                    ));
                    Ok(link)
                }
                Err(e) => Err(e.context(format!("{refused:#}"))),
            },
        }
    };
    match attached {
        Ok(link) => {
            links.push(link);
            Ok(Some(HashMap::try_from(take_map(ebpf, map::CGROUP_PATHS)?)?))
        }
        Err(e) => {
            notes.push(format!(
                "{e:#}: a cgroup removed before its events are read is shown by id only"
            ));
            Ok(None)
        }
    }
}

/// Attaches the trace event's program, once the record layout it reads is
/// confirmed.
fn note_new_cgroups(ebpf: &mut Ebpf) -> anyhow::Result<TraceLink> {
    for (field, expected) in [
        ("root", cgroup_mkdir::ROOT),
        ("id", cgroup_mkdir::ID),
        ("path", cgroup_mkdir::PATH),
    ] {
        let found = crate::host::tracefs::field_offset("cgroup", "cgroup_mkdir", field)?;
        anyhow::ensure!(
            found as usize == expected,
            "cgroup:cgroup_mkdir has {field} at offset {found}, not {expected}"
        );
    }
    attach_tracepoint(ebpf, program::NOTE_CGROUP_MKDIR, "cgroup", "cgroup_mkdir")
}

/// Loads the object and the first device hook the kernel accepts; falls
/// back to a reload with the errno observer. Returns the hooks refused on
/// the way, each stood in for by the one loaded.
fn load_device_hook(
    config: &TracerConfig,
    settings: LoadSettings,
    btf: &mut LazyBtf,
) -> anyhow::Result<(Ebpf, DeviceHook, Vec<Hook>)> {
    let mut ebpf = load_object(config, &settings)?;
    let mut refused = Vec::new();
    let device_hook = match DeviceHook::load(&mut ebpf, config.hook, btf, &mut refused)? {
        Loaded::Hook(hook) => hook,
        Loaded::NeedsErrnoObserver if config.opens == OpensChoice::None => {
            return Err(Unsupported::HookRefused {
                hook: "device hook alone (--opens none)".into(),
                reason: "it needs a hook that reads the verdict itself (fexit, or the observer on 6.1+); \
                         on this kernel the verdict comes from the open's errno, which needs the open tracepoints"
                    .into(),
            }
            .into());
        }
        Loaded::NeedsErrnoObserver => {
            let settings = LoadSettings {
                verdict_from_errno: true,
                ..settings
            };
            ebpf = load_object(config, &settings)?;
            DeviceHook::load_errno_observer(&mut ebpf, &refused)?
        }
    };
    let refused = refused
        .into_iter()
        .map(|(name, why)| Hook {
            name,
            refused: Some(why),
            stood_in_for: true,
        })
        .collect();
    Ok((ebpf, device_hook, refused))
}

/// The fork and exit tracepoints that keep `run`'s process tree; required
/// in that mode, since without them descendants would go unseen.
fn follow_process_tree(ebpf: &mut Ebpf) -> anyhow::Result<(Vec<TraceLink>, Hook)> {
    let refused = |event: &str, e: anyhow::Error| Unsupported::HookRefused {
        hook: format!("tracepoint sched:{event}"),
        reason: format!("{e:#}; without it the process tree cannot be followed"),
    };
    // The fork's child is read from the trace event's record; the exit reads
    // nothing, and as a raw tracepoint its detach waits out no grace periods.
    let fork = attach_tracepoint(ebpf, program::FOLLOW_FORK, "sched", "sched_process_fork")
        .map_err(|e| refused("sched_process_fork", e))?;
    let exit = attach_raw_tracepoint(ebpf, program::FOLLOW_EXIT, "sched_process_exit")
        .map_err(|e| refused("sched_process_exit", e))?;
    let hook = Hook {
        name: "tracepoints sched:sched_process_{fork,exit} (following one process tree)".into(),
        refused: None,
        stood_in_for: false,
    };
    Ok((vec![fork, exit], hook))
}
