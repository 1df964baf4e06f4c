//! From what was seen to why it failed and what to change: a named root
//! cause and a fix in the words of the container's runtime.
//!
//! The catalogue of causes is documented in README.md ("Root causes").

use std::{path::PathBuf, rc::Rc};

use rustc_hash::{FxHashMap, FxHashSet};

use crate::{
    analysis::cdi_check::{stale_entries, StaleCdiEntry},
    analysis::policy_age::{duration_text, seconds_after_start},
    cgroup::first_process::FirstProcess,
    host::{
        cdi_specs::{read_spec_nodes, CDI_DIRS_ENV, DEFAULT_CDI_DIRS},
        nvidia_runtime_config::no_cgroups_config,
        proc_devices::CharMajors,
        security_modules::{security_module_of, SecurityModule},
        systemd_units::{char_names, glob_matches, unit_of_cgroup},
    },
    model::{
        access::Verdict,
        container::{Container, Runtime},
        denied_by::DeniedBy,
        diagnosis::{Cause, Diagnosis},
        node::NvidiaNode,
        policy_writer::Manager,
        record::Record,
        rendered::Rendered,
    },
    text::shell_word::{command_word, plain_or, prose},
};

/// What the cause functions below work out; `Diagnosis` adds the renderings.
struct Parts {
    cause: Cause,
    explanation: String,
    fix: Vec<String>,
}

impl From<Parts> for Diagnosis {
    fn from(mut parts: Parts) -> Self {
        let placeholders: Vec<&str> = PLACEHOLDERS
            .into_iter()
            .filter(|p| parts.fix.iter().any(|f| f.contains(p)))
            .collect();
        if !placeholders.is_empty() {
            parts.fix.push(format!(
                "({} stand{} for the name in this event, which holds characters that cannot be shown safely in a command)",
                placeholders.join(" and "),
                if placeholders.len() == 1 { "s" } else { "" }
            ));
        }
        Diagnosis::new(parts.cause, parts.explanation, parts.fix)
    }
}

/// Shown in commands instead of an observed name no quoting can show:
/// bare words, which a shell pasted into passes as they are (`<name>`
/// would be a redirection).
const CONTAINER: &str = "CONTAINER";
const NODE_PATH: &str = "NODE_PATH";
const PLACEHOLDERS: [&str; 2] = [CONTAINER, NODE_PATH];

/// Remembers which (cgroup, device) pairs were allowed, to recognise rules
/// rewritten while a container runs, and caches diagnoses: a denial
/// retried in a loop is diagnosed once.
#[derive(Debug)]
pub struct Diagnoser {
    allowed: FxHashSet<(u64, u32, u32)>,
    /// cgroups in which the NVIDIA frontend (195) was seen allowed.
    frontend_allowed: FxHashSet<u64>,
    cache: FxHashMap<DiagnosisKey, Option<Rc<Diagnosis>>>,
    /// Which /proc/devices snapshot (its generation) the cache was filled against.
    majors_seen: Option<u64>,
    host: HostFacts,
    /// The stale CDI entries as last read, and when: specs change rarely,
    /// and a flood of new diagnoses must not re-read them each time.
    cdi_reading: std::cell::RefCell<Option<(std::time::Instant, Rc<[StaleCdiEntry]>)>>,
}

/// How long a reading of the CDI specs is used.
const CDI_REREAD_AFTER: std::time::Duration = std::time::Duration::from_secs(5);

/// What a diagnosis asks of the host besides /proc/devices, on each new
/// diagnosis (they are cached); unit tests put their own in.
#[derive(Debug, Clone, Copy)]
struct HostFacts {
    /// NVIDIA's runtime configuration, when it says `no-cgroups = true`.
    no_cgroups_config: fn() -> Option<PathBuf>,
    /// The node's mode and group as process `pid` sees the path, and the
    /// process's groups; None when it is gone.
    node_group: fn(u32, &[u8]) -> Option<NodeGroup>,
    /// The security module confining process `pid`.
    security_module: fn(u32) -> Option<SecurityModule>,
    /// CDI spec entries that no longer match the host.
    stale_cdi: fn(&CharMajors) -> Vec<StaleCdiEntry>,
}

/// Specs in GPU_TRACE_CDI_DIRS (colon-separated) or the default directories.
fn stale_cdi_now(majors: &CharMajors) -> Vec<StaleCdiEntry> {
    let dirs: Vec<PathBuf> = match std::env::var_os(CDI_DIRS_ENV) {
        Some(dirs) => std::env::split_paths(&dirs).collect(),
        None => DEFAULT_CDI_DIRS.iter().map(PathBuf::from).collect(),
    };
    stale_entries(&read_spec_nodes(&dirs).0, majors)
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeGroup {
    mode: u32,
    gid: u32,
    process_groups: Vec<u32>,
}

fn node_group_now(pid: u32, path: &[u8]) -> Option<NodeGroup> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::path::Path::new(std::ffi::OsStr::from_bytes(path));
    let root = PathBuf::from(format!("/proc/{pid}/root"));
    let (mode, gid) = crate::host::in_root::mode_and_group_in(&root, path)?;
    Some(NodeGroup {
        mode,
        gid,
        process_groups: crate::host::proc_pid::groups_of(pid)?,
    })
}

impl Default for Diagnoser {
    fn default() -> Self {
        Self {
            allowed: FxHashSet::default(),
            frontend_allowed: FxHashSet::default(),
            cache: FxHashMap::default(),
            majors_seen: None,
            host: HostFacts {
                no_cgroups_config,
                node_group: node_group_now,
                security_module: security_module_of,
                stale_cdi: stale_cdi_now,
            },
            cdi_reading: std::cell::RefCell::new(None),
        }
    }
}

/// Everything a diagnosis depends on besides what `Diagnoser` learns.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct DiagnosisKey {
    cgroup_id: u64,
    device: (bool, u32, u32),
    access: u16,
    verdict: Verdict,
    ret: Option<i32>,
    uid: u32,
    path: Option<Vec<u8>>,
    /// The culprit as attribution cached it (same answer, same allocation;
    /// held, so that its address cannot name another while cached).
    culprit: Option<SameCulprit>,
    /// The culprit unit's DeviceAllow= list, by content.
    device_allow: Option<Rc<[String]>>,
}

/// A culprit compared and hashed by its allocation.
#[derive(Debug, Clone)]
struct SameCulprit(Rc<Rendered<DeniedBy>>);

impl PartialEq for SameCulprit {
    fn eq(&self, other: &Self) -> bool {
        Rc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SameCulprit {}

impl std::hash::Hash for SameCulprit {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        std::ptr::hash(Rc::as_ptr(&self.0), state)
    }
}

/// Enough for every distinct problem a host shows at once; a flood of
/// distinct paths only empties it more often.
const CACHE_LIMIT: usize = 4096;
/// What was seen allowed, bounded the same way: forgetting costs only a
/// `rules-rewritten` named as the cause that explains it without history.
const ALLOWED_LIMIT: usize = 65_536;

impl Diagnoser {
    /// Learns from every record; returns a diagnosis for problems.
    /// `majors_generation` changes whenever `majors` does; `device_allow`
    /// is the DeviceAllow= list of the systemd unit whose program denied it.
    pub fn diagnose(
        &mut self,
        record: &Record,
        majors: &CharMajors,
        majors_generation: u64,
        started: Option<FirstProcess>,
        device_allow: Option<&Rc<[String]>>,
    ) -> Option<Rc<Diagnosis>> {
        let learned = self.learn(record);
        if learned || self.majors_seen != Some(majors_generation) || self.cache.len() >= CACHE_LIMIT
        {
            self.cache.clear();
            self.majors_seen = Some(majors_generation);
        }
        let a = &record.access;
        let key = DiagnosisKey {
            cgroup_id: a.cgroup_id,
            device: (a.device_seen, a.major, a.minor),
            access: a.access,
            verdict: a.verdict,
            ret: a.open.as_ref().and_then(|o| o.ret),
            uid: a.uid,
            path: a.open.as_ref().map(|o| o.path.clone()),
            culprit: record.denied_by.clone().map(SameCulprit),
            device_allow: device_allow.cloned(),
        };
        if let Some(known) = self.cache.get(&key) {
            return known.clone();
        }
        let diagnosis = self
            .work_out(record, majors, started, device_allow.map(|d| &d[..]))
            .map(|parts| Rc::new(Diagnosis::from(parts)));
        self.cache.insert(key, diagnosis.clone());
        diagnosis
    }

