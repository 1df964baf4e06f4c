//! Device programs written after their cgroup started: the mark of rules
//! rewritten while a container ran (`systemctl daemon-reload` re-applying a
//! unit's DeviceAllow=, runc re-applying after `docker update`). Runtimes
//! load a device program just before attaching it, so its load time is
//! when the rules were written; at a normal start that is before, or within
//! moments of, the container's first process.

use serde::Serialize;

use crate::{cgroup::first_process::FirstProcess, kernel::programs_in_force::PolicyProgram};

/// How long after the first process a program may still be the start's
/// own: runc puts its init in the cgroup, then writes the device rules.
pub const START_GRACE_NS: u64 = 2_000_000_000;

#[derive(Debug, Clone, Serialize)]
pub struct WrittenAfterStart {
    pub id: u32,
    pub name: String,
    pub attached_at: String,
    pub loaded_at: String,
    /// The cgroup's first process still running, and how long after its
    /// start the program was loaded.
    pub first_pid: u32,
    pub seconds_after_start: u64,
}

/// Whole seconds from `first`'s start to a load at `loaded_boot_ns`, when
/// that is past the start's grace: a rewrite.
pub fn seconds_after_start(loaded_boot_ns: u64, first: FirstProcess) -> Option<u64> {
    (loaded_boot_ns > first.start_boot_ns.saturating_add(START_GRACE_NS))
        .then(|| (loaded_boot_ns - first.start_boot_ns) / 1_000_000_000)
}

/// The programs among `programs` loaded more than START_GRACE_NS after
/// `first` started.
pub fn written_after_start(
    programs: &[PolicyProgram],
    first: Option<FirstProcess>,
) -> Vec<WrittenAfterStart> {
    let Some(first) = first else {
        return Vec::new();
    };
    programs
        .iter()
        .filter_map(|p| {
            Some(WrittenAfterStart {
                id: p.id,
                name: p.name.clone(),
                attached_at: p.attached_at.clone(),
                loaded_at: p.loaded_at.clone(),
                first_pid: first.pid,
                seconds_after_start: seconds_after_start(p.loaded_boot_ns, first)?,
            })
        })
        .collect()
}

/// "3 min 12 s", "2 h 5 min", "41 s".
pub fn duration_text(seconds: u64) -> String {
    match seconds {
        0..60 => format!("{seconds} s"),
        60..3_600 => format!("{} min {} s", seconds / 60, seconds % 60),
        _ => format!("{} h {} min", seconds / 3_600, seconds % 3_600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::test_support::lxc_program;

    #[test]
    fn a_program_loaded_after_the_grace_is_a_rewrite() {
        let mut late = lxc_program(Vec::new());
        late.loaded_boot_ns = 200 * 1_000_000_000;
        let mut early = lxc_program(Vec::new());
        early.id = 921;
        early.loaded_boot_ns = 9 * 1_000_000_000;
        let first = FirstProcess {
            pid: 4242,
            start_boot_ns: 8 * 1_000_000_000,
        };
        let found = written_after_start(&[late, early], Some(first));
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!((found[0].id, found[0].first_pid), (920, 4242));
        assert_eq!(found[0].seconds_after_start, 192);
        assert!(written_after_start(&[lxc_program(Vec::new())], None).is_empty());
        assert_eq!(duration_text(192), "3 min 12 s");
        assert_eq!(duration_text(41), "41 s");
        assert_eq!(duration_text(7_500), "2 h 5 min");
    }
}
