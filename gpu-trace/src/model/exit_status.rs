//! Every exit status gpu-trace gives, in one table (docs/exit-status.md).
//! `run` exits with its command's own status; these are everything else.

/// Success; `check`: every node the target needs is usable.
pub const OK: u8 = 0;
/// A runtime failure (selftest FAIL, an I/O error); `check`: a node is denied,
/// missing or stale.
pub const FAILURE: u8 = 1;
/// A usage error (clap's own); `check`: any error.
pub const USAGE_OR_CHECK_ERROR: u8 = 2;
pub const NOT_ROOT: u8 = 3;
pub const NO_CGROUP2: u8 = 4;
pub const KERNEL_TOO_OLD: u8 = 5;
pub const HOOK_REFUSED: u8 = 6;
/// The kernel is in lockdown (confidentiality): no hook that reads kernel
/// memory may load.
pub const LOCKED_DOWN: u8 = 7;
/// `run`: the command exists but cannot be executed (as a shell says).
pub const COMMAND_NOT_EXECUTABLE: u8 = 126;
/// `run`: the command was not found (as a shell says).
pub const COMMAND_NOT_FOUND: u8 = 127;
