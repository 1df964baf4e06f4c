//! The device policies in force on a cgroup: its own cgroup_device programs
//! and those inherited from its ancestors, in the order the kernel runs
//! them, each with where it is attached, and their combined answer for one
//! access.

use std::{
    collections::{HashMap, HashSet},
    fs::File,
    path::{Path, PathBuf},
    rc::Rc,
};

use anyhow::Context;
use gpu_trace_common::program;
use gpu_trace_policy::{combined_answer, Answer, DeviceQuery, Insn};
use serde::Serialize;

use crate::{
    host::clock::BootClock,
    kernel::{
        bpf_sys::{device_programs, dump_program},
        own_programs::held_by_gpu_trace,
    },
    model::policy_writer::{Manager, PolicyWriter},
};

/// One device program in force on a cgroup.
#[derive(Debug, Clone, Serialize)]
pub struct PolicyProgram {
    pub id: u32,
    pub name: String,
    pub tag: String,
    /// The cgroup it is attached at, relative to the cgroup2 mount.
    pub attached_at: String,
    /// Attach flags of that cgroup: "multi", "override" or "exclusive".
    pub attach_mode: &'static str,
    /// When it was loaded (RFC 3339): runtimes load a device program just
    /// before attaching it, so this is when the rules were written.
    pub loaded_at: String,
    /// The same, on the kernel's boot-time clock, to compare with process
    /// start times.
    #[serde(skip)]
    pub loaded_boot_ns: u64,
    /// Who wrote it, when asked for (`check` asks; live attribution keeps
    /// its own per-program answers).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writer: Option<PolicyWriter>,
    /// Its translated instructions, as the kernel hands them out; shared
    /// by every cgroup the program governs.
    #[serde(skip)]
    pub insns: Rc<[Insn]>,
}

