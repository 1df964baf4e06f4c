//! The open calls' path and result, by either route: the open-family
//! syscall tracepoints, or fexit on the kernel's open function
//! (`open_function`).
//!
//! With the tracepoints, entry stashes the path pointer by thread and the
//! device hook fills in the call in flight; with fexit alone, the device
//! hook leaves a sighting by thread (or, for a retry storm's repeat it
//! counted itself, a mark). Either way the exit emits an event for a
//! watched device access, or a GPU node's failed open.

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_get_current_uid_gid,
        bpf_ktime_get_boot_ns, bpf_probe_read_user, generated::bpf_probe_read_user_str,
    },
    macros::tracepoint,
    programs::TracePointContext,
};
use gpu_trace_common::{
    EventHead, OpenInFlight, ACCEL_DEV_PREFIX, DRI_DEV_PREFIX, FLAG_DEVICE_SEEN, FLAG_HAS_SYSCALL,
    FLAG_PATH_CHANGED, GDRDRV_DEV_PREFIX, INFINIBAND_DEV_PREFIX, KFD_DEV_PREFIX, NVIDIA_DEV_PREFIX,
    OPEN_CALLS_BY_RESULT, PATH_HEAD_LEN, PROGRAM_EXIT_OPEN, PROGRAM_EXIT_OPENAT,
    PROGRAM_EXIT_OPENAT2, PROGRAM_OPEN_FUNCTION_EXIT, SEEN_COUNTED, SEEN_DEVICE, SEEN_WATCHED,
    SYSCALL_NONE, SYSCALL_OPEN, SYSCALL_OPENAT, SYSCALL_OPENAT2, VFIO_DEV_PREFIX,
};

use crate::{
    events, fold,
    maps::{
        current_is_followed, is_watched, open_calls_traced, report_allowed, verdict_from_errno,
        IN_FLIGHT, LAST_DEVICE_CHECK,
    },
    syscall_regs::running_syscall_path_argument,
    tracepoint_record::record_field,
    unresolved_path, why_dropped,
};

/// Offsets in the syscalls:sys_enter_* / sys_exit_* records
/// (events/syscalls/*/format): arguments start at 16, each 8 bytes wide.
const FIRST_ARG: usize = 16;
const SECOND_ARG: usize = 24;
const RET: usize = 16;
/// Negative errnos as the exit tracepoint reports them. EPERM is what a
/// device policy gives.
pub(crate) const EPERM: i32 = -1;
const ENOENT: i32 = -2;
const ENXIO: i32 = -6;
const EACCES: i32 = -13;

#[tracepoint]
pub fn enter_openat(ctx: TracePointContext) -> u32 {
    stash_call(record_field(&ctx, SECOND_ARG), SYSCALL_OPENAT)
}

#[tracepoint]
pub fn enter_openat2(ctx: TracePointContext) -> u32 {
    stash_call(record_field(&ctx, SECOND_ARG), SYSCALL_OPENAT2)
}

#[tracepoint]
pub fn enter_open(ctx: TracePointContext) -> u32 {
    stash_call(record_field(&ctx, FIRST_ARG), SYSCALL_OPEN)
}

#[tracepoint]
pub fn exit_openat(ctx: TracePointContext) -> u32 {
    finish_call(record_field::<i64>(&ctx, RET) as i32, PROGRAM_EXIT_OPENAT)
}

#[tracepoint]
pub fn exit_openat2(ctx: TracePointContext) -> u32 {
    finish_call(record_field::<i64>(&ctx, RET) as i32, PROGRAM_EXIT_OPENAT2)
}

#[tracepoint]
pub fn exit_open(ctx: TracePointContext) -> u32 {
    finish_call(record_field::<i64>(&ctx, RET) as i32, PROGRAM_EXIT_OPEN)
}

/// Whether the entry knew which syscall it was in: the tracepoints do; the
/// open function serves several, found from the saved registers only when
/// an event is sent.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum SyscallKnown {
    Yes,
    FromRegisters,
}

/// What an open call's exit knows of where its event comes from.
#[derive(Clone, Copy)]
struct Made {
    syscall: SyscallKnown,
    /// The exit's `PROGRAM_*`.
    program: u32,
}

