//! cgroups by name: id -> path, the container a path belongs to, what `run`
//! and `check` are pointed at, and spawning into a cgroup. Whatever it needs
//! from the kernel layer is handed to it, never imported.

pub mod first_process;
pub mod identity;
pub mod path_cache;
pub mod resolver;
pub mod spawn;
pub mod target;
