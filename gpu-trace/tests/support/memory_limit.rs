//! A memory cgroup with a limit, for running gpu-trace as a DaemonSet or
//! a systemd unit would: whatever it charges, kernel memory included (its
//! BPF maps and ring buffer), counts against the limit, and going over
//! it is an OOM kill the cgroup counts.

use std::{
    fs,
    path::{Path, PathBuf},
};

pub struct MemoryLimit {
    dir: PathBuf,
    /// Where the kernel counts its OOM kills: v1's memory.oom_control or
    /// cgroup2's memory.events, both with an "oom_kill N" line.
    events: &'static str,
}

impl MemoryLimit {
    /// A cgroup named `name` holding its processes to `bytes`: under cgroup
    /// v1's memory controller where it is mounted (a hybrid host), else
    /// under cgroup2 at `cgroup2_mount`, its memory controller enabled at
    /// the root for the purpose.
    pub fn new(cgroup2_mount: &Path, name: &str, bytes: u64) -> Self {
        let v1 = Path::new("/sys/fs/cgroup/memory");
        let (dir, limit, events) = if v1.join("memory.limit_in_bytes").exists() {
            (v1.join(name), "memory.limit_in_bytes", "memory.oom_control")
        } else {
            let controllers = fs::read_to_string(cgroup2_mount.join("cgroup.controllers"))
                .expect("read cgroup2's controllers");
            assert!(
                controllers.split_whitespace().any(|c| c == "memory"),
                "no memory controller in cgroup v1 or cgroup2: {controllers:?}"
            );
            fs::write(cgroup2_mount.join("cgroup.subtree_control"), "+memory")
                .expect("enable cgroup2's memory controller below the root");
            (cgroup2_mount.join(name), "memory.max", "memory.events")
        };
        fs::create_dir(&dir).expect("make the memory cgroup");
        fs::write(dir.join(limit), bytes.to_string()).expect("set the memory limit");
        Self { dir, events }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The most it held, kernel memory included, where the kernel says
    /// (cgroup2 before 5.19 does not).
    pub fn peak_bytes(&self) -> Option<u64> {
        ["memory.max_usage_in_bytes", "memory.peak"]
            .iter()
            .find_map(|file| fs::read_to_string(self.dir.join(file)).ok())
            .and_then(|text| text.trim().parse().ok())
    }

    /// How many processes the kernel killed for going over the limit.
    pub fn oom_kills(&self) -> u64 {
        let events = fs::read_to_string(self.dir.join(self.events)).expect("read OOM events");
        events
            .lines()
            .find_map(|line| line.strip_prefix("oom_kill "))
            .and_then(|n| n.trim().parse().ok())
            .expect("an oom_kill count")
    }
}

impl Drop for MemoryLimit {
    fn drop(&mut self) {
        let _ = fs::remove_dir(&self.dir);
    }
}
