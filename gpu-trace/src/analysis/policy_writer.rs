//! Who wrote the program that denied an access: the process holding it
//! open, the name only systemd gives its programs, or the OCI runtime the
//! container's engine ran. Worked out once per program and kept.

use std::rc::Rc;

use rustc_hash::FxHashMap;

use crate::{
    host::{
        clock::BootClock, runtime_processes::oci_runtime_of, systemd_units::unit_of_cgroup,
        unit_property_changes,
    },
    kernel::program_holders::holder_of,
    model::{
        container::Container,
        denied_by::DeniedBy,
        policy_writer::{Manager, PolicyWriter, ProcessRef, PropertiesSet},
        rendered::Rendered,
    },
    runtime,
};

/// The name systemd gives every device program it attaches.
const SYSTEMD_PROGRAM_NAME: &str = "sd_devices";
/// Programs remembered; a tenant can make as many as it starts containers.
const WRITERS_CAPACITY: usize = 4096;

#[derive(Default)]
pub struct WriterFinder {
    /// Writers by program id and load time: worked out once per program.
    writers: FxHashMap<(u32, u64), PolicyWriter>,
    /// Attribution's culprit (kept, so that its address names it alone)
    /// and the same with its writer, by that address: a repeat of a denial
    /// costs a lookup, and a fresh attribution (other programs in force,
    /// another cgroup) gets its own.
    filled: FxHashMap<usize, (Culprit, Culprit)>,
}

type Culprit = Rc<Rendered<DeniedBy>>;

impl WriterFinder {
    /// `culprit` with its writer filled in, when it is a program.
    pub fn with_writer(
        &mut self,
        culprit: Rc<Rendered<DeniedBy>>,
        container: &Container,
    ) -> Rc<Rendered<DeniedBy>> {
        let DeniedBy::Program {
            id,
            name,
            attached_at,
            loaded_at,
            loaded_boot_ns,
            writer: None,
            ..
        } = &**culprit
        else {
            return culprit;
        };
        let address = Rc::as_ptr(&culprit) as usize;
        if let Some((_, filled)) = self.filled.get(&address) {
            return Rc::clone(filled);
        }
        if self.writers.len() >= WRITERS_CAPACITY {
            self.writers.clear();
        }
        let writer = self
            .writers
            .entry((*id, *loaded_boot_ns))
            .or_insert_with(|| {
                writer_of_program(
                    *id,
                    name,
                    attached_at,
                    loaded_at,
                    *loaded_boot_ns,
                    container,
                )
            })
            .clone();
        let mut filled = (**culprit).clone();
        if let DeniedBy::Program { writer: slot, .. } = &mut filled {
            *slot = Some(writer);
        }
        let filled = Rc::new(Rendered::new(filled));
        if self.filled.len() >= WRITERS_CAPACITY {
            self.filled.clear();
        }
        self.filled.insert(address, (culprit, Rc::clone(&filled)));
        filled
    }
}

/// The properties of the systemd unit at `attached_at` set as the program
/// was loaded: what made systemd (or runc, through it) write it.
fn properties_set_at_load(attached_at: &str, loaded_boot_ns: u64) -> Option<Box<PropertiesSet>> {
    let unit = unit_of_cgroup(attached_at)?;
    let loaded = BootClock::now().wall_time(loaded_boot_ns);
    let set = unit_property_changes::set_near(unit, loaded)?;
    Some(Box::new(PropertiesSet {
        unit: unit.to_string(),
        properties: set.properties,
        set_at: chrono::DateTime::<chrono::Utc>::from(set.at)
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        drop_ins: set.drop_ins,
    }))
}

/// The writer of a program in force on `container`'s cgroup, asked afresh,
/// with what made it write the program where that is on record.
pub fn writer_of_program(
    id: u32,
    name: &str,
    attached_at: &str,
    loaded_at: &str,
    loaded_boot_ns: u64,
    container: &Container,
) -> PolicyWriter {
    let mut writer = work_out(
        name,
        attached_at,
        loaded_at,
        container,
        holder_of(id),
        || oci_runtime_of(&container.id),
    );
    writer.trigger = properties_set_at_load(attached_at, loaded_boot_ns);
    writer
}

