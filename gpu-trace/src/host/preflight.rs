//! What the host must offer before anything is loaded, and the errors a
//! user gets (each with its own exit status) when it does not.

use std::path::PathBuf;

use aya::util::KernelVersion;

use crate::model::exit_status;

/// Why the host cannot run gpu-trace; each has its own exit status.
#[derive(Debug, thiserror::Error)]
pub enum Unsupported {
    #[error(
        "gpu-trace must run as root: it loads eBPF programs and attaches them to the cgroup2 root (try: sudo gpu-trace ...)"
    )]
    NotRoot,
    #[error(
        "no cgroup2 filesystem is mounted (none in /proc/self/mountinfo): device policies live on cgroup2; mount it, e.g. `mount -t cgroup2 none /sys/fs/cgroup/unified`"
    )]
    NoCgroup2,
    #[error(
        "kernel {found} is older than 5.8, the first with the BPF ring buffer gpu-trace's events travel through; what still works on this kernel: `strace -f -e trace=openat CMD` shows the EPERM, and `bpftool cgroup tree` lists the device policies"
    )]
    KernelTooOld { found: String },
    #[error("the kernel refused the {hook}: {reason}")]
    HookRefused { hook: String, reason: String },
    #[error(
        "the kernel is locked down (confidentiality, per {per}): it refuses eBPF programs that read kernel memory, and every hook that sees an open is one, so watch, run and selftest cannot run; `gpu-trace check` still works (the device programs in force, the nodes, and whether a cgroup may open each); lockdown ends only with a boot without it (the lockdown= kernel parameter, or the Secure Boot setting)"
    )]
    LockedDown { per: &'static str },
}

impl Unsupported {
    pub fn exit_code(&self) -> u8 {
        match self {
            Unsupported::NotRoot => exit_status::NOT_ROOT,
            Unsupported::NoCgroup2 => exit_status::NO_CGROUP2,
            Unsupported::KernelTooOld { .. } => exit_status::KERNEL_TOO_OLD,
            Unsupported::HookRefused { .. } => exit_status::HOOK_REFUSED,
            Unsupported::LockedDown { .. } => exit_status::LOCKED_DOWN,
        }
    }
}

/// The first kernel with the BPF ring buffer (and bpf_ktime_get_boot_ns).
/// Which device hook works on it is decided when the tracer loads.
pub const OLDEST_KERNEL: (u8, u8) = (5, 8);

/// What the tracer needs to know about the host.
#[derive(Debug, Clone)]
pub struct Host {
    pub cgroup2_mount: PathBuf,
    pub kernel: String,
}

/// Checks root, cgroup2 and the kernel version, in the order a user would
/// fix them.
pub fn check_host() -> anyhow::Result<Host> {
    if !nix::unistd::geteuid().is_root() {
        return Err(Unsupported::NotRoot.into());
    }
    let cgroup2_mount = crate::host::mountinfo::cgroup2_mount()
        .map_err(|e| anyhow::anyhow!("reading /proc/self/mountinfo: {e}"))?
        .ok_or(Unsupported::NoCgroup2)?;
    let kernel =
        KernelVersion::current().map_err(|e| anyhow::anyhow!("reading the kernel version: {e}"))?;
    let (major, minor) = OLDEST_KERNEL;
    if kernel < KernelVersion::new(major, minor, 0) {
        return Err(Unsupported::KernelTooOld {
            found: kernel.to_string(),
        }
        .into());
    }
    Ok(Host {
        cgroup2_mount,
        kernel: kernel.to_string(),
    })
}

/// Where the kernel says its lockdown level: `none integrity [confidentiality]`,
/// the one in force bracketed. Absent without the lockdown LSM or securityfs.
pub const LOCKDOWN: &str = "/sys/kernel/security/lockdown";

/// Refuses before anything loads on a kernel in confidentiality lockdown,
/// where each program would fail with a verifier message naming a helper
/// ("cannot use helper bpf_probe_read") rather than the reason. Integrity
/// lockdown only forbids writing user memory, which gpu-trace never does.
fn check_not_locked_down() -> Result<(), Unsupported> {
    let per = match std::fs::read_to_string(LOCKDOWN) {
        Ok(level) => (lockdown_in_force(&level) == Some("confidentiality")).then_some(LOCKDOWN),
        // No securityfs here (a container, say): the boot's own setting.
        Err(_) => std::fs::read_to_string("/proc/cmdline")
            .is_ok_and(|cmdline| booted_locked_down(&cmdline))
            .then_some("the kernel command line"),
    };
    match per {
        Some(per) => Err(Unsupported::LockedDown { per }),
        None => Ok(()),
    }
}

/// `lockdown=confidentiality` on the kernel command line.
fn booted_locked_down(cmdline: &str) -> bool {
    cmdline
        .split_whitespace()
        .any(|word| word == "lockdown=confidentiality")
}

/// `check_host`, and no lockdown in the way: for the commands that load
/// programs, before they make or print anything.
pub fn check_tracing_host() -> anyhow::Result<Host> {
    let host = check_host()?;
    check_not_locked_down()?;
    Ok(host)
}

/// The bracketed level of the lockdown file's text.
pub fn lockdown_in_force(text: &str) -> Option<&str> {
    text.split_whitespace()
        .find_map(|word| word.strip_prefix('[')?.strip_suffix(']'))
}

/// Exit status for an error that ends the program.
pub fn exit_code_for(error: &anyhow::Error) -> u8 {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<Unsupported>())
        .map_or(exit_status::FAILURE, Unsupported::exit_code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_level_in_force_is_the_bracketed_one() {
        assert_eq!(
            lockdown_in_force("none integrity [confidentiality]\n"),
            Some("confidentiality")
        );
        assert_eq!(
            lockdown_in_force("[none] integrity confidentiality\n"),
            Some("none")
        );
        assert_eq!(lockdown_in_force(""), None);
        assert!(booted_locked_down(
            "BOOT_IMAGE=/vmlinuz ro lockdown=confidentiality quiet"
        ));
        assert!(!booted_locked_down("ro lockdown=integrity"));
    }

    #[test]
    fn lockdown_is_one_line_with_its_own_status() {
        let error = anyhow::Error::from(Unsupported::LockedDown { per: LOCKDOWN });
        assert_eq!(exit_code_for(&error), exit_status::LOCKED_DOWN);
        let text = error.to_string();
        assert!(!text.contains('\n'));
        assert!(text.contains("`gpu-trace check` still works"), "{text}");
    }
}
