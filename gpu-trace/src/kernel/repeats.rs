//! The repeats the kernel counted instead of sending (gpu-trace-ebpf's
//! fold.rs): read every second, each key's new repeats handed on as one
//! access with a count. The counts only grow, per CPU; what was handed on
//! is remembered, so each repeat is counted once.

use std::time::Duration;

use aya::maps::{MapData, PerCpuHashMap};
use gpu_trace_common::{
    DeviceAccessEvent, EventHead, RepeatCount, RepeatKey, FLAG_PATH_TRUNCATED, PATH_LEN,
    REPEATS_CAPACITY,
};
use rustc_hash::FxHashMap;

use crate::{
    host::clock::since_boot,
    model::access::{DeviceAccess, VerdictSource},
};

pub struct KernelRepeats {
    map: PerCpuHashMap<MapData, RepeatKey, RepeatCount>,
    /// Repeats already handed on, by key (summed over the CPUs).
    handed_on: FxHashMap<RepeatKey, u64>,
    /// The path of each key's sent event: the kernel keeps none for its
    /// repeats, and without it a repeat would be diagnosed apart from its
    /// first (a node is often known by its name only).
    paths: FxHashMap<RepeatKey, (Box<[u8]>, bool)>,
    window: Duration,
}

impl KernelRepeats {
    pub fn new(map: PerCpuHashMap<MapData, RepeatKey, RepeatCount>, window: Duration) -> Self {
        Self {
            map,
            handed_on: FxHashMap::default(),
            paths: FxHashMap::default(),
            window,
        }
    }

    /// Remembers the path of a problem the kernel sent: its repeats will
    /// come without one. Bounded like the kernel's table.
    pub fn note_sent(&mut self, event: &DeviceAccessEvent) {
        let head = &event.head;
        if head.hook_verdict == 0 && head.syscall_ret >= 0 {
            return; // not a problem: never folded
        }
        if self.paths.len() >= REPEATS_CAPACITY as usize {
            return;
        }
        let path = event.path.split(|&b| b == 0).next().unwrap_or_default();
        let truncated = head.flags & FLAG_PATH_TRUNCATED != 0;
        self.paths
            .insert(RepeatKey::of(head, &event.comm), (path.into(), truncated));
    }

    /// Each key's repeats since the last call, as (the latest repeat, how
    /// many). Keys quiet for two windows are dropped from the kernel's
    /// table, so that it keeps room and their next problem is sent whole.
    pub fn collect(&mut self, verdict_from: VerdictSource) -> Vec<(DeviceAccess, u64)> {
        let now = since_boot().as_nanos() as u64;
        let quiet_after = 2 * self.window.as_nanos() as u64;
        let keys: Vec<RepeatKey> = self.map.keys().filter_map(Result::ok).collect();
        let mut out = Vec::new();
        for key in keys {
            let Ok(per_cpu) = self.map.get(&key, 0) else {
                continue; // deleted meanwhile
            };
            let total: u64 = per_cpu.iter().map(|c| c.repeats).sum();
            let handed = self.handed_on.get(&key).copied().unwrap_or(0);
            let latest = per_cpu
                .iter()
                .max_by_key(|c| c.last_ns)
                .copied()
                .unwrap_or_default();
            if total > handed {
                let path = self.paths.get(&key);
                out.push((access_of(&key, &latest, path, verdict_from), total - handed));
                self.handed_on.insert(key, total);
                continue;
            }
            let started = per_cpu.iter().map(|c| c.window_start_ns).max().unwrap_or(0);
            if now.saturating_sub(started) > quiet_after {
                // Its windows are over: a problem now is sent, not counted
                // (fold.rs), so the deletion loses nothing but in the
                // instant a new window could open and count a repeat.
                let _ = self.map.remove(&key);
                self.handed_on.remove(&key);
                self.paths.remove(&key);
            }
        }
        out
    }
}

/// The latest repeat as the access it was: the key's fields, the latest
/// process and time, and the path its first event had.
fn access_of(
    key: &RepeatKey,
    latest: &RepeatCount,
    path: Option<&(Box<[u8]>, bool)>,
    verdict_from: VerdictSource,
) -> DeviceAccess {
    let mut flags = key.flags;
    let mut path_bytes = [0; PATH_LEN];
    if let Some((path, truncated)) = path {
        let len = path.len().min(PATH_LEN - 1);
        path_bytes[..len].copy_from_slice(&path[..len]);
        if *truncated {
            flags |= FLAG_PATH_TRUNCATED;
        }
    }
    let event = DeviceAccessEvent {
        head: EventHead {
            boot_ns: latest.last_ns,
            cgroup_id: key.cgroup_id,
            pid: latest.last_pid,
            tid: latest.last_tid,
            uid: latest.last_uid,
            major: key.major,
            minor: key.minor,
            access: key.access,
            dev_type: key.dev_type,
            hook_verdict: key.hook_verdict,
            syscall_ret: key.syscall_ret,
            syscall: latest.last_syscall,
            flags,
            _pad: 0,
        },
        comm: key.comm,
        path: path_bytes,
    };
    DeviceAccess::decode(&event, verdict_from)
}