impl PolicyProgram {
    /// "prog 920 (lxc_devices) at /lxc/200"
    pub fn label(&self) -> String {
        let name = if self.name.is_empty() {
            String::new()
        } else {
            format!(" ({})", self.name)
        };
        let writer = match &self.writer {
            Some(w) if w.manager != Manager::Unknown => {
                format!(", written by {}", w.manager.label())
            }
            _ => String::new(),
        };
        format!("prog {}{name} at {}{writer}", self.id, self.attached_at)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CgroupPolicy {
    /// The cgroup asked about, relative to the cgroup2 mount.
    pub cgroup: String,
    /// In the kernel's order: the cgroup's own first, the root's last.
    pub programs: Vec<PolicyProgram>,
}

/// Device programs by id, None for gpu-trace's own: a program's id never
/// names another program while it lives, and its instructions never
/// change. Bounded: programs of containers long gone are dropped with
/// the rest when it fills.
#[derive(Debug, Default)]
pub struct ProgramCache(HashMap<u32, Option<CachedProgram>>);

#[derive(Debug, Clone)]
struct CachedProgram {
    name: String,
    tag: String,
    loaded_boot_ns: u64,
    insns: Rc<[Insn]>,
}

const PROGRAM_CACHE_LIMIT: usize = 4_096;

impl ProgramCache {
    /// The program, read once; None when it is ours or was unloaded.
    fn get(&mut self, id: u32) -> Option<CachedProgram> {
        if let Some(known) = self.0.get(&id) {
            return known.clone();
        }
        // Unloaded meanwhile: not cached.
        let dump = dump_program(id).ok()?;
        // The name alone proves nothing (any root program can take it); a
        // gpu-trace holding it does. The selftest's scratch policy is held
        // by gpu-trace too, but is a policy: the name tells those apart.
        let ours = dump.name.starts_with(program::OBSERVER) && held_by_gpu_trace(id);
        let program = (!ours).then(|| CachedProgram {
            name: dump.name,
            tag: dump.tag,
            loaded_boot_ns: dump.load_boot_ns,
            insns: dump.insns.into(),
        });
        if self.0.len() >= PROGRAM_CACHE_LIMIT {
            self.0.clear();
        }
        self.0.insert(id, program.clone());
        program
    }

    /// Reads the programs `ids` now, while they live; 0s are skipped.
    pub fn read_ahead(&mut self, ids: &[u32]) {
        for &id in ids.iter().filter(|&&id| id != 0) {
            self.get(id);
        }
    }

    /// Whether `get` found no program `id`: unloaded, not ours.
    fn unloaded(&self, id: u32) -> bool {
        !self.0.contains_key(&id)
    }
}

impl CgroupPolicy {
    /// Reads the policy of `cgroup` (relative to `mount`). gpu-trace's own
    /// observers are left out (see own_programs.rs): they allow everything
    /// by construction.
    pub fn read(mount: &Path, cgroup: &Path, cache: &mut ProgramCache) -> anyhow::Result<Self> {
        let dir = mount.join(
            relative_to_mount(cgroup)
                .strip_prefix("/")
                .expect("absolute"),
        );
        let effective = device_programs(open_dir(&dir)?, true)
            .with_context(|| format!("querying the device programs of {}", dir.display()))?;
        Self::of_programs(mount, cgroup, &effective.program_ids, cache)
    }

    /// The policy made of `effective`, the programs the kernel just listed
    /// as in force on `cgroup`, in its order.
    pub fn of_programs(
        mount: &Path,
        cgroup: &Path,
        effective: &[u32],
        cache: &mut ProgramCache,
    ) -> anyhow::Result<Self> {
        let relative = relative_to_mount(cgroup);
        let dumps: Vec<(u32, CachedProgram)> = effective
            .iter()
            .filter_map(|&id| Some((id, cache.get(id)?)))
            .collect();
        let wanted: HashSet<u32> = dumps.iter().map(|(id, _)| *id).collect();
        let where_attached = attachment_levels(mount, &relative, wanted)?;
        Ok(Self::made_of(&relative, dumps, &where_attached, "?"))
    }

    /// The policy of `cgroup`, since removed, made of `sighted`, the
    /// programs the kernel recorded in force on it at a sighting: each
    /// attached where a cgroup above it still has it, else at the removed
    /// cgroup itself. An error when one of them is unloaded too.
    pub fn of_sighted_programs(
        mount: &Path,
        cgroup: &Path,
        sighted: &[u32],
        cache: &mut ProgramCache,
    ) -> anyhow::Result<Self> {
        let relative = relative_to_mount(cgroup);
        let mut dumps = Vec::new();
        for &id in sighted.iter().filter(|&&id| id != 0) {
            match cache.get(id) {
                Some(dump) => dumps.push((id, dump)),
                None if cache.unloaded(id) => anyhow::bail!(
                    "program {id}, in force at the sighting, was unloaded with the cgroup"
                ),
                None => {} // gpu-trace's own
            }
        }
        let wanted: HashSet<u32> = dumps.iter().map(|(id, _)| *id).collect();
        let mut above = relative.parent().map(PathBuf::from);
        // The nearest cgroup above that still exists.
        while let Some(level) = above.as_ref() {
            if mount
                .join(level.strip_prefix("/").unwrap_or(level))
                .is_dir()
            {
                break;
            }
            above = level.parent().map(PathBuf::from);
        }
        let where_attached = match above {
            Some(level) => attachment_levels(mount, &level, wanted)?,
            None => HashMap::new(),
        };
        let removed = format!("{} (removed)", relative.display());
        Ok(Self::made_of(&relative, dumps, &where_attached, &removed))
    }

    /// The policy of `relative` made of its programs' dumps, each attached
    /// where `where_attached` says, else at `elsewhere`.
    fn made_of(
        relative: &Path,
        dumps: Vec<(u32, CachedProgram)>,
        where_attached: &HashMap<u32, (String, u32)>,
        elsewhere: &str,
    ) -> Self {
        let clock = BootClock::now();
        let programs = dumps
            .into_iter()
            .map(|(id, dump)| {
                let (attached_at, flags) = where_attached
                    .get(&id)
                    .cloned()
                    .unwrap_or_else(|| (elsewhere.to_string(), 0));
                PolicyProgram {
                    writer: None,
                    id,
                    name: dump.name,
                    tag: dump.tag,
                    attached_at,
                    attach_mode: attach_mode(flags),
                    loaded_at: chrono::DateTime::<chrono::Utc>::from(
                        clock.wall_time(dump.loaded_boot_ns),
                    )
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    loaded_boot_ns: dump.loaded_boot_ns,
                    insns: dump.insns,
                }
            })
            .collect();
        Self {
            cgroup: relative.to_string_lossy().into_owned(),
            programs,
        }
    }

    pub fn answer(&self, query: &DeviceQuery) -> Answer {
        combined_answer(self.programs.iter().map(|p| &*p.insns), query)
    }
}

/// For each of the `wanted` programs: the cgroup it is attached at, the
/// nearest along the path from `cgroup` up to the root, and that cgroup's
/// attach flags. The walk stops once all are found: each level is a query
/// that waits on the kernel's cgroup lock, which a tenant making cgroups
/// holds often, so a container's cgroup should not cost the levels above
/// its policy.
fn attachment_levels(
    mount: &Path,
    cgroup: &Path,
    mut wanted: HashSet<u32>,
) -> anyhow::Result<HashMap<u32, (String, u32)>> {
    let mut levels = HashMap::new();
    let mut level = Some(cgroup.to_path_buf());
    while let Some(relative) = level.filter(|_| !wanted.is_empty()) {
        let dir = mount.join(relative.strip_prefix("/").unwrap_or(&relative));
        let attached = device_programs(open_dir(&dir)?, false).with_context(|| {
            format!("querying the device programs attached at {}", dir.display())
        })?;
        for id in attached.program_ids {
            if wanted.remove(&id) {
                levels.insert(
                    id,
                    (relative.to_string_lossy().into_owned(), attached.flags),
                );
            }
        }
        level = relative.parent().map(PathBuf::from);
    }
    Ok(levels)
}

/// `cgroup` as a path from the cgroup2 mount's root: "/a/b".
fn relative_to_mount(cgroup: &Path) -> PathBuf {
    Path::new("/").join(cgroup.strip_prefix("/").unwrap_or(cgroup))
}

fn open_dir(dir: &Path) -> anyhow::Result<File> {
    File::open(dir).with_context(|| format!("opening cgroup {}", dir.display()))
}

fn attach_mode(flags: u32) -> &'static str {
    use aya_obj::generated::{BPF_F_ALLOW_MULTI, BPF_F_ALLOW_OVERRIDE};
    if flags & BPF_F_ALLOW_MULTI != 0 {
        "multi"
    } else if flags & BPF_F_ALLOW_OVERRIDE != 0 {
        "override"
    } else {
        "exclusive"
    }
}
