//! What the kernel held back past a cgroup's budget (gpu-trace-ebpf's
//! fold.rs): read every second like the repeats, each key's new count
//! handed on as one access with a count.

use std::time::Duration;

use aya::maps::{HashMap, MapData};
use gpu_trace_common::{DeviceAccessEvent, HeldBackCount, HeldBackKey, PATH_LEN};
use rustc_hash::FxHashMap;

use crate::{
    host::clock::since_boot,
    model::access::{DeviceAccess, VerdictSource},
};

pub struct HeldBack {
    map: HashMap<MapData, HeldBackKey, HeldBackCount>,
    /// Counts already handed on, by key.
    handed_on: FxHashMap<HeldBackKey, u64>,
    window: Duration,
}

impl HeldBack {
    pub fn new(map: HashMap<MapData, HeldBackKey, HeldBackCount>, window: Duration) -> Self {
        Self {
            map,
            handed_on: FxHashMap::default(),
            window,
        }
    }

    /// Each key's problems held back since the last call, as (the latest
    /// of them, without its path, and how many). A key over for a whole
    /// window gets no more: its last count is taken and the key removed.
    pub fn collect(&mut self, verdict_from: VerdictSource) -> Vec<(DeviceAccess, u64)> {
        let current = since_boot().as_nanos() as u64 / self.window.as_nanos().max(1) as u64;
        let keys: Vec<HeldBackKey> = self.map.keys().filter_map(Result::ok).collect();
        let mut out = Vec::new();
        for key in &keys {
            let Ok(held) = self.map.get(key, 0) else {
                continue;
            };
            let handed = self.handed_on.get(key).copied().unwrap_or(0);
            if held.count > handed {
                let event = DeviceAccessEvent {
                    head: held.latest,
                    // Held back before the record was made: found by pid.
                    v1_devices_cgroup: 0,
                    policy_programs: [0; gpu_trace_common::SIGHTED_PROGRAMS],
                    comm: held.latest_comm,
                    path: [0; PATH_LEN],
                };
                out.push((
                    DeviceAccess::decode(&event, verdict_from),
                    held.count - handed,
                ));
            }
            if key.window + 2 <= current && self.map.remove(key).is_ok() {
                self.handed_on.remove(key);
            } else {
                self.handed_on.insert(*key, held.count);
            }
        }
        out
    }
}