/// The start of an open call: `path_ptr` is the user's path argument.
#[inline(always)]
fn stash_call(path_ptr: u64, syscall: u16) -> u32 {
    if !current_is_followed() {
        return 0;
    }
    let tid = bpf_get_current_pid_tgid() as u32;
    // Only the errno observer's sightings need the entry time (see
    // claim_device_check); the check is a constant for the verifier.
    let entered_ns = if verdict_from_errno() {
        // SAFETY: a helper without arguments.
        unsafe { bpf_ktime_get_boot_ns() }
    } else {
        0
    };
    // A thread's entry stays between its calls: rewriting it in place costs a
    // lookup, where replacing it (update) or removing it (delete) cost more.
    if let Some(entry) = IN_FLIGHT.get_ptr_mut(tid) {
        // SAFETY: only this thread, running here, touches its entry.
        let entry = unsafe { &mut *entry };
        entry.path_ptr = path_ptr;
        entry.syscall = syscall;
        entry.seen = 0;
        entry.boot_ns = entered_ns;
        return 0;
    }
    let call = OpenInFlight::entered(path_ptr, syscall, entered_ns);
    // A full table only evicts the oldest entry (LRU); nothing to count here.
    let _ = IN_FLIGHT.insert(tid, call, 0);
    0
}

/// The end of an open call, with its return value (a negative errno on
/// failure), in exit tracepoint `program`.
#[inline(always)]
fn finish_call(ret: i32, program: u32) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let Some(entry) = IN_FLIGHT.get_ptr_mut(tid) else {
        // Every followed thread's call made an entry at its start.
        if current_is_followed() {
            why_dropped::in_flight_evicted(program, (pid_tgid >> 32) as u32, tid);
        }
        return 0;
    };
    // SAFETY: this thread's own entry; copied out, then marked finished so
    // that the observer no longer takes the thread to be inside an open.
    let entry = unsafe { &mut *entry };
    if entry.syscall == SYSCALL_NONE {
        return 0;
    }
    let mut call = *entry;
    entry.syscall = SYSCALL_NONE;
    if verdict_from_errno() {
        claim_device_check(&mut call);
    }
    let known = Made {
        syscall: SyscallKnown::Yes,
        program,
    };
    report_finished(&call, ret, known, pid_tgid, 0);
    0
}

