//! The events lost to a full ring buffer, by cgroup (gpu-trace-ebpf's
//! maps.rs): whose they were.

use aya::maps::{HashMap, MapData};
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
        let totals: Vec<(u64, u64)> = self.map.iter().filter_map(Result::ok).collect();
        let (out, reported) = new_since(&self.reported, &totals);
        self.reported = reported;
        out
    }
}

/// What `totals` (the kernel's running count per cgroup) add to what was
/// `reported`, and what is reported then. A count below the one reported
/// is a key the kernel's LRU evicted and made again: all of it is new. A
/// cgroup the kernel forgot is forgotten too.
fn new_since(
    reported: &FxHashMap<u64, u64>,
    totals: &[(u64, u64)],
) -> (Vec<(u64, u64)>, FxHashMap<u64, u64>) {
    let mut out = Vec::new();
    let mut now = FxHashMap::default();
    for &(cgroup_id, total) in totals {
        let before = reported.get(&cgroup_id).copied().unwrap_or(0);
        let new = if total >= before {
            total - before
        } else {
            total
        };
        if new > 0 {
            out.push((cgroup_id, new));
        }
        now.insert(cgroup_id, total);
    }
    (out, now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_loss_is_reported_once_also_across_an_eviction() {
        let (first, reported) = new_since(&FxHashMap::default(), &[(7, 5), (8, 2)]);
        assert_eq!(first, [(7, 5), (8, 2)]);
        // 7 lost 3 more; 8 was evicted and made again with 1; 9 is new.
        let (second, reported) = new_since(&reported, &[(7, 8), (8, 1), (9, 4)]);
        assert_eq!(second, [(7, 3), (8, 1), (9, 4)]);
        // Nothing new: nothing reported, and a forgotten 9 leaves no trace.
        let (third, reported) = new_since(&reported, &[(7, 8), (8, 1)]);
        assert!(third.is_empty());
        assert_eq!(reported.len(), 2);
    }
}
