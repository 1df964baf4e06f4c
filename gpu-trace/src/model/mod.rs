//! Data only: what gpu-trace knows about one access, from the kernel's
//! record to the diagnosis. No I/O here; every other layer reads these.

pub mod access;
pub mod allocation;
pub mod cgroup_note;
pub mod container;
pub mod denied_by;
pub mod diagnosis;
pub mod exit_status;
pub mod gpu;
pub mod nic;
pub mod node;
pub mod policy_writer;
pub mod record;
pub mod rendered;
pub mod vendor;