    /// Drops what was learned and cached for cgroups that are gone.
    pub fn forget_cgroups_except(&mut self, exists: impl Fn(u64) -> bool) {
        self.allowed.retain(|(id, _, _)| exists(*id));
        self.frontend_allowed.retain(|id| exists(*id));
        self.cache.retain(|key, _| exists(key.cgroup_id));
        self.allowed.shrink_to_fit();
        self.frontend_allowed.shrink_to_fit();
        self.cache.shrink_to_fit();
    }

    /// Records allowed accesses; true when that changes what is known.
    fn learn(&mut self, record: &Record) -> bool {
        let a = &record.access;
        if a.verdict != Verdict::Allowed {
            return false;
        }
        if self.allowed.len() >= ALLOWED_LIMIT || self.frontend_allowed.len() >= ALLOWED_LIMIT {
            self.allowed.clear();
            self.frontend_allowed.clear();
        }
        let new_pair = self.allowed.insert((a.cgroup_id, a.major, a.minor));
        let new_frontend = record.node.is_some_and(|n| !n.has_dynamic_major())
            && self.frontend_allowed.insert(a.cgroup_id);
        new_pair || new_frontend
    }

    /// `started`: the cgroup's first process, when a program denied it.
    fn work_out(
        &self,
        record: &Record,
        majors: &CharMajors,
        started: Option<FirstProcess>,
        device_allow: Option<&[String]>,
    ) -> Option<Parts> {
        let a = &record.access;
        let errno = a.open.as_ref().and_then(|o| o.errno());
        Some(match a.verdict {
            Verdict::Allowed => {
                return stale_node_opened(record, majors)
                    .map(|stale| self.stale_cdi_behind(record, majors).unwrap_or(stale))
            }
            Verdict::FailedBeforeDeviceCheck if errno == Some(libc::EACCES) => {
                let group = a
                    .open
                    .as_ref()
                    .and_then(|o| (self.host.node_group)(a.pid, &o.path));
                file_permissions(record, group)
            }
            Verdict::FailedBeforeDeviceCheck => node_missing(record),
            Verdict::DeniedAfterBpf => v1_devices_list(record),
            Verdict::DeniedAfterDeviceCheck => {
                lsm_denied(record, (self.host.security_module)(a.pid))
            }
            // Denied reaches here only unattributed; BPF is the usual layer.
            Verdict::DeniedByBpfPolicy | Verdict::DeniedLayerUnknown => {
                if self.allowed.contains(&(a.cgroup_id, a.major, a.minor)) {
                    rules_rewritten(
                        record,
                        format!(
                            "{} opened {} earlier in this trace and is now denied",
                            label(record),
                            device_text(record)
                        ),
                    )
                } else if let Some((seconds, pid)) = written_after_start(record, started) {
                    rules_rewritten(
                        record,
                        format!(
                            "{} was written {} after the cgroup's first process (pid {pid}) started, and denies {}",
                            policy_text(record),
                            duration_text(seconds),
                            device_text(record)
                        ),
                    )
                } else if let Some(spec) = self.stale_cdi_behind(record, majors) {
                    spec
                } else if let Some(unresolved) =
                    device_allow_name_unresolved(record, majors, device_allow)
                {
                    unresolved
                } else if let Some(stale) = stale_major(record, majors) {
                    stale
                } else if let Some(ancestor) = ancestor_policy(record) {
                    ancestor
                } else if let Some(hookless) = no_cgroups_hook(record, self.host.no_cgroups_config)
                {
                    hookless
                } else if let Some(stacked) = stacked_programs(record) {
                    stacked
                } else if record.node.is_some_and(NvidiaNode::has_dynamic_major) {
                    dynamic_major_not_allowed(
                        record,
                        majors,
                        self.frontend_allowed.contains(&a.cgroup_id),
                    )
                } else if record.driver.as_deref() == Some(KFD_DRIVER) {
                    kfd_major_not_allowed(record)
                } else {
                    device_denied(record)
                }
            }
        })
    }
}

impl Diagnoser {
    /// A stale CDI spec entry for the node the process opened: the spec the
    /// runtime injected the node (and its rule) from predates the driver.
    fn stale_cdi_behind(&self, record: &Record, majors: &CharMajors) -> Option<Parts> {
        let path = record.access.open.as_ref().map(|o| o.path.as_slice())?;
        let entries = {
            let mut cached = self.cdi_reading.borrow_mut();
            match &*cached {
                Some((read_at, entries)) if read_at.elapsed() < CDI_REREAD_AFTER => {
                    Rc::clone(entries)
                }
                _ => {
                    let entries: Rc<[StaleCdiEntry]> = (self.host.stale_cdi)(majors).into();
                    *cached = Some((std::time::Instant::now(), Rc::clone(&entries)));
                    entries
                }
            }
        };
        let entry = entries.iter().find(|e| e.path.as_bytes() == path)?;
        Some(Parts {
            cause: Cause::StaleCdiSpec,
            explanation: format!(
                "{} was injected from CDI spec {} ({}), which no longer matches the host: {}",
                prose(&entry.path),
                prose(&entry.file),
                prose(&entry.device),
                entry.problem
            ),
            fix: vec![
                entry.fix.clone(),
                format!("then recreate {}", label(record)),
            ],
        })
    }
}

fn path_of(record: &Record) -> String {
    match (&record.access.open, record.node) {
        (Some(open), _) => String::from_utf8_lossy(&open.path).into_owned(),
        (None, Some(node)) => node.dev_path(),
        (None, None) => "(device)".into(),
    }
}

/// "the device policy prog 920 (lxc_dev) at /lxc/200 (of ct 200)" when
/// attribution found the program, else "the device policy of ct 200".
fn policy_text(record: &Record) -> String {
    match record.denied_by.as_deref().map(|c| &**c) {
        Some(culprit @ DeniedBy::Program { .. }) => {
            format!(
                "the device policy {} (of {})",
                prose(&culprit.describe()),
                label(record)
            )
        }
        _ => format!("the device policy of {}", label(record)),
    }
}

/// The container's label, for prose.
fn label(record: &Record) -> String {
    prose(&record.container.label()).into_owned()
}

fn device_text(record: &Record) -> String {
    let a = &record.access;
    let name = record.device.as_deref().unwrap_or("device");
    format!("{name} (c {}:{})", a.major, a.minor)
}

/// Today's major of the node's driver, per /proc/devices.
fn todays_major(node: NvidiaNode, majors: &CharMajors) -> Option<u32> {
    if !node.has_dynamic_major() {
        return Some(crate::model::node::NVIDIA_FRONTEND_MAJOR);
    }
    majors
        .nvidia_majors()
        .into_iter()
        .find(|&m| majors.driver(m) == Some(node.driver()))
}

fn dynamic_major_not_allowed(
    record: &Record,
    majors: &CharMajors,
    frontend_allowed: bool,
) -> Parts {
    let node = record.node.expect("checked by the caller");
    let major = todays_major(node, majors).unwrap_or(record.access.major);
    let frontend = if frontend_allowed {
        "it allows the NVIDIA frontend (major 195, seen allowed) but not"
    } else {
        "it does not allow"
    };
    Parts {
        cause: Cause::DynamicMajorNotAllowed,
        explanation: format!(
            "{} denies {}: {frontend} {}'s major {major}, which the kernel assigns when the module loads and which can change after a reboot or driver update",
            policy_text(record),
            device_text(record),
            node.driver(),
        ),
        fix: allow_device(&record.container, &node.dev_path(), major, node.driver()),
    }
}

/// AMD's compute node: its driver's name in /proc/devices, and its path.
const KFD_DRIVER: &str = "kfd";
const KFD_PATH: &str = "/dev/kfd";

/// ROCm's /dev/kfd denied: like nvidia-uvm, its major is handed out when
/// amdgpu loads. ROCm needs the render nodes (/dev/dri) as well.
fn kfd_major_not_allowed(record: &Record) -> Parts {
    let major = record.access.major;
    let container = &record.container;
    let fix = match container.runtime {
        Runtime::Lxc => {
            let mut fix = allow_device(container, KFD_PATH, major, KFD_DRIVER);
            fix.insert(
                fix.len().saturating_sub(1),
                format!(
                    "and for the render nodes: `lxc.cgroup2.devices.allow: c {}:* rwm` with `lxc.mount.entry: /dev/dri dev/dri none bind,optional,create=dir`",
                    crate::model::vendor::DRM_MAJOR
                ),
            );
            fix
        }
        Runtime::Docker | Runtime::Podman => vec![
            "recreate the container with `--device /dev/kfd --device /dev/dri` (ROCm opens both), and `--group-add video --group-add render` where the nodes are not world-accessible".to_string(),
        ],
        Runtime::Containerd | Runtime::Crio => vec![
            "request GPUs through AMD's ROCm device plugin (resources: amd.com/gpu), which passes /dev/kfd and the render nodes".to_string(),
        ],
        _ => allow_device(container, KFD_PATH, major, KFD_DRIVER),
    };
    Parts {
        cause: Cause::DynamicMajorNotAllowed,
        explanation: format!(
            "{} denies {}: it does not allow kfd's major {major} (AMD's ROCm compute node), which the kernel assigns when amdgpu loads and which can change after a reboot or driver update",
            policy_text(record),
            device_text(record),
        ),
        fix,
    }
}

/// The node carries a major that is not its driver's today.
fn stale_major(record: &Record, majors: &CharMajors) -> Option<Parts> {
    let a = &record.access;
    let node = NvidiaNode::from_path(&a.open.as_ref()?.path)?;
    let today = todays_major(node, majors)?;
    if today == a.major {
        return None;
    }
    let path = path_of(record);
    let shown = prose(&path);
    let mut fix = vec![format!(
        "recreate {shown} with today's major: on the host `nvidia-modprobe -u -c=0` (or `mknod -m 666 -- {} c {today} {}`), and restart what bind-mounts it",
        command_word(&path, NODE_PATH),
        a.minor
    )];
    fix.extend(allow_device(
        &record.container,
        &node.dev_path(),
        today,
        node.driver(),
    ));
    Some(Parts {
        cause: Cause::StaleMajor,
        explanation: format!(
            "{shown} is c {}:{} but {} has major {today} today (/proc/devices): the node, and maybe the allow rule, predate a reboot or driver update",
            a.major,
            a.minor,
            node.driver()
        ),
        fix,
    })
}

/// An allowed open that still failed with ENXIO because the node's major
/// belongs to no driver: the stale-major case where the policy let it by.
fn stale_node_opened(record: &Record, majors: &CharMajors) -> Option<Parts> {
    let errno = record.access.open.as_ref()?.errno()?;
    (errno == libc::ENXIO && record.driver.is_none()).then(|| stale_major(record, majors))?
}

/// When the program that denied it was loaded past the start's grace after
/// the cgroup's first process: the delay and that process.
fn written_after_start(record: &Record, started: Option<FirstProcess>) -> Option<(u64, u32)> {
    let first = started?;
    match record.denied_by.as_deref().map(|d| &**d)? {
        DeniedBy::Program { loaded_boot_ns, .. } => {
            Some((seconds_after_start(*loaded_boot_ns, first)?, first.pid))
        }
        _ => None,
    }
}

/// `what`: how the rewrite shows ("... opened X earlier", "... was written
/// 3 min after ..."); the rest is the same for either.
fn rules_rewritten(record: &Record, what: String) -> Parts {
    let node = record.node;
    let driver = driver_name(record);
    let fix = match record.container.runtime {
        Runtime::Docker | Runtime::Podman | Runtime::Containerd | Runtime::Crio => vec![
            "give the container its GPUs as devices (`--gpus all` / `--device`, or CDI specs) so reloads keep them".to_string(),
            "or create the /dev/char symlinks systemd needs to keep the rules: `nvidia-ctk system create-dev-char-symlinks --create-all`".to_string(),
            "or let the engine manage cgroups itself: the cgroupfs driver (dockerd `\"exec-opts\": [\"native.cgroupdriver=cgroupfs\"]`, containerd `SystemdCgroup = false`), whose rules systemd never re-applies".to_string(),
            "restarting the container helps only until the next `systemctl daemon-reload`".to_string(),
        ],
        Runtime::Systemd => vec![format!(
            "in {}: DeviceAllow=char-{} rw (a rule by driver name survives reloads and new majors)",
            prose(&record.container.id),
            plain_or(driver, "DRIVER")
        )],
        _ => allow_device(&record.container, &node.map_or_else(|| path_of(record), NvidiaNode::dev_path), record.access.major, driver),
    };
    Parts {
        cause: Cause::RulesRewritten,
        explanation: format!(
            "{what}: its device rules were rewritten while it ran (as `systemctl daemon-reload` does to containers whose devices were not passed as device specs, or runc after `docker update`)"
        ),
        fix,
    }
}

/// The culprit program, with its cgroup and writer, when a program denied it.
fn culprit_program(record: &Record) -> Option<(&str, Option<Manager>)> {
    match record.denied_by.as_deref().map(|d| &**d)? {
        DeniedBy::Program {
            attached_at,
            writer,
            ..
        } => Some((attached_at.as_str(), writer.as_ref().map(|w| w.manager))),
        _ => None,
    }
}

/// The driver's name today, for rules by name.
fn driver_name(record: &Record) -> &str {
    record
        .driver
        .as_deref()
        .or(record.node.map(NvidiaNode::driver))
        .unwrap_or("DRIVER")
}

/// systemd's program denied it, and the unit's DeviceAllow= names a char
/// driver /proc/devices does not list: systemd skips such a rule (NVIDIA's
/// driver 550 renamed nvidia-frontend to nvidia).
fn device_allow_name_unresolved(
    record: &Record,
    majors: &CharMajors,
    device_allow: Option<&[String]>,
) -> Option<Parts> {
    let (attached_at, Some(Manager::Systemd)) = culprit_program(record)? else {
        return None;
    };
    let unit = unit_of_cgroup(attached_at)?;
    let entries = device_allow?;
    // A rule that names the denied device's driver today means the name
    // is not why it was denied.
    let driver_today = record.driver.as_deref();
    if char_names(entries).any(|name| driver_today.is_some_and(|d| glob_matches(name, d))) {
        return None;
    }
    let missing: Vec<&str> = char_names(entries)
        .filter(|name| !majors.iter().any(|(_, driver)| glob_matches(name, driver)))
        .collect();
    if missing.is_empty() {
        return None;
    }
    let unit_word = command_word(unit, CONTAINER);
    let listed = missing
        .iter()
        .map(|n| format!("char-{}", prose(n)))
        .collect::<Vec<_>>()
        .join(", ");
    let driver = driver_name(record);
    let mut fix = vec![format!(
        "in {unit_word}: `DeviceAllow=char-{} rw`, the name /proc/devices lists today for major {} (`systemctl edit {unit_word}`, then restart it)",
        plain_or(driver, "DRIVER"),
        record.access.major
    )];
    if let Some(node) = record.node {
        fix.push(format!(
            "or name the node: `DeviceAllow={} rw`",
            node.dev_path()
        ));
    }
    Some(Parts {
        cause: Cause::DeviceAllowNameUnresolved,
        explanation: format!(
            "{} denies {}: {}'s DeviceAllow= names {listed}, which /proc/devices does not list today, so systemd left that rule out (NVIDIA's driver 550 renamed nvidia-frontend to nvidia)",
            policy_text(record),
            device_text(record),
            prose(unit)
        ),
        fix,
    })
}

/// An engine's own program denied an NVIDIA node, and NVIDIA's runtime
/// configuration says `no-cgroups = true`: its hook never added the GPUs
/// to the container's rules (right for rootless podman, not for a rootful
/// runtime, which has a program of its own here).
fn no_cgroups_hook(record: &Record, config: fn() -> Option<PathBuf>) -> Option<Parts> {
    let node = record.node?;
    let engine = matches!(
        record.container.runtime,
        Runtime::Docker | Runtime::Containerd | Runtime::Crio | Runtime::Podman
    );
    let (attached_at, _) = culprit_program(record)?;
    if !engine || !attached_at.starts_with(&record.container.cgroup) {
        return None;
    }
    let config = config()?;
    let shown = config.display().to_string();
    let mut fix = vec![format!(
        "set `no-cgroups = false` under [nvidia-container-cli] in {} (rootful runtimes), then recreate the container",
        prose(&shown)
    )];
    fix.extend(allow_device(
        &record.container,
        &node.dev_path(),
        record.access.major,
        driver_name(record),
    ));
    Some(Parts {
        cause: Cause::NoCgroupsHook,
        explanation: format!(
            "{} denies {}: {} says `no-cgroups = true`, so NVIDIA's hook added no GPU to the container's device rules",
            policy_text(record),
            device_text(record),
            prose(&shown)
        ),
        fix,
    })
}

/// Another program in force allows what the culprit denies: every program
/// on the path must allow an access (crun's program beside systemd's, a
/// hook that patched only one of them).
fn stacked_programs(record: &Record) -> Option<Parts> {
    let DeniedBy::Program {
        allowed_by, writer, ..
    } = &**record.denied_by.as_deref()?
    else {
        return None;
    };
    let allowing = allowed_by.first()?;
    let allowing_name = if allowing.name.is_empty() {
        String::new()
    } else {
        format!(" ({})", prose(&allowing.name))
    };
    let writer = writer
        .as_ref()
        .filter(|w| w.manager != Manager::Unknown)
        .map(|w| format!(" (written by {})", w.manager.label()))
        .unwrap_or_default();
    let node = record.node;
    let mut fix = vec![format!(
        "make the denying program allow it too{writer}: a rule added to one program alone is not enough"
    )];
    fix.extend(allow_device(
        &record.container,
        &node.map_or_else(|| path_of(record), NvidiaNode::dev_path),
        record.access.major,
        driver_name(record),
    ));
    Some(Parts {
        cause: Cause::StackedPrograms,
        explanation: format!(
            "{} denies {}, while prog {}{allowing_name} at {} allows it: every device program in force must allow an access, so the one that denies decides",
            policy_text(record),
            device_text(record),
            allowing.id,
            prose(&allowing.attached_at),
        ),
        fix,
    })
}

/// Whether cgroup `ancestor` lies strictly above `cgroup`.
fn is_strict_ancestor(ancestor: &str, cgroup: &str) -> bool {
    ancestor != cgroup
        && (ancestor == "/"
            || cgroup
                .strip_prefix(ancestor)
                .is_some_and(|rest| rest.starts_with('/')))
}

/// The program that denied it sits above the container's own cgroup: a
/// slice, a parent scope, a user's delegated tree.
fn ancestor_policy(record: &Record) -> Option<Parts> {
    let (attached_at, writer) = culprit_program(record)?;
    if !is_strict_ancestor(attached_at, &record.container.cgroup) {
        return None;
    }
    let driver = driver_name(record);
    let fix = match unit_of_cgroup(attached_at) {
        Some(unit) if writer == Some(Manager::Systemd) => {
            let unit_word = command_word(unit, CONTAINER);
            vec![
                format!(
                    "allow it in {unit_word}, whose policy every unit below it inherits: `systemctl set-property {unit_word} DeviceAllow='char-{} rw'`",
                    plain_or(driver, "DRIVER")
                ),
                format!("or run {} outside {unit_word}", label(record)),
            ]
        }
        _ => vec![format!(
            "allow it where that policy is written, at {}{}: a rule at the container's own cgroup cannot widen what an ancestor denies",
            prose(attached_at),
            writer
                .filter(|w| *w != Manager::Unknown)
                .map(|w| format!(" (by {})", w.label()))
                .unwrap_or_default()
        )],
    };
    Some(Parts {
        cause: Cause::AncestorPolicy,
        explanation: format!(
            "{} denies {}: it sits at {}, above {}'s own cgroup {}, and governs everything below it",
            policy_text(record),
            device_text(record),
            prose(attached_at),
            label(record),
            prose(&record.container.cgroup)
        ),
        fix,
    })
}

fn node_missing(record: &Record) -> Parts {
    let path = path_of(record);
    let (why, fix) = match NvidiaNode::from_path(path.as_bytes()) {
        Some(NvidiaNode::Uvm | NvidiaNode::UvmTools) => (
            if crate::host::proc_devices::nvidia_uvm_loaded() {
                "the nvidia_uvm module is loaded but the node was never created"
            } else {
                "the nvidia_uvm module is not loaded, so the node was never created"
            },
            "on the host: `nvidia-modprobe -u -c=0` (loads nvidia_uvm and creates /dev/nvidia-uvm and /dev/nvidia-uvm-tools)".to_string(),
        ),
        Some(NvidiaNode::Modeset) => (
            "nvidia-modeset was never created",
            "on the host: `nvidia-modprobe -m` (loads nvidia_modeset and creates /dev/nvidia-modeset)".to_string(),
        ),
        Some(NvidiaNode::Gpu(n)) => ("the GPU node was never created", format!("on the host: `nvidia-modprobe -c={n}`")),
        Some(NvidiaNode::Cap(_)) => (
            "the MIG capability node was never created",
            "on the host: `nvidia-modprobe -f /proc/driver/nvidia/capabilities/...` for the capability, or `nvidia-ctk system create-device-nodes --control-devices`".to_string(),
        ),
        _ if path.starts_with("/dev/kfd") => (
            "AMD's kfd node was never created (amdgpu makes it when it loads)",
            "on the host: check that amdgpu is loaded (`lsmod | grep amdgpu`, `ls /sys/class/kfd`)".to_string(),
        ),
        _ if path.starts_with("/dev/dri/") => (
            "the DRM node does not exist",
            "on the host: check that the GPU's driver is loaded (`ls /sys/class/drm`)".to_string(),
        ),
        _ if path.starts_with("/dev/accel/") => (
            "the accel node does not exist",
            "on the host: check that the accelerator's driver is loaded (`ls /sys/class/accel`: habanalabs, intel_vpu)".to_string(),
        ),
        _ => ("the node does not exist", "check that the NVIDIA driver is loaded on the host (`nvidia-smi`)".to_string()),
    };
    let mut fixes = vec![fix];
    if record.container.runtime != Runtime::Cgroup {
        fixes.push(format!(
            "then make it visible in {} (it needs the node bind-mounted or passed as a device)",
            label(record)
        ));
    }
    Parts {
        cause: Cause::NodeMissing,
        explanation: format!("{} does not exist (ENOENT): {why}", prose(&path)),
        fix: fixes,
    }
}

fn file_permissions(record: &Record, group: Option<NodeGroup>) -> Parts {
    let path = path_of(record);
    let shown = prose(&path);
    let uid = record.access.uid;
    let path_word = command_word(&path, NODE_PATH);
    // The group may open it, others may not, and the process is not in it.
    let missing_group = group.filter(|g| {
        let group_rw = g.mode & 0o060 == 0o060;
        let other_rw = g.mode & 0o006 == 0o006;
        group_rw && !other_rw && !g.process_groups.contains(&g.gid)
    });
    match missing_group {
        Some(g) => Parts {
            cause: Cause::FilePermissions,
            explanation: format!(
                "{shown} refused uid {uid} with EACCES: it is mode {:o}, open to group {} only, and the process is not in that group (its groups: {}); this is not the device policy",
                g.mode & 0o7777,
                g.gid,
                g.process_groups
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(" ")
            ),
            fix: vec![
                format!(
                    "give the container group {}: `--group-add {}` (Docker, podman), `securityContext.supplementalGroups: [{}]` (Kubernetes); with a user namespace, map that host gid into it",
                    g.gid, g.gid, g.gid
                ),
                format!("or check `ls -ln -- {path_word}`: the driver's NVreg_DeviceFileGID / NVreg_DeviceFileMode set the group and mode"),
            ],
        },
        None => Parts {
            cause: Cause::FilePermissions,
            explanation: format!(
                "{shown} refused uid {uid} with EACCES: its file mode or group does not let this user in; this is not the device policy"
            ),
            fix: vec![
                format!("check `ls -l -- {path_word}`: NVIDIA's nodes are normally crw-rw-rw-"),
                "add the user to the node's group (video or render), or set the driver's NVreg_DeviceFileMode / NVreg_DeviceFileGID module options".to_string(),
            ],
        },
    }
}

/// The device check allowed it and the open still got EACCES: SELinux or
/// AppArmor, which check after it.
fn lsm_denied(record: &Record, module: Option<SecurityModule>) -> Parts {
    let device = device_text(record);
    let path = path_of(record);
    let (who, fix) = match module {
        Some(SecurityModule::SeLinux { context }) => (
            format!(
                "SELinux (enforcing{})",
                context
                    .map(|c| format!(", the process runs as {}", prose(&c)))
                    .unwrap_or_default()
            ),
            vec![
                "let containers use devices: `setsebool -P container_use_devices 1`".to_string(),
                "see the denial: `ausearch -m avc -ts recent`".to_string(),
            ],
        ),
        Some(SecurityModule::AppArmor { profile }) => {
            let word = command_word(&profile, CONTAINER);
            (
                format!("AppArmor (the process runs under profile {}, enforce mode)", prose(&profile)),
                vec![
                    format!(
                        "allow the node in profile {word}: `{} rw,`, then `apparmor_parser -r` its file",
                        plain_or(&path, NODE_PATH)
                    ),
                    "or run the container with another profile (`--security-opt apparmor=...`; `unconfined` turns it off)".to_string(),
                ],
            )
        }
        None => (
            "a security module (no SELinux in enforcing mode, and the process is gone or not confined by AppArmor now)".to_string(),
            vec!["look for the refusal in the kernel log: `journalctl -k | grep -i -e apparmor -e avc`".to_string()],
        ),
    };
    Parts {
        cause: Cause::LsmDenied,
        explanation: format!(
            "the device policy allowed {device} for {}, but the open got EACCES after it: {who} refused it",
            label(record)
        ),
        fix,
    }
}

fn v1_devices_list(record: &Record) -> Parts {
    let a = &record.access;
    Parts {
        cause: Cause::V1DevicesList,
        explanation: format!(
            "the BPF device policies allowed {} for {}, but the open still got EPERM: the cgroup v1 devices controller (devices.list) denies it",
            device_text(record),
            label(record)
        ),
        fix: vec![
            format!(
                "for now: `echo 'c {}:* rwm' > /sys/fs/cgroup/devices/CGROUP/devices.allow`, CGROUP being the process's devices cgroup (see /proc/PID/cgroup)",
                a.major
            ),
            format!(
                "to keep it: add the rule to the runtime's config (LXC on cgroup v1: `lxc.cgroup.devices.allow: c {}:* rwm`; Docker: `--device-cgroup-rule='c {}:* rmw'`)",
                a.major, a.major
            ),
        ],
    }
}

fn device_denied(record: &Record) -> Parts {
    let node = record.node;
    Parts {
        cause: Cause::DeviceDenied,
        explanation: format!("{} denies {}", policy_text(record), device_text(record)),
        fix: allow_device(
            &record.container,
            &node.map_or_else(|| path_of(record), NvidiaNode::dev_path),
            record.access.major,
            driver_name(record),
        ),
    }
}

/// How to allow char major `major` (and see `node_path`) in this runtime.
/// `driver`: the driver's name in /proc/devices today, for rules by name
/// (NVIDIA's frontend is "nvidia" since driver 550, "nvidia-frontend" before).
pub fn allow_device(
    container: &Container,
    node_path: &str,
    major: u32,
    driver: &str,
) -> Vec<String> {
    // Config files take no shell quoting: a path outside the safe set
    // becomes a placeholder there (and the fix says so).
    let config_path = plain_or(node_path, NODE_PATH);
    let in_container = config_path.trim_start_matches('/');
    let device_word = command_word(node_path, NODE_PATH);
    match container.runtime {
        Runtime::Lxc => {
            let proxmox =
                !container.id.is_empty() && container.id.chars().all(|c| c.is_ascii_digit());
            let config = if proxmox {
                format!("/etc/pve/lxc/{}.conf", container.id)
            } else {
                format!("/var/lib/lxc/{}/config", container.id)
            };
            let restart = if proxmox {
                format!("pct reboot {}", container.id)
            } else {
                format!("lxc-stop -n {0} && lxc-start -n {0}", command_word(&container.id, CONTAINER))
            };
            let mut fix = vec![
                format!("add to {}: `lxc.cgroup2.devices.allow: c {major}:* rwm`", command_word(&config, "the container's config")),
                format!("and, if the node is not in the container yet: `lxc.mount.entry: {config_path} {in_container} none bind,optional,create=file`"),
            ];
            if proxmox {
                fix.push(format!("(on Proxmox VE 8.1 or later, `devN: {config_path}` passes the node through instead)"));
            }
            fix.push(format!("then restart the container: `{restart}`"));
            fix
        }
        Runtime::Docker => vec![format!(
            "recreate the container with `--device {device_word}` (or `--device-cgroup-rule='c {major}:* rmw'`); with the NVIDIA Container Toolkit, `--gpus all` adds every node"
        )],
        Runtime::Podman => vec![format!("recreate the container with `--device {device_word}` (or, with CDI specs, `--device nvidia.com/gpu=all`)")],
        Runtime::Containerd | Runtime::Crio => vec![
            "request GPUs through the NVIDIA device plugin (resources: nvidia.com/gpu) or CDI specs (`nvidia-ctk cdi generate`) rather than hand-written device rules".to_string(),
            format!("the node must be allowed as c {major}:* rw in the container's device rules"),
        ],
        Runtime::Systemd => vec![format!(
            "in {}: `DeviceAllow=char-{} rw` (follows the driver's major; `systemctl edit {}`)",
            prose(&container.id),
            plain_or(driver, "DRIVER"),
            command_word(&container.id, CONTAINER)
        )],
        Runtime::Cgroup => vec![format!(
            "allow c {major}:* rwm in the device policy attached to {} or an ancestor (`bpftool cgroup tree` lists it), i.e. in whatever manages that cgroup",
            prose(&container.cgroup)
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        analysis::test_support::{record, PROC_DEVICES},
        scenario::pasted::assert_paste_safe,
    };

    fn diagnose(d: &mut Diagnoser, r: &Record) -> Option<Rc<Diagnosis>> {
        d.diagnose(r, &CharMajors::parse(PROC_DEVICES), 0, None, None)
    }

    use crate::{
        cgroup::identity::{identify, NameSources},
        model::diagnosis::{Cause, Diagnosis},
    };

    #[test]
    fn a_policy_written_after_the_cgroup_started_is_a_rewrite_without_history() {
        let mut r = record(
            "/system.slice/docker-3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8.scope",
            "/dev/nvidia0",
            195,
            0,
            Verdict::DeniedByBpfPolicy,
            -libc::EPERM,
        );
        let program = |loaded_s: u64| DeniedBy::Program {
            id: 4120,
            name: "sd_devices".into(),
            tag: "ab12".into(),
            attached_at: "/system.slice/docker-3f2a9c1b0d4e.scope".into(),
            loaded_at: "2026-11-30T06:03:12Z".into(),
            loaded_boot_ns: loaded_s * 1_000_000_000,
            writer: None,
            allowed_by: Vec::new(),
        };
        let started = FirstProcess {
            pid: 8812,
            start_boot_ns: 8 * 1_000_000_000,
        };
        r.denied_by = Some(Rc::new(crate::model::rendered::Rendered::new(program(200))));
        let diag = Diagnoser::default()
            .diagnose(&r, &CharMajors::parse(PROC_DEVICES), 0, Some(started), None)
            .expect("diagnosis");
        assert_eq!(diag.cause, Cause::RulesRewritten);
        assert!(
            diag.explanation.contains(
                "was written 3 min 12 s after the cgroup's first process (pid 8812) started, and denies nvidia0 (c 195:0)"
            ),
            "{}",
            diag.explanation
        );
        assert!(
            diag.hint.contains("create-dev-char-symlinks"),
            "{}",
            diag.hint
        );
        // Loaded with the start (within the grace): not a rewrite.
        r.denied_by = Some(Rc::new(crate::model::rendered::Rendered::new(program(9))));
        let diag = Diagnoser::default()
            .diagnose(&r, &CharMajors::parse(PROC_DEVICES), 0, Some(started), None)
            .expect("diagnosis");
        assert_ne!(diag.cause, Cause::RulesRewritten);
    }

    fn by_program(
        attached_at: &str,
        manager: Manager,
    ) -> Rc<crate::model::rendered::Rendered<DeniedBy>> {
        Rc::new(crate::model::rendered::Rendered::new(DeniedBy::Program {
            id: 77,
            name: "sd_devices".into(),
            tag: "ab12".into(),
            attached_at: attached_at.into(),
            loaded_at: "2026-11-30T06:00:00Z".into(),
            loaded_boot_ns: 0,
            allowed_by: Vec::new(),
            writer: Some(crate::model::policy_writer::PolicyWriter {
                manager,
                evidence: "pid 1 (systemd) holds it open".into(),
                pid: Some(1),
                comm: Some("systemd".into()),
                loaded_at: "2026-11-30T06:00:00Z".into(),
            }),
        }))
    }

    #[test]
    fn a_device_allow_name_no_driver_has_is_named_with_todays_name() {
        let mut r = record(
            "/system.slice/cuda-job.service",
            "/dev/nvidiactl",
            195,
            255,
            Verdict::DeniedByBpfPolicy,
            -libc::EPERM,
        );
        r.driver = Some("nvidia".into());
        r.denied_by = Some(by_program(
            "/system.slice/cuda-job.service",
            Manager::Systemd,
        ));
        // Driver 550: major 195 is "nvidia" now.
        let majors = CharMajors::parse("Character devices:\n195 nvidia\n511 nvidia-uvm\n");
        let rules: Rc<[String]> = Rc::from(vec![
            "char-nvidia-frontend rw".to_string(),
            "char-nvidia-uvm rw".to_string(),
        ]);
        let diag = Diagnoser::default()
            .diagnose(&r, &majors, 0, None, Some(&rules))
            .expect("diagnosis");
        assert_eq!(diag.cause, Cause::DeviceAllowNameUnresolved);
        assert!(
            diag.explanation
                .contains("names char-nvidia-frontend, which /proc/devices does not list today"),
            "{}",
            diag.explanation
        );
        assert!(
            diag.hint.contains("`DeviceAllow=char-nvidia rw`"),
            "{}",
            diag.hint
        );
        // Today's name listed beside the old one (for portability), or a
        // glob that covers it: the name is not why it was denied.
        for rules in [
            vec![
                "char-nvidia-frontend rw".to_string(),
                "char-nvidia rw".to_string(),
            ],
            vec!["char-nvidia* rw".to_string()],
        ] {
            let rules: Rc<[String]> = Rc::from(rules);
            let diag = Diagnoser::default()
                .diagnose(&r, &majors, 0, None, Some(&rules))
                .expect("diagnosis");
            assert_ne!(diag.cause, Cause::DeviceAllowNameUnresolved, "{rules:?}");
        }
        // Every name resolves: not this cause.
        let resolved: Rc<[String]> = Rc::from(vec!["char-nvidia rw".to_string()]);
        let diag = Diagnoser::default()
            .diagnose(&r, &majors, 0, None, Some(&resolved))
            .expect("diagnosis");
        assert_ne!(diag.cause, Cause::DeviceAllowNameUnresolved);
    }

    #[test]
    fn a_second_program_that_allows_makes_it_stacked() {
        let mut r = record(
            "/machine.slice/libpod-ab.scope/container",
            "/dev/nvidia-uvm",
            509,
            0,
            Verdict::DeniedByBpfPolicy,
            -libc::EPERM,
        );
        let mut culprit =
            (**by_program("/machine.slice/libpod-ab.scope/container", Manager::Crun)).clone();
        if let DeniedBy::Program { allowed_by, .. } = &mut culprit {
            allowed_by.push(crate::model::denied_by::AllowingProgram {
                id: 12,
                name: "hook".into(),
                attached_at: "/machine.slice/libpod-ab.scope".into(),
            });
        }
        r.denied_by = Some(Rc::new(crate::model::rendered::Rendered::new(culprit)));
        let diag = diagnose(&mut Diagnoser::default(), &r).expect("diagnosis");
        assert_eq!(diag.cause, Cause::StackedPrograms);
        assert!(
            diag.explanation
                .contains("while prog 12 (hook) at /machine.slice/libpod-ab.scope allows it"),
            "{}",
            diag.explanation
        );
        assert!(
            diag.hint
                .starts_with("make the denying program allow it too (written by crun)"),
            "{}",
            diag.hint
        );
    }

    #[test]
    fn a_runtime_config_with_no_cgroups_is_named() {
        let id = "3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8";
        let scope = format!("/system.slice/docker-{id}.scope");
        let mut r = record(
            &scope,
            "/dev/nvidia0",
            195,
            0,
            Verdict::DeniedByBpfPolicy,
            -libc::EPERM,
        );
        r.denied_by = Some(by_program(&scope, Manager::Runc));
        let mut d = Diagnoser::default();
        d.host.no_cgroups_config = || Some("/etc/nvidia-container-runtime/config.toml".into());
        let diag = diagnose(&mut d, &r).expect("diagnosis");
        assert_eq!(diag.cause, Cause::NoCgroupsHook);
        assert!(diag.hint.starts_with("set `no-cgroups = false` under [nvidia-container-cli] in /etc/nvidia-container-runtime/config.toml"), "{}", diag.hint);
        let mut d = Diagnoser::default();
        d.host.no_cgroups_config = || None;
        assert_ne!(
            diagnose(&mut d, &r).expect("diagnosis").cause,
            Cause::NoCgroupsHook
        );
    }

    #[test]
    fn a_node_open_to_a_group_the_process_lacks_names_the_group() {
        let r = record(
            "/system.slice/docker-ab.scope",
            "/dev/dri/renderD128",
            226,
            128,
            Verdict::FailedBeforeDeviceCheck,
            -libc::EACCES,
        );
        let mut d = Diagnoser::default();
        d.host.node_group = |_, _| {
            Some(NodeGroup {
                mode: 0o20660,
                gid: 109,
                process_groups: vec![1000, 44],
            })
        };
        let diag = diagnose(&mut d, &r).expect("diagnosis");
        assert_eq!(diag.cause, Cause::FilePermissions);
        assert!(
            diag.explanation
                .contains("mode 660, open to group 109 only"),
            "{}",
            diag.explanation
        );
        assert!(
            diag.hint
                .starts_with("give the container group 109: `--group-add 109`"),
            "{}",
            diag.hint
        );
        // In the group already: the general advice.
        let mut d = Diagnoser::default();
        d.host.node_group = |_, _| {
            Some(NodeGroup {
                mode: 0o20660,
                gid: 109,
                process_groups: vec![109],
            })
        };
        let diag = diagnose(&mut d, &r).expect("diagnosis");
        assert!(diag.hint.starts_with("check `ls -l"), "{}", diag.hint);
    }

    #[test]
    fn eacces_after_the_device_check_names_the_security_module() {
        let r = record(
            "/system.slice/docker-ab.scope",
            "/dev/nvidia-uvm",
            509,
            0,
            Verdict::DeniedAfterDeviceCheck,
            -libc::EACCES,
        );
        let mut d = Diagnoser::default();
        d.host.security_module = |_| {
            Some(SecurityModule::AppArmor {
                profile: "gpu-jobs".into(),
            })
        };
        let diag = diagnose(&mut d, &r).expect("diagnosis");
        assert_eq!(diag.cause, Cause::LsmDenied);
        assert!(
            diag.explanation.contains("profile gpu-jobs, enforce mode"),
            "{}",
            diag.explanation
        );
        assert!(
            diag.hint
                .starts_with("allow the node in profile gpu-jobs: `/dev/nvidia-uvm rw,`"),
            "{}",
            diag.hint
        );
        let mut d = Diagnoser::default();
        d.host.security_module = |_| Some(SecurityModule::SeLinux { context: None });
        let diag = diagnose(&mut d, &r).expect("diagnosis");
        assert!(
            diag.hint.contains("setsebool -P container_use_devices 1"),
            "{}",
            diag.hint
        );
    }

    #[test]
    fn rules_by_name_use_the_name_proc_devices_gives_today() {
        // Driver 550 and later register major 195 as "nvidia".
        let mut r = record(
            "/system.slice/cuda-job.service",
            "/dev/nvidiactl",
            195,
            255,
            Verdict::DeniedByBpfPolicy,
            -libc::EPERM,
        );
        r.driver = Some("nvidia".into());
        let diag = diagnose(&mut Diagnoser::default(), &r).expect("diagnosis");
        assert!(
            diag.hint.contains("`DeviceAllow=char-nvidia rw`"),
            "{}",
            diag.hint
        );
        r.driver = Some("nvidia-frontend".into());
        let diag = diagnose(&mut Diagnoser::default(), &r).expect("diagnosis");
        assert!(
            diag.hint.contains("`DeviceAllow=char-nvidia-frontend rw`"),
            "{}",
            diag.hint
        );
    }

    #[test]
    fn kfd_denied_names_its_dynamic_major_and_rocms_fixes() {
        let mut r = record(
            "/lxc/300",
            "/dev/kfd",
            511,
            0,
            Verdict::DeniedByBpfPolicy,
            -libc::EPERM,
        );
        r.node = None;
        r.driver = Some("kfd".into());
        r.device = Some("kfd".into());
        let diag = diagnose(&mut Diagnoser::default(), &r).expect("diagnosis");
        assert_eq!(diag.cause, Cause::DynamicMajorNotAllowed);
        assert!(
            diag.explanation
                .contains("kfd's major 511 (AMD's ROCm compute node)"),
            "{}",
            diag.explanation
        );
        assert!(
            diag.hint.contains("lxc.cgroup2.devices.allow: c 511:* rwm"),
            "{}",
            diag.hint
        );
        assert!(diag.hint.contains("c 226:* rwm"), "{}", diag.hint);
        let docker = "/system.slice/docker-3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8.scope";
        let mut r = record(
            docker,
            "/dev/kfd",
            511,
            0,
            Verdict::DeniedByBpfPolicy,
            -libc::EPERM,
        );
        r.node = None;
        r.driver = Some("kfd".into());
        let diag = diagnose(&mut Diagnoser::default(), &r).expect("diagnosis");
        assert!(
            diag.hint.contains("`--device /dev/kfd --device /dev/dri`"),
            "{}",
            diag.hint
        );
    }

    #[test]
    fn a_node_from_a_stale_cdi_spec_names_the_spec() {
        let docker = "/system.slice/docker-3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8.scope";
        let r = record(
            docker,
            "/dev/nvidia-uvm",
            509,
            0,
            Verdict::DeniedByBpfPolicy,
            -libc::EPERM,
        );
        let mut d = Diagnoser::default();
        d.host.stale_cdi = |_| {
            vec![StaleCdiEntry {
                cause: "stale-cdi-spec",
                file: "/etc/cdi/nvidia.yaml".into(),
                device: "nvidia.com/gpu=all".into(),
                path: "/dev/nvidia-uvm".into(),
                problem:
                    "the spec says major 510, but nvidia-uvm has major 509 today (/proc/devices)"
                        .into(),
                fix: "regenerate it: `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`"
                    .into(),
            }]
        };
        let diag = diagnose(&mut d, &r).expect("diagnosis");
        assert_eq!(diag.cause, Cause::StaleCdiSpec);
        assert!(
            diag.explanation
                .contains("injected from CDI spec /etc/cdi/nvidia.yaml (nvidia.com/gpu=all)"),
            "{}",
            diag.explanation
        );
        assert!(
            diag.hint
                .starts_with("regenerate it: `nvidia-ctk cdi generate"),
            "{}",
            diag.hint
        );
    }

    #[test]
    fn a_slices_program_is_an_ancestor_policy() {
        let mut r = record(
            "/gpu.slice/job.scope",
            "/dev/nvidia-uvm",
            509,
            0,
            Verdict::DeniedByBpfPolicy,
            -libc::EPERM,
        );
        r.denied_by = Some(by_program("/gpu.slice", Manager::Systemd));
        let diag = diagnose(&mut Diagnoser::default(), &r).expect("diagnosis");
        assert_eq!(diag.cause, Cause::AncestorPolicy);
        assert!(
            diag.explanation.contains("it sits at /gpu.slice, above"),
            "{}",
            diag.explanation
        );
        assert!(
            diag.hint
                .contains("`systemctl set-property gpu.slice DeviceAllow='char-nvidia-uvm rw'`"),
            "{}",
            diag.hint
        );
        // At the container's own cgroup: not an ancestor.
        r.denied_by = Some(by_program("/gpu.slice/job.scope", Manager::Systemd));
        let diag = diagnose(&mut Diagnoser::default(), &r).expect("diagnosis");
        assert_ne!(diag.cause, Cause::AncestorPolicy);
        assert!(is_strict_ancestor("/", "/a"));
        assert!(!is_strict_ancestor("/a", "/ab"));
    }

    #[test]
    fn uvm_denied_while_195_allowed_names_the_uvm_major_for_lxc() {
        let mut d = Diagnoser::default();
        let ctl = record("/lxc/200", "/dev/nvidiactl", 195, 255, Verdict::Allowed, 3);
        assert!(diagnose(&mut d, &ctl).is_none());
        let uvm = record(
            "/lxc/200",
            "/dev/nvidia-uvm",
            509,
            0,
            Verdict::DeniedByBpfPolicy,
            -libc::EPERM,
        );
        let diag = diagnose(&mut d, &uvm).expect("a diagnosis");
        assert_eq!(diag.cause, Cause::DynamicMajorNotAllowed);
        assert!(
            diag.explanation.contains("ct 200")
                && diag.explanation.contains("major 195, seen allowed"),
            "{diag:?}"
        );
        assert!(
            diag.fix[0].contains("/etc/pve/lxc/200.conf")
                && diag.fix[0].contains("lxc.cgroup2.devices.allow: c 509:* rwm"),
            "{diag:?}"
        );
        assert!(diag.hint.contains("pct reboot 200"));
    }

    #[test]
    fn stand_in_major_with_no_driver_is_named_by_its_path() {
        let mut d = Diagnoser::default();
        let majors = CharMajors::parse("Character devices:\n  1 mem\n");
        let mut r = record(
            "/lxc.payload.box",
            "/tmp/n/nvidia-uvm",
            511,
            0,
            Verdict::DeniedByBpfPolicy,
            -1,
        );
        r.driver = None;
        let diag = d.diagnose(&r, &majors, 1, None, None).expect("diagnosis");
        assert_eq!(diag.cause, Cause::DynamicMajorNotAllowed);
        assert!(
            diag.fix[0].contains("c 511:* rwm") && diag.fix[0].contains("/var/lib/lxc/box/config"),
            "{diag:?}"
        );
    }

    #[test]
    fn node_with_an_old_major_is_stale() {
        let mut d = Diagnoser::default();
        // Denied: the old major 511 is not in the policy.
        let denied = record(
            "/lxc/200",
            "/dev/nvidia-uvm",
            511,
            0,
            Verdict::DeniedByBpfPolicy,
            -1,
        );
        let diag = diagnose(&mut d, &denied).expect("diagnosis");
        assert_eq!(diag.cause, Cause::StaleMajor);
        assert!(diag.explanation.contains("major 509 today"), "{diag:?}");
        assert!(
            diag.fix.iter().any(|f| f.contains("c 509:* rwm")),
            "{diag:?}"
        );
        // Allowed, but no driver behind the old major: ENXIO.
        let enxio = record(
            "/lxc/201",
            "/dev/nvidia-uvm",
            511,
            0,
            Verdict::Allowed,
            -libc::ENXIO,
        );
        assert_eq!(
            diagnose(&mut d, &enxio).map(|x| x.cause),
            Some(Cause::StaleMajor)
        );
    }

    #[test]
    fn allowed_then_denied_means_rules_were_rewritten() {
        let mut d = Diagnoser::default();
        let path = "/system.slice/docker-3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8.scope";
        assert!(diagnose(
            &mut d,
            &record(path, "/dev/nvidia0", 195, 0, Verdict::Allowed, 3)
        )
        .is_none());
        let diag = diagnose(
            &mut d,
            &record(path, "/dev/nvidia0", 195, 0, Verdict::DeniedByBpfPolicy, -1),
        )
        .expect("diagnosis");
        assert_eq!(diag.cause, Cause::RulesRewritten);
        assert!(diag.hint.contains("create-dev-char-symlinks"), "{diag:?}");
    }

    #[test]
    fn enoent_and_eacces_are_not_policy_problems() {
        let mut d = Diagnoser::default();
        let missing = record(
            "/",
            "/dev/nvidia-uvm",
            0,
            0,
            Verdict::FailedBeforeDeviceCheck,
            -libc::ENOENT,
        );
        let diag = diagnose(&mut d, &missing).expect("diagnosis");
        assert_eq!(diag.cause, Cause::NodeMissing);
        assert!(diag.fix[0].contains("nvidia-modprobe -u -c=0"), "{diag:?}");
        let modeset = record(
            "/",
            "/dev/nvidia-modeset",
            0,
            0,
            Verdict::FailedBeforeDeviceCheck,
            -libc::ENOENT,
        );
        assert!(
            diagnose(&mut d, &modeset).expect("diagnosis").fix[0].contains("nvidia-modprobe -m")
        );
        let eacces = record(
            "/",
            "/dev/nvidia0",
            0,
            0,
            Verdict::FailedBeforeDeviceCheck,
            -libc::EACCES,
        );
        let diag = diagnose(&mut d, &eacces).expect("diagnosis");
        assert_eq!(diag.cause, Cause::FilePermissions);
        assert!(diag.explanation.contains("not the device policy"));
    }

    #[test]
    fn v1_denial_points_at_devices_list() {
        let mut d = Diagnoser::default();
        let r = record(
            "/docker/abc",
            "/dev/nvidia-uvm",
            509,
            0,
            Verdict::DeniedAfterBpf,
            -1,
        );
        let diag = diagnose(&mut d, &r).expect("diagnosis");
        assert_eq!(diag.cause, Cause::V1DevicesList);
        assert!(diag.hint.contains("devices.allow") && diag.hint.contains("c 509:* rmw"));
    }

    /// Names a tenant may give its cgroup (root in an LXC container, a
    /// delegated systemd subtree) or the path it opens.
    const HOSTILE: [&str; 4] = [
        "$(touch${IFS}pwned)",
        "x;echo>pwned",
        "a'b`echo>pwned`",
        "-n$(echo>pwned)",
    ];

    #[test]
    fn hostile_container_names_reach_commands_as_literal_words() {
        for name in HOSTILE {
            let mut d = Diagnoser::default();
            let r = record(
                &format!("/lxc.payload.{name}"),
                "/dev/nvidia-uvm",
                509,
                0,
                Verdict::DeniedByBpfPolicy,
                -libc::EPERM,
            );
            let diag = diagnose(&mut d, &r).expect("diagnosis");
            assert!(diag.hint.contains("lxc-stop -n"), "{diag:?}");
            assert_paste_safe(&diag.hint, name);
            let unit = allow_device(
                &identify(
                    &format!("/system.slice/{name}.service"),
                    &NameSources::default(),
                ),
                "/dev/nvidia-uvm",
                509,
                "nvidia-uvm",
            );
            assert_paste_safe(&unit.join("; "), name);
        }
    }

    #[test]
    fn hostile_paths_reach_commands_as_literal_words() {
        for name in HOSTILE {
            let path = format!("/tmp/{name}/nvidia-uvm");
            let mut d = Diagnoser::default();
            // A stale major (511 is not nvidia-uvm's 509): the mknod hint.
            let stale = record(
                "/docker/3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8",
                &path,
                511,
                0,
                Verdict::DeniedByBpfPolicy,
                -libc::EPERM,
            );
            let diag = diagnose(&mut d, &stale).expect("diagnosis");
            assert_eq!(diag.cause, Cause::StaleMajor);
            assert!(diag.hint.contains("mknod"), "{diag:?}");
            assert_paste_safe(&diag.hint, &path);
            // A device with no NVIDIA node: the --device hint names the path.
            let mut other = record(
                "/docker/3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8",
                &format!("/tmp/{name}/card"),
                226,
                0,
                Verdict::DeniedByBpfPolicy,
                -libc::EPERM,
            );
            other.node = None;
            let diag = diagnose(&mut d, &other).expect("diagnosis");
            assert!(diag.hint.contains("--device"), "{diag:?}");
            assert_paste_safe(&diag.hint, &format!("/tmp/{name}/card"));
            // EACCES: the `ls -l` hint.
            let eacces = record(
                "/",
                &path,
                0,
                0,
                Verdict::FailedBeforeDeviceCheck,
                -libc::EACCES,
            );
            assert_paste_safe(&diagnose(&mut d, &eacces).expect("diagnosis").hint, &path);
        }
    }

    #[test]
    fn fixes_speak_each_runtime() {
        let fix = |cgroup: &str| {
            allow_device(
                &identify(cgroup, &NameSources::default()),
                "/dev/nvidia-uvm",
                509,
                "nvidia-uvm",
            )
            .join(" ")
        };
        assert!(fix("/system.slice/ollama.service").contains("DeviceAllow=char-nvidia-uvm rw"));
        assert!(
            fix("/docker/3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8")
                .contains("--device /dev/nvidia-uvm")
        );
        assert!(fix("/kubepods/besteffort/pod6b1e2a3c-4d5e-6f70-8192-a3b4c5d6e7f8/3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8").contains("nvidia.com/gpu"));
        assert!(fix("/machine.slice/libpod-3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8.scope").contains("--device /dev/nvidia-uvm"));
        assert!(fix("/user.slice").contains("bpftool cgroup tree"));
    }
}
