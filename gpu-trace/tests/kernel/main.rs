//! Kernel tests: the real gpu-trace binary against this machine's kernel,
//! with scratch cgroups, real device policies and nodes made with mknod.
//! They run here and inside every kernel of the qemu matrix; the tests that
//! need container runtimes are in tests/runtimes, the field lab's in
//! tests/lab, the lockdown's in tests/lockdown.
//!
//! They need root. Run them one at a time (`--test-threads=1`): they attach
//! to the cgroup2 root and count events host-wide. A test that cannot run
//! says why on stderr; with GPU_TRACE_REQUIRE_KERNEL_TESTS=1 (set by
//! `cargo xtask test` in CI) it fails instead.

mod alerts;
mod audit;
mod bounds;
mod bpf_log;
mod cdi;
mod colour;
// Each test binary uses a part of the shared helpers.
#[allow(dead_code)]
#[path = "../support/common.rs"]
mod common;
mod device_hook_only;
mod hooks;
mod hostile;
#[path = "../support/memory_limit.rs"]
mod memory_limit;
mod neighbours;
mod otlp;
#[path = "../support/otlp_receiver.rs"]
mod otlp_receiver;
mod otlp_tls;
mod policy;
#[path = "../support/policy_grid.rs"]
mod policy_grid;
#[path = "../support/promtool.rs"]
mod promtool;
mod rewritten;
mod run;
mod service;
mod sighted_process;
#[path = "../support/skip.rs"]
mod skip;
mod vendors;
mod watch;
mod which_gpu;
