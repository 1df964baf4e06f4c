//! Policies written by the container runtimes themselves, LXC, runc and Docker,
//! against this machine's kernel: here and in the field lab, where they
//! meet systemd's (the qemu matrix's guests have neither runtime).
//!
//! Root, one at a time, as the kernel tests (tests/kernel/main.rs).

// Each test binary uses a part of the shared helpers.
#[allow(dead_code)]
#[path = "../support/common.rs"]
mod common;
#[allow(dead_code)]
#[path = "../support/cri.rs"]
mod cri;
mod docker;
mod kubernetes;
mod lxc;
mod lxc_policy;
#[path = "../support/pod_resources_server.rs"]
mod pod_resources_server;
#[path = "../support/policy_grid.rs"]
mod policy_grid;
mod runc;
#[path = "../support/skip.rs"]
mod skip;
