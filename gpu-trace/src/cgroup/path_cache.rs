//! Cgroup paths by id, bounded in bytes: a tenant makes as many cgroups,
//! with names as long, as it likes.

use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;

/// What one entry costs besides its path's bytes: the key, the box and the
/// table's slot, rounded up.
const ENTRY_OVERHEAD: usize = 48;

/// Paths by cgroup id, holding at most `budget` bytes.
#[derive(Default)]
pub struct PathCache {
    by_id: FxHashMap<u64, Box<Path>>,
    bytes: usize,
    budget: usize,
}

impl PathCache {
    pub fn with_budget(budget: usize) -> Self {
        Self {
            budget,
            ..Self::default()
        }
    }

    pub fn get(&self, id: u64) -> Option<&Path> {
        self.by_id.get(&id).map(AsRef::as_ref)
    }

    pub fn contains(&self, id: u64) -> bool {
        self.by_id.contains_key(&id)
    }

    /// Keeps `path` for `id` unless that would pass the budget: false then.
    pub fn insert(&mut self, id: u64, path: PathBuf) -> bool {
        let cost = cost_of(&path);
        if self.bytes + cost > self.budget {
            return false;
        }
        let path = path.into_boxed_path();
        if let Some(old) = self.by_id.insert(id, path) {
            self.bytes -= cost_of(&old);
        }
        self.bytes += cost;
        true
    }

    /// Forgets every path, handing the memory back.
    pub fn clear(&mut self) {
        self.by_id = FxHashMap::default();
        self.bytes = 0;
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.by_id.values().map(AsRef::as_ref)
    }
}

fn cost_of(path: &Path) -> usize {
    path.as_os_str().len() + ENTRY_OVERHEAD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_what_would_pass_the_budget_and_counts_replacements_once() {
        let mut cache = PathCache::with_budget(2 * (ENTRY_OVERHEAD + 10));
        assert!(cache.insert(1, PathBuf::from("/123456789")));
        assert!(
            cache.insert(1, PathBuf::from("/abcdefghi")),
            "same id again"
        );
        assert!(cache.insert(2, PathBuf::from("/123456789")));
        assert!(!cache.insert(3, PathBuf::from("/1")), "full");
        assert_eq!(cache.bytes(), 2 * (ENTRY_OVERHEAD + 10));
        assert_eq!(cache.get(1), Some(Path::new("/abcdefghi")));
        cache.clear();
        assert_eq!(cache.bytes(), 0);
        assert!(cache.insert(3, PathBuf::from("/1")));
    }
}
