//! Kernel tests: the real gpu-trace binary against this machine's kernel,
//! with scratch cgroups, real device policies and nodes made with mknod.
//!
//! They need root. Run them one at a time (`--test-threads=1`): they attach
//! to the cgroup2 root and count events host-wide. A test that cannot run
//! says why on stderr; with GPU_TRACE_REQUIRE_KERNEL_TESTS=1 (set by
//! `cargo xtask test` in CI) it fails instead.

mod audit;
mod cdi;
mod colour;
mod common;
mod device_hook_only;
mod hooks;
mod hostile;
mod lab;
mod lockdown;
mod lxc;
mod policy;
#[path = "../support/promtool.rs"]
mod promtool;
mod rewritten;
mod run;
mod runc;
mod service;
#[path = "../support/skip.rs"]
mod skip;
mod vendors;
mod watch;
