//! The field lab's scenarios: policies written by systemd, dockerd and
//! podman against a stand-in GPU driver module, inside the lab's guest
//! (`cargo xtask lab`), with the LXC and runc tests beside them. Outside
//! the lab they say they cannot run.

// Each test binary uses a part of the shared helpers.
#[allow(dead_code)]
#[path = "../support/common.rs"]
mod common;
#[allow(dead_code)]
#[path = "../support/cri.rs"]
mod cri;
mod daemonset;
mod lab;
#[allow(dead_code)]
#[path = "../runtimes/lxc.rs"]
mod lxc;
#[path = "../runtimes/lxc_policy.rs"]
mod lxc_policy;
mod neighbours;
mod pod_gpus;
#[allow(dead_code)]
#[path = "../support/pod_resources_server.rs"]
mod pod_resources_server;
mod pods;
#[path = "../support/policy_grid.rs"]
mod policy_grid;
#[path = "../runtimes/runc.rs"]
mod runc;
#[path = "../support/skip.rs"]
mod skip;
