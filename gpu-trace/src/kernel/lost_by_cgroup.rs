//! The events lost to a full ring buffer, by cgroup (gpu-trace-ebpf's
//! maps.rs): whose they were.

use aya::maps::{HashMap, MapData};
use gpu_trace_common::LOST_BY_CGROUP_CAPACITY;
use rustc_hash::FxHashMap;

pub struct LostByCgroup {
    map: HashMap<MapData, u64, u64>,
    /// Lost events already reported, by cgroup id.
    reported: FxHashMap<u64, u64>,
}

impl LostByCgroup {
    pub fn new(map: HashMap<MapData, u64, u64>) -> Self {
        Self {
            map,
            reported: FxHashMap::default(),
        }
    }

    /// Events lost since the last call, by cgroup id.
    pub fn since_last(&mut self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        for (cgroup_id, lost) in self.map.iter().filter_map(Result::ok) {
            let reported = self.reported.entry(cgroup_id).or_insert(0);
            if lost > *reported {
                out.push((cgroup_id, lost - *reported));
                *reported = lost;
            }
        }
        // The kernel's table is LRU: what it forgot, forget too.
        if self.reported.len() > 2 * LOST_BY_CGROUP_CAPACITY as usize {
            self.reported.clear();
        }
        out
    }
}