/// The end of an open call where nothing ran at its entry (fexit alone on
/// the open function): `path_ptr` is the call's own path argument. The
/// device hook left what it saw worth reporting by thread (see
/// device_check::left_for_open_exit).
#[inline(always)]
pub fn finish_by_result(ret: i32, path_ptr: u64) {
    // Nearly every open ends here: a success, or an errno no GPU node's
    // failure has. Nothing else to do for them, unless every watched
    // access is reported (then any result may be an allowed one's).
    if (ret >= 0 || !is_gpu_failure(ret)) && !report_allowed() {
        return;
    }
    if !current_is_followed() {
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let mut call = OpenInFlight::entered(path_ptr, SYSCALL_OPENAT, 0);
    let mut flags = 0;
    // ENOENT, the commonest failure, cannot follow a device check: the path
    // did not resolve. It takes no sighting, and costs no lookup.
    let sighting = if ret == ENOENT {
        None
    } else {
        IN_FLIGHT.get_ptr_mut(pid_tgid as u32)
    };
    if let Some(sighting) = sighting {
        // SAFETY: this thread's own entry, taken at most once.
        let sighting = unsafe { &mut *sighting };
        if sighting.seen & SEEN_COUNTED != 0 && sighting.syscall != SYSCALL_NONE {
            // Counted at the device check (device_check::counted_at_check):
            // left inside a running open, so by this call, which fails as
            // the check made it.
            sighting.syscall = SYSCALL_NONE;
            if sighting.path_ptr == path_ptr && sighting.hook_verdict == ret {
                return;
            }
        } else if sighting.syscall != SYSCALL_NONE {
            match whose_sighting(sighting, path_ptr, ret) {
                Sighting::ThisCalls => call = *sighting,
                Sighting::ThisCallsPathChanged => {
                    call = *sighting;
                    // What the buffer holds now is not what was opened.
                    call.path_ptr = 0;
                    flags = FLAG_PATH_CHANGED;
                    why_dropped::path_changed(
                        PROGRAM_OPEN_FUNCTION_EXIT,
                        (pid_tgid >> 32) as u32,
                        call.cgroup_id,
                        call.device.major,
                        call.device.minor,
                    );
                }
                Sighting::Another => {}
            }
        }
        sighting.syscall = SYSCALL_NONE;
    }
    let syscall = if call.seen == 0 {
        SyscallKnown::FromRegisters
    } else {
        SyscallKnown::Yes
    };
    let known = Made {
        syscall,
        program: PROGRAM_OPEN_FUNCTION_EXIT,
    };
    report_finished(&call, ret, known, pid_tgid, flags);
}

/// Whose a sighting left by this thread is.
enum Sighting {
    ThisCalls,
    /// This call's, but another thread rewrote the path buffer since the
    /// device check: the denial is reported without a path, never dropped.
    ThisCallsPathChanged,
    /// An earlier open's, through the same buffer.
    Another,
}

/// A sighting is left by thread, and only opens that fail with a GPU
/// node's errno (or, with report_allowed, every open) take it: one left by
/// an open that succeeded may still be there when a later open, through
/// the same buffer, fails before any device check (file mode, a missing
/// driver). This call's own has its path pointer, the same path in it, and
/// is recent (a device check is followed by the call's end within
/// microseconds, except for a driver's own open, which only allowed
/// sightings reach).
///
/// Paths that differ, with the same pointer, within the second, are this
/// call's when its device check denied a watched device and the call
/// failed as that denial makes it (EPERM): a thread rewrote the buffer
/// mid-call, which must not make a denial vanish. (An allowed sighting left
/// by an open that succeeded never passes for a later EPERM's.)
#[inline(always)]
fn whose_sighting(sighting: &OpenInFlight, path_ptr: u64, ret: i32) -> Sighting {
    if sighting.path_ptr != path_ptr {
        return Sighting::Another;
    }
    // SAFETY: a helper without arguments.
    let now = unsafe { bpf_ktime_get_boot_ns() };
    if now.wrapping_sub(sighting.boot_ns) >= SIGHTING_TTL_NS {
        return Sighting::Another;
    }
    let head = path_head(path_ptr);
    let mut i = 0;
    while i < head.len() {
        if head[i] != sighting.path_head[i] {
            // Sightings on this route come from hooks that know the verdict.
            let denied = sighting.hook_verdict != 0;
            return if ret == EPERM && denied && sighting.seen & SEEN_WATCHED != 0 {
                Sighting::ThisCallsPathChanged
            } else {
                Sighting::Another
            };
        }
        i += 1;
    }
    Sighting::ThisCalls
}

/// The first `PATH_HEAD_LEN` bytes of the user's path, zero after its end
/// (or all zero when it cannot be read): read the same way by the device
/// hook when it leaves a sighting and by the exit that takes it.
#[inline(always)]
pub fn path_head(path_ptr: u64) -> [u64; PATH_HEAD_LEN / 8] {
    path_chunk(path_ptr).0
}

/// `path_head` and what the read took: the bytes copied, its NUL included
/// (PATH_HEAD_LEN when the path goes on), or a negative error.
#[inline(always)]
pub fn path_chunk(path_ptr: u64) -> ([u64; PATH_HEAD_LEN / 8], i64) {
    let mut head = [0u64; PATH_HEAD_LEN / 8];
    // SAFETY: a fault-tolerant read of at most PATH_HEAD_LEN bytes into
    // `head`; the helper stops at the path's NUL and leaves the rest zero.
    let read = unsafe {
        bpf_probe_read_user_str(
            head.as_mut_ptr().cast(),
            PATH_HEAD_LEN as u32,
            path_ptr as *const _,
        )
    };
    (head, read)
}

/// How old a sighting an open's exit still takes as its own.
const SIGHTING_TTL_NS: u64 = 1_000_000_000;

/// Reports what an open call saw, if anything is worth it.
#[inline(always)]
fn report_finished(call: &OpenInFlight, ret: i32, known: Made, pid_tgid: u64, extra_flags: u16) {
    let seen = call.seen & SEEN_DEVICE != 0;
    // A watched device denied either by a BPF policy (retval) or after it
    // (errno EPERM, e.g. v1); EACCES after the device check is a security
    // module's refusal (file mode refusals come before the device check, and
    // never get here). With report_allowed, every result.
    let watched = call.seen & SEEN_WATCHED != 0
        && (call.hook_verdict != 0 || ret == EPERM || ret == EACCES || report_allowed());
    // A GPU node that failed to open for a reason worth naming, whatever its
    // major's class and whether it reached the device hook: missing (ENOENT),
    // file mode (EACCES), stale major (EPERM, ENXIO; also a major still
    // watched since its driver was reloaded onto another).
    if watched || (is_gpu_failure(ret) && is_accelerator_dev_path(call.path_ptr)) {
        let observed = if seen { FLAG_DEVICE_SEEN } else { 0 };
        emit(
            call,
            &known,
            pid_tgid,
            ret,
            FLAG_HAS_SYSCALL | observed | extra_flags,
        );
    }
}

/// With the errno observer: takes the device check last seen in this
/// thread's cgroup, if it can be this call's: after the call entered, not
/// yet claimed. When threads of one cgroup open devices at the same moment,
/// a call may take another's check (and that one then finds none).
fn claim_device_check(call: &mut OpenInFlight) {
    // SAFETY: a helper without arguments.
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    let Some(slot) = LAST_DEVICE_CHECK.get_ptr_mut(&cgroup_id) else {
        return;
    };
    // SAFETY: a map value; a racing claim at worst reads a newer check.
    let slot = unsafe { &mut *slot };
    if slot.boot_ns < call.boot_ns {
        return;
    }
    call.device = slot.device;
    call.boot_ns = slot.boot_ns;
    call.cgroup_id = slot.cgroup_id;
    call.uid = slot.uid;
    call.seen = SEEN_DEVICE;
    if is_watched(slot.device.dev_type, slot.device.major) {
        call.seen |= SEEN_WATCHED;
    }
    slot.boot_ns = 0;
}

/// The syscall the thread is in, from its saved registers; `fallback` when
/// they cannot be read.
#[inline(always)]
fn syscall_of_call(fallback: u16) -> u16 {
    match running_syscall_path_argument() {
        Some((syscall, _)) => syscall,
        None => fallback,
    }
}

fn is_gpu_failure(ret: i32) -> bool {
    ret == EPERM || ret == ENOENT || ret == ENXIO || ret == EACCES
}

fn is_accelerator_dev_path(path_ptr: u64) -> bool {
    // SAFETY: a user pointer read with the fault-tolerant helper.
    match unsafe { bpf_probe_read_user::<[u8; 11]>(path_ptr as *const [u8; 11]) } {
        Ok(head) => {
            starts_with(&head, NVIDIA_DEV_PREFIX)
                || starts_with(&head, KFD_DEV_PREFIX)
                || starts_with(&head, DRI_DEV_PREFIX)
                || starts_with(&head, ACCEL_DEV_PREFIX)
                || starts_with(&head, INFINIBAND_DEV_PREFIX)
                || starts_with(&head, GDRDRV_DEV_PREFIX)
                || starts_with(&head, VFIO_DEV_PREFIX)
        }
        Err(_) => false,
    }
}

/// Byte by byte, so that no memcmp call is needed in the program.
#[inline(always)]
fn starts_with<const N: usize>(head: &[u8; 11], prefix: &[u8; N]) -> bool {
    let mut i = 0;
    while i < N {
        if head[i] != prefix[i] {
            return false;
        }
        i += 1;
    }
    true
}

// By reference: a BPF-to-BPF call takes five arguments at most.
fn emit(call: &OpenInFlight, known: &Made, pid_tgid: u64, ret: i32, flags: u16) {
    // Before the command name is read (see fold.rs).
    let mut generation = fold::identity_generation();
    // The observer takes these only for watched devices.
    let (boot_ns, cgroup_id, uid) = if call.seen & SEEN_WATCHED != 0 {
        // Its cgroup was read at the device check, before this generation:
        // a thread moved since then would have its key remembered under the
        // new generation with the old cgroup, and the device check's short
        // way (which compares no cgroup) count the new one's repeats under
        // it. No short way for it, then.
        // SAFETY: a helper without arguments.
        if generation != 0
            && open_calls_traced() == OPEN_CALLS_BY_RESULT
            && unsafe { bpf_get_current_cgroup_id() } != call.cgroup_id
        {
            generation = 0;
        }
        (call.boot_ns, call.cgroup_id, call.uid)
    } else {
        // SAFETY: helpers without arguments.
        unsafe {
            (
                bpf_ktime_get_boot_ns(),
                bpf_get_current_cgroup_id(),
                bpf_get_current_uid_gid() as u32,
            )
        }
    };
    let mut head = EventHead {
        boot_ns,
        cgroup_id,
        pid: (pid_tgid >> 32) as u32,
        tid: pid_tgid as u32,
        uid,
        device: call.device,
        hook_verdict: call.hook_verdict,
        syscall_ret: ret,
        // Not known yet: a repeat's is taken from its first (userspace).
        syscall: if known.syscall == SyscallKnown::Yes {
            call.syscall
        } else {
            SYSCALL_NONE
        },
        flags,
        program: known.program,
    };
    // A failure before any device check is told apart by its path; the
    // call's device and verdict may be an earlier call's (a thread's entry
    // is reused, see stash_call).
    if flags & FLAG_DEVICE_SEEN == 0 {
        head.device = unresolved_path::device_of(call.path_ptr);
        head.hook_verdict = 0;
    }
    // A retry storm's repeat ends here, before the command name is read.
    if fold::counted_as_thread_repeat(&head, generation) {
        return;
    }
    let Some(comm) = events::first_sighting(&head, generation) else {
        return;
    };
    // Read from the registers only for a first sighting: a repeat keeps
    // the syscall its first had.
    if known.syscall == SyscallKnown::FromRegisters {
        head.syscall = syscall_of_call(call.syscall);
    }
    events::send_first(&mut head, comm, call.path_ptr);
}
