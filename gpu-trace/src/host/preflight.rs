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
}

impl Unsupported {
    pub fn exit_code(&self) -> u8 {
        match self {
            Unsupported::NotRoot => exit_status::NOT_ROOT,
            Unsupported::NoCgroup2 => exit_status::NO_CGROUP2,
            Unsupported::KernelTooOld { .. } => exit_status::KERNEL_TOO_OLD,
            Unsupported::HookRefused { .. } => exit_status::HOOK_REFUSED,
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

/// Exit status for an error that ends the program.
pub fn exit_code_for(error: &anyhow::Error) -> u8 {
    error
        .chain()
        .find_map(|cause| cause.downcast_ref::<Unsupported>())
        .map_or(exit_status::FAILURE, Unsupported::exit_code)
}
