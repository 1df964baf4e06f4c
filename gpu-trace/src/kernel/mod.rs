//! Everything that calls bpf(2) or aya: loading and attaching the programs,
//! the device hooks, the ring of events, the cgroups the kernel saw made,
//! and the device programs in force on a cgroup.

pub mod attach;
pub mod bench_cut;
pub mod bpf_log;
pub mod bpf_sys;
pub mod cgroup_mkdir_chain;
pub mod cgroups_made;
pub mod detach_after_exit;
pub mod device_hook;
pub mod held_back;
pub mod lazy_btf;
pub mod lost_by_cgroup;
pub mod open_route;
pub mod own_programs;
pub mod policy_programs_chain;
pub mod program_holders;
pub mod programs_in_force;
pub mod repeats;
pub mod slot_counts;
pub mod task_chain;
pub mod thread_identity;
pub mod tracer;
pub mod v1_devices_chain;
pub mod without_atomics;
