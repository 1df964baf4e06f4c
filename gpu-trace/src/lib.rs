//! gpu-trace: shows denied GPU device accesses live, with the cgroup, the
//! process, the device and the policy that refused it.
//!
//! Data flows one way: kernel event (`tracer`) -> typed event (`event`) ->
//! record with names (`enrich`) -> sinks (`output`). `commands` wires the
//! pieces per subcommand; `scenario` rebuilds the incident for selftest and
//! the kernel tests.

pub mod attribution;
pub mod bpf_sys;
pub mod cgroup;
pub mod cli;
pub mod commands;
pub mod device_hook;
pub mod devices;
pub mod devices_list;
pub mod diagnose;
pub mod enrich;
pub mod evaluator;
pub mod event;
pub mod filter;
pub mod fold;
pub mod identity;
pub mod kernel_btf;
pub mod metrics;
pub mod output;
pub mod pipeline;
pub mod policy;
pub mod preflight;
pub mod report;
pub mod scenario;
pub mod sink;
pub mod target;
pub mod tracefs;
pub mod tracer;
