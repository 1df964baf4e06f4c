//! What the host's files say: mountinfo, /proc/devices, /proc/PID, tracefs, watch's logs,
//! the kernel's BTF, and whether the host can run gpu-trace at all.

pub mod cdi_specs;
pub mod cgroup_handle;
pub mod cgroup_tree;
pub mod clock;
pub mod device_node;
pub mod grpc_unix;
pub mod in_root;
pub mod kernel_btf;
pub mod log_files;
pub mod mountinfo;
pub mod nvidia_gpus;
pub mod nvidia_runtime_config;
pub mod pod_resources;
pub mod preflight;
pub mod proc_devices;
pub mod proc_pid;
pub mod runtime_processes;
pub mod security_modules;
pub mod sysfs_devices;
pub mod systemd_units;
pub mod tracefs;
pub mod unit_property_changes;
pub mod v1_device_limits;
