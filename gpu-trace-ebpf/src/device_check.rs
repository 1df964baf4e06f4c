//! What a device hook saw, whichever hook it was (the observer reading
//! `bpf_get_retval()`, or fexit on the kernel's check): handed to the open
//! call in flight on this thread, or reported at once outside one.

use aya_ebpf::helpers::{bpf_get_current_cgroup_id, bpf_ktime_get_boot_ns};
use gpu_trace_common::{
    bench_cut as cut, DeviceFields, EventHead, OpenInFlight, FLAG_DEVICE_SEEN, FLAG_HAS_SYSCALL,
    FLAG_PATH_FROM_REGS, MAJOR_NO_DRIVER, MAJOR_WATCHED, OPEN_CALLS_BY_ENTRY, OPEN_CALLS_BY_RESULT,
    PROGRAM_OPEN_FUNCTION_EXIT, SEEN_COUNTED, SEEN_DEVICE, SEEN_WATCHED, SYSCALL_CREAT,
    SYSCALL_NONE, SYSCALL_OPEN, SYSCALL_OPENAT, SYSCALL_OPENAT2,
};

use crate::{
    bench_cut,
    current_thread::CurrentThread,
    events, fold,
    maps::{is_followed, is_watched, major_class, open_calls_traced, report_allowed, IN_FLIGHT},
    open_calls::path_head,
    syscall_regs::syscall_path_argument,
};

/// One device permission check, in the cgroup device hook's terms.
pub struct DeviceCheck {
    pub device: DeviceFields,
    /// 0 allowed, negative errno denied.
    pub verdict: i32,
    /// The hook's `PROGRAM_*`, for the events it makes itself.
    pub program: u32,
}

#[inline(always)]
pub fn record(check: &DeviceCheck) {
    // Without an open route no call is ever in flight: skip the hash
    // lookup, which every device open would pay.
    let mut thread = None;
    match open_calls_traced() {
        OPEN_CALLS_BY_ENTRY => {
            let here = CurrentThread::here();
            if handed_to_open_call(check, &here) {
                return;
            }
            thread = Some(here);
        }
        OPEN_CALLS_BY_RESULT => {
            left_for_open_exit(check);
            return;
        }
        _ => {}
    }
    if !is_watched(check.device.dev_type, check.device.major) {
        return;
    }
    report_now(check, thread, SavedRegisters::Unread);
}

/// The syscall and path argument in the saved registers
/// (syscall_path_argument), read only for a first sighting.
#[derive(Clone, Copy)]
enum SavedRegisters {
    Unread,
    Read(Option<(u16, u64)>),
}

impl SavedRegisters {
    #[inline(always)]
    fn read(self, thread: &CurrentThread) -> Option<(u16, u64)> {
        match self {
            SavedRegisters::Unread => syscall_path_argument(thread),
            SavedRegisters::Read(regs) => regs,
        }
    }
}

/// With fexit alone on the open function: a sighting the open's exit could
/// report is left for it, by thread, with the path pointer that exit will
/// hold; the rest (every /dev/null) cost a load and a comparison. Outside
/// an open call it is reported now.
#[inline(always)]
fn left_for_open_exit(check: &DeviceCheck) {
    let class = major_class(check.device.dev_type, check.device.major);
    let watched = class == MAJOR_WATCHED;
    // A denial, a watched device, or a major no driver has: the exit
    // reports it if the open fails with a GPU node's errno (or, with
    // report_allowed, succeeds).
    if check.verdict == 0 && !watched && class != MAJOR_NO_DRIVER {
        return;
    }
    let thread = CurrentThread::here();
    if !is_followed(thread.pid_tgid) {
        return;
    }
    let regs = syscall_path_argument(&thread);
    let in_open = matches!(
        regs,
        Some((
            SYSCALL_OPEN | SYSCALL_OPENAT | SYSCALL_OPENAT2 | SYSCALL_CREAT,
            _
        ))
    );
    match regs {
        Some((syscall, path_ptr)) if in_open => {
            if watched && check.verdict != 0 && counted_at_check(check, &thread, syscall, path_ptr)
            {
                return;
            }
            let mut call = OpenInFlight::entered(path_ptr, syscall, 0);
            fill_in(&mut call, check, watched, &thread);
            call.path_head = path_head(path_ptr);
            if !watched {
                // The exit checks every sighting's age (see open_calls.rs).
                // SAFETY: a helper without arguments.
                call.boot_ns = unsafe { bpf_ktime_get_boot_ns() };
            }
            // Per thread, replaced by the next (LRU: never full for good).
            let _ = IN_FLIGHT.insert(thread.pid_tgid as u32, call, 0);
        }
        _ if watched => report_now(check, Some(thread), SavedRegisters::Read(regs)),
        _ => {}
    }
}

