//! Which device hook the tracer uses, chosen at start-up by what the kernel
//! accepts, in order of preference:
//!
//! 1. fexit on `devcgroup_check_permission`: the kernel's final verdict,
//!    BPF policies and cgroup v1 alike (needs BTF and trampolines);
//! 2. the observer at the cgroup2 root, reading the BPF policies' verdict
//!    with `bpf_get_retval()` (kernel 6.1 and later);
//! 3. the errno observer, for older kernels: the verdict is the open's errno.
//!
//! Each one is loaded before anything attaches, so that the open tracepoints
//! go in first and the device hook, once in place, finds every open call.

use std::{fs::File, path::Path};

use anyhow::Context;
use aya::{
    programs::{CgroupAttachMode, CgroupDevice, FExit, ProgramError},
    Ebpf,
};
use gpu_trace_common::program;

use crate::{
    host::preflight::Unsupported, kernel::lazy_btf::LazyBtf, model::access::VerdictSource,
};

/// The user's choice (`--hook`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum HookChoice {
    /// The first the kernel accepts: fexit, then the observer.
    #[default]
    Auto,
    /// fexit on devcgroup_check_permission, or stop (exit status 6).
    Fexit,
    /// The cgroup_device observer (with bpf_get_retval, or the errno fallback).
    Observer,
    /// The observer without bpf_get_retval, verdicts from the open's errno:
    /// what kernels before 6.1 get (accesses outside open calls go unseen).
    ErrnoObserver,
}

/// A device hook loaded in the kernel, not yet attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceHook {
    Fexit,
    Observer,
    ErrnoObserver,
}

/// What `load` found.
pub enum Loaded {
    Hook(DeviceHook),
    /// Only the errno observer is left; it needs the object loaded again with
    /// the VERDICT_FROM_ERRNO global set (see `load_errno_observer`).
    NeedsErrnoObserver,
}

impl DeviceHook {
    pub fn verdict_source(self) -> VerdictSource {
        match self {
            DeviceHook::Fexit => VerdictSource::Fexit,
            DeviceHook::Observer => VerdictSource::BpfRetval,
            DeviceHook::ErrnoObserver => VerdictSource::Errno,
        }
    }

    pub fn describe(self, cgroup2_mount: &Path) -> String {
        match self {
            DeviceHook::Fexit => format!("fexit {}", program::FEXIT_TARGET),
            DeviceHook::Observer => {
                format!("cgroup_device observer at {}", cgroup2_mount.display())
            }
            DeviceHook::ErrnoObserver => format!(
                "cgroup_device observer at {} (without bpf_get_retval)",
                cgroup2_mount.display()
            ),
        }
    }

    /// Loads the preferred hook the kernel accepts. Each refusal is added to
    /// `refused` as (hook, reason) for the user to read.
    pub fn load(
        ebpf: &mut Ebpf,
        choice: HookChoice,
        btf: &mut LazyBtf,
        refused: &mut Vec<(String, String)>,
    ) -> anyhow::Result<Loaded> {
        if choice == HookChoice::ErrnoObserver {
            return Ok(Loaded::NeedsErrnoObserver);
        }
        if choice != HookChoice::Observer {
            match load_fexit(ebpf, btf) {
                Ok(()) => return Ok(Loaded::Hook(DeviceHook::Fexit)),
                Err(e) if choice == HookChoice::Fexit => {
                    return Err(Unsupported::HookRefused {
                        hook: format!("fexit {} (--hook fexit)", program::FEXIT_TARGET),
                        reason: one_line(&e),
                    }
                    .into())
                }
                Err(e) => refused.push((
                    format!("fexit {}", program::FEXIT_TARGET),
                    format!("{}; the cgroup_device observer stands in", one_line(&e)),
                )),
            }
        }
        match cgroup_device(ebpf, program::OBSERVER)?.load() {
            Ok(()) => Ok(Loaded::Hook(DeviceHook::Observer)),
            Err(e) => {
                refused.push((
                    "cgroup_device observer with bpf_get_retval (kernel 6.1+)".into(),
                    format!(
                        "{}; the errno observer stands in: verdicts come from the open's errno",
                        one_line(&e.into())
                    ),
                ));
                Ok(Loaded::NeedsErrnoObserver)
            }
        }
    }

    /// The last resort, in an object loaded with VERDICT_FROM_ERRNO set.
    pub fn load_errno_observer(
        ebpf: &mut Ebpf,
        refused: &[(String, String)],
    ) -> anyhow::Result<DeviceHook> {
        cgroup_device(ebpf, program::OBSERVER_ERRNO)?
            .load()
            .map_err(|e| {
                let earlier: Vec<String> = refused.iter().map(|(h, r)| format!("{h}: {r}")).collect();
                Unsupported::HookRefused {
                    hook: "every device hook".into(),
                    reason: format!(
                        "errno observer: {}; before it, {}; nothing is left to stand in, so gpu-trace stops",
                        one_line(&e.into()),
                        earlier.join("; ")
                    ),
                }
            })?;
        Ok(DeviceHook::ErrnoObserver)
    }