/// The writer from the evidence at hand; `runtime` is asked only when the
/// rest says nothing (it reads every process's command line).
fn work_out(
    name: &str,
    attached_at: &str,
    loaded_at: &str,
    container: &Container,
    holder: Option<ProcessRef>,
    runtime: impl FnOnce() -> Option<(Manager, ProcessRef)>,
) -> PolicyWriter {
    let writer = |manager, evidence: String, process: Option<ProcessRef>| PolicyWriter {
        manager,
        evidence,
        pid: process.as_ref().map(|p| p.pid),
        comm: process.map(|p| p.comm),
        loaded_at: loaded_at.to_string(),
        trigger: None,
    };
    if let Some(holder) = holder {
        let manager = Manager::from_comm(&holder.comm).unwrap_or(Manager::Unknown);
        let evidence = format!("pid {} ({}) holds it open", holder.pid, holder.comm);
        return writer(manager, evidence, Some(holder));
    }
    if name == SYSTEMD_PROGRAM_NAME {
        return writer(
            Manager::Systemd,
            format!("its name {SYSTEMD_PROGRAM_NAME}, which systemd gives its device programs"),
            None,
        );
    }
    let engine_runs_it = runtime::of(container.runtime).engine().is_some()
        && attached_at.starts_with(&container.cgroup);
    if name.is_empty() && engine_runs_it {
        if let Some((manager, process)) = runtime() {
            let evidence = format!(
                "unnamed and held by no process at the container's cgroup, whose {} (pid {}) runs it with {}{}",
                process.comm,
                process.pid,
                manager.label(),
                if process.comm.starts_with("containerd-shim") {
                    " (containerd-shim-runc-v2 runs runc, or a binary its runtime options name)"
                } else {
                    ""
                }
            );
            return writer(manager, evidence, Some(process));
        }
    }
    writer(
        Manager::Unknown,
        "held by no process, and neither its name nor its cgroup names a writer".into(),
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::container::Runtime;

    fn docker(id: &str) -> Container {
        Container {
            runtime: Runtime::Docker,
            id: id.into(),
            name: Some("web".into()),
            pod_uid: None,
            namespace: None,
            pod: None,
            cgroup: format!("/system.slice/docker-{id}.scope"),
        }
    }

    fn process(pid: u32, comm: &str) -> Option<ProcessRef> {
        Some(ProcessRef {
            pid,
            comm: comm.into(),
        })
    }

    #[test]
    fn a_holder_is_the_best_evidence() {
        let w = work_out(
            "sd_devices",
            "/system.slice/docker-ab.scope",
            "t",
            &docker("ab"),
            process(1, "systemd"),
            || panic!("not asked"),
        );
        assert_eq!(w.manager, Manager::Systemd);
        assert_eq!(w.pid, Some(1));
        assert_eq!(w.evidence, "pid 1 (systemd) holds it open");
        let w = work_out(
            "x",
            "/x",
            "t",
            &docker("ab"),
            process(77, "myagent"),
            || None,
        );
        assert_eq!(w.manager, Manager::Unknown);
        assert_eq!(w.comm.as_deref(), Some("myagent"));
    }

    #[test]
    fn runc_is_named_by_the_shim_of_the_container() {
        let c = docker("ab");
        let w = work_out("", &c.cgroup, "t", &c, None, || {
            Some((Manager::Runc, process(40, "containerd-shim").unwrap()))
        });
        assert_eq!(w.manager, Manager::Runc);
        assert_eq!(w.pid, Some(40));
        // Not at the container's cgroup (an ancestor slice's program): no.
        let w = work_out("", "/system.slice", "t", &c, None, || {
            Some((Manager::Runc, process(40, "containerd-shim").unwrap()))
        });
        assert_eq!(w.manager, Manager::Unknown);
    }

    #[test]
    fn systemds_name_counts_when_nothing_holds_it() {
        let c = docker("ab");
        let w = work_out("sd_devices", &c.cgroup, "t", &c, None, || None);
        assert_eq!(w.manager, Manager::Systemd);
        assert_eq!(w.pid, None);
    }
}