/// With fexit alone, a retry storm's repeat is counted here, at the device
/// check, and the open's exit only takes the mark left for it: no path read,
/// clock read or table insert for either (the exit's short way, which
/// needs them, costs several times as much). The key is the one the exit
/// made for the first sighting: its errno is the verdict (a refused check
/// fails the open with it), its flags those of an open's exit. The mark goes
/// in the thread's entry, which its first sighting made: with none, nothing
/// is counted here.
#[inline(always)]
fn counted_at_check(
    check: &DeviceCheck,
    thread: &CurrentThread,
    syscall: u16,
    path_ptr: u64,
) -> bool {
    // Without folding (or the generation that vouches for a thread's key)
    // every denial is a first sighting: nothing to look up for it.
    let generation = fold::identity_generation();
    if generation == 0 || !fold::folding() {
        return false;
    }
    let pid_tgid = thread.pid_tgid;
    // Another thread's key on this CPU: the long way, before any lookup.
    let Some(slot) = fold::slot_of_thread(pid_tgid) else {
        return false;
    };
    let Some(entry) = IN_FLIGHT.get_ptr_mut(pid_tgid as u32) else {
        return false;
    };
    let head = head_for_short_way(
        check,
        pid_tgid,
        check.verdict,
        FLAG_HAS_SYSCALL | FLAG_DEVICE_SEEN,
        PROGRAM_OPEN_FUNCTION_EXIT,
    );
    if !fold::counted_in_slot(slot, &ShortWayHead(&head, thread), generation) {
        return false;
    }
    // SAFETY: this thread's own entry; only this thread, running here,
    // writes it (and the exit of this very call reads it next).
    unsafe {
        (*entry).path_ptr = path_ptr;
        (*entry).syscall = syscall;
        (*entry).hook_verdict = check.verdict;
        (*entry).seen = SEEN_COUNTED;
    }
    true
}

/// The device fields of `call` from `check`; thread, cgroup, user and time
/// only for a watched device (every char device open may come here, and
/// each helper call costs).
#[inline(always)]
fn fill_in(call: &mut OpenInFlight, check: &DeviceCheck, watched: bool, thread: &CurrentThread) {
    call.device = check.device;
    call.hook_verdict = check.verdict;
    call.seen = SEEN_DEVICE;
    if watched {
        // SAFETY: helpers without arguments.
        call.boot_ns = unsafe { bpf_ktime_get_boot_ns() };
        call.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
        call.uid = thread.uid();
        call.seen |= SEEN_WATCHED;
    }
}

/// Inside a traced open call: leaves the details for its exit; false outside one.
#[inline(always)]
fn handed_to_open_call(check: &DeviceCheck, thread: &CurrentThread) -> bool {
    let tid = thread.pid_tgid as u32;
    // Inside a traced open call (of a followed process): leave the details
    // for its exit, which knows the path and the errno. Unwatched devices are
    // recorded too: a failed open of a /dev/nvidia* node with a stale major
    // is reported with its device number.
    // (An entry whose call has finished stays in the table, marked SYSCALL_NONE.)
    let in_call = IN_FLIGHT
        .get_ptr_mut(tid)
        // SAFETY: the entry belongs to this thread, which is running here.
        .filter(|call| unsafe { (**call).syscall } != SYSCALL_NONE);
    if let Some(call) = in_call {
        // SAFETY: as above.
        let call = unsafe { &mut *call };
        fill_in(
            call,
            check,
            is_watched(check.device.dev_type, check.device.major),
            thread,
        );
        return true;
    }
    false
}