    /// Attaches the loaded hook; its link belongs to `ebpf`, so it goes when
    /// the tracer does (or the process, even on SIGKILL).
    pub fn attach(self, ebpf: &mut Ebpf, cgroup2_mount: &Path) -> anyhow::Result<()> {
        let refused = |reason: String| Unsupported::HookRefused {
            hook: self.describe(cgroup2_mount),
            reason,
        };
        match self {
            DeviceHook::Fexit => {
                fexit(ebpf)?
                    .attach()
                    .map_err(|e| refused(format!("attach: {e}")))?;
            }
            DeviceHook::Observer | DeviceHook::ErrnoObserver => {
                let name = if self == DeviceHook::Observer {
                    program::OBSERVER
                } else {
                    program::OBSERVER_ERRNO
                };
                let root = File::open(cgroup2_mount).with_context(|| {
                    format!("opening the cgroup2 root {}", cgroup2_mount.display())
                })?;
                cgroup_device(ebpf, name)?
                    .attach(root, CgroupAttachMode::Single)
                    .map_err(|e| refused(format!("attach: {e}")))?;
            }
        }
        Ok(())
    }
}

/// A load error in one line: the verifier's log runs to many lines, and
/// only its last message (the reason) means something to a user. aya's
/// `ProgramError::LoadError` carries the log apart from the syscall's error.
pub(crate) fn one_line(error: &anyhow::Error) -> String {
    let mut context = Vec::new();
    for cause in error.chain() {
        if let Some(ProgramError::LoadError {
            io_error,
            verifier_log,
        }) = cause.downcast_ref::<ProgramError>()
        {
            let log = verifier_log.to_string();
            let reason = verifier_reason(&log).map(|r| format!(" Verifier: {r}"));
            context.push(format!(
                "the BPF_PROG_LOAD syscall returned {io_error}.{}",
                reason.unwrap_or_default()
            ));
            return context.join(": ");
        }
        context.push(cause.to_string());
    }
    format!("{error:#}")
}

/// The verifier's last message, skipping the statistics it ends with.
fn verifier_reason(log: &str) -> Option<&str> {
    let statistics = ["verification time", "stack depth", "processed "];
    log.lines()
        .map(|l| l.trim().trim_start_matches(':').trim())
        .rfind(|l| !l.is_empty() && !statistics.iter().any(|s| l.starts_with(s)))
}

fn load_fexit(ebpf: &mut Ebpf, btf: &mut LazyBtf) -> anyhow::Result<()> {
    let btf = btf.get()?;
    fexit(ebpf)?
        .load(program::FEXIT_TARGET, btf)
        .context("load")?;
    Ok(())
}

fn fexit(ebpf: &mut Ebpf) -> anyhow::Result<&mut FExit> {
    program_mut(ebpf, program::CHECK_PERMISSION_EXIT)
}

fn cgroup_device<'a>(ebpf: &'a mut Ebpf, name: &str) -> anyhow::Result<&'a mut CgroupDevice> {
    program_mut(ebpf, name)
}

pub(crate) fn program_mut<'a, P>(ebpf: &'a mut Ebpf, name: &str) -> anyhow::Result<&'a mut P>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = aya::programs::ProgramError>,
{
    Ok(ebpf
        .program_mut(name)
        .with_context(|| format!("program {name} missing from the eBPF object"))?
        .try_into()?)
}

#[cfg(test)]
mod tests {
    use std::io;

    use aya::programs::ProgramError;
    use aya_obj::VerifierLog;

    use super::one_line;

    fn load_error(errno: i32, log: &str) -> anyhow::Error {
        ProgramError::LoadError {
            io_error: io::Error::from_raw_os_error(errno),
            verifier_log: VerifierLog::new(log.into()),
        }
        .into()
    }

    #[test]
    fn a_verifier_log_is_cut_to_its_reason() {
        let refused = load_error(
            libc::EINVAL,
            "; (dev_type, dev.major)\n0: (61) r2 = *(u32 *)(r1 +8)\n4: (85) call unknown#186\n\
invalid func unknown#186\nverification time 1086 usec\nstack depth 40+0\nprocessed 5 insns",
        );
        assert_eq!(
            one_line(&refused),
            "the BPF_PROG_LOAD syscall returned Invalid argument (os error 22). Verifier: invalid func unknown#186"
        );
        let no_log = load_error(libc::EPERM, ": Operation not permitted (os error 1)");
        assert_eq!(
            one_line(&no_log),
            "the BPF_PROG_LOAD syscall returned Operation not permitted (os error 1). Verifier: Operation not permitted (os error 1)"
        );
        assert_eq!(
            one_line(&load_error(libc::EPERM, "").context("load")),
            "load: the BPF_PROG_LOAD syscall returned Operation not permitted (os error 1)."
        );
        assert_eq!(one_line(&anyhow::anyhow!("no such file")), "no such file");
    }
}