/// `check`'s head as a repeat's short way compares it (see ShortWayHead):
/// the thread read, the time, cgroup and uid not yet.
#[inline(always)]
fn head_for_short_way(
    check: &DeviceCheck,
    pid_tgid: u64,
    syscall_ret: i32,
    flags: u16,
    program: u32,
) -> EventHead {
    EventHead {
        // Not read yet: ShortWayHead tells the short way 0, the long way
        // reads them. (Zeros here, side by side, LLVM makes into a call
        // to memset, a BPF function call per repeat.)
        boot_ns: pid_tgid,
        cgroup_id: pid_tgid,
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        uid: pid_tgid as u32,
        device: check.device,
        hook_verdict: check.verdict,
        syscall_ret,
        syscall: SYSCALL_NONE,
        flags,
        program,
    }
}

/// A short way's head: its time and cgroup unread (0: the tick tells the
/// window, the identity generation vouches for the cgroup; the clock
/// source is the dearest helper a repeat would call), its uid read from
/// its thread, for a repeat alone.
struct ShortWayHead<'a>(&'a EventHead, &'a CurrentThread);

impl fold::Sighting for ShortWayHead<'_> {
    #[inline(always)]
    fn head(&self) -> &EventHead {
        self.0
    }

    #[inline(always)]
    fn boot_ns(&self) -> u64 {
        0
    }

    #[inline(always)]
    fn cgroup_id(&self) -> u64 {
        0
    }

    #[inline(always)]
    fn uid(&self) -> u32 {
        self.1.uid()
    }
}

/// `thread`: the running thread if a caller already asked for it (not
/// before an allowed access that is not reported: every GPU open).
#[inline(always)]
fn report_now(check: &DeviceCheck, thread: Option<CurrentThread>, regs: SavedRegisters) {
    // Outside a traced open (mknod, io_uring, or every access when no open
    // route is attached): report it now.
    if (check.verdict == 0 && !report_allowed()) || bench_cut::after(cut::VERDICT) {
        return;
    }
    let thread = thread.unwrap_or_else(CurrentThread::here);
    if !is_followed(thread.pid_tgid) {
        return;
    }
    // Before the cgroup and the command name are read (see fold.rs).
    let generation = fold::identity_generation();
    // The time, cgroup and uid are read below, unless this is a repeat
    // the thread's key counts.
    let mut head = head_for_short_way(check, thread.pid_tgid, 0, FLAG_DEVICE_SEEN, check.program);
    if bench_cut::after(cut::IDENTITY) {
        return;
    }
    // A retry storm's repeat ends here, before the cgroup and command name
    // (and the uid once it matched, for the count's latest).
    if fold::counted_as_thread_repeat(&ShortWayHead(&head, &thread), generation) {
        return;
    }
    head.uid = thread.uid();
    // SAFETY: helpers without arguments.
    head.boot_ns = unsafe { bpf_ktime_get_boot_ns() };
    head.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    if bench_cut::after(cut::CLOCK_AND_CGROUP) {
        return;
    }
    let Some(comm) = events::first_sighting(&head, generation) else {
        return;
    };
    if bench_cut::after(cut::COMMAND_AND_KEY) {
        return;
    }
    let regs = regs.read(&thread);
    if bench_cut::after(cut::SAVED_REGISTERS) {
        return;
    }
    let path = match regs {
        Some((syscall, path)) => {
            head.syscall = syscall;
            head.flags |= FLAG_PATH_FROM_REGS;
            path
        }
        None => 0,
    };
    events::send_first(&mut head, comm, path);
}
