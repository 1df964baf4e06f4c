//! `rules-rewritten`: the device rules of a running container were
//! rewritten. Known two ways: the cgroup opened the device earlier in this
//! trace, or the denying program was written after its first process started.

use super::prelude::*;
use crate::{
    analysis::policy_age::{duration_text, seconds_after_start},
    model::{denied_by::DeniedBy, policy_writer::PropertiesSet},
    runtime::{self, Engine},
};

pub(super) fn find(facts: &Facts, cx: &Context) -> Option<Finding> {
    if !facts.denied_by_policy() {
        return None;
    }
    let what = if cx.opened_before {
        format!(
            "{} opened {} earlier in this trace and is now denied",
            facts.label(),
            facts.device_text()
        )
    } else {
        let (seconds, pid) = written_after_start(facts)?;
        format!(
            "{} was written {} after the cgroup's first process (pid {pid}) started, and denies {}",
            facts.policy_text(),
            duration_text(seconds),
            facts.device_text()
        )
    };
    let fix = facts.keep_denied_rules();
    let how = match trigger(facts) {
        Some(set) => format!(
            "when {} of {} {} set at {} (drop-ins in {}): setting a unit's properties makes systemd apply its device rules again, as {} does",
            set.properties.join(", "),
            set.unit,
            if set.properties.len() == 1 { "was" } else { "were" },
            set.set_at,
            set.drop_ins,
            runtime::of(facts.container().runtime)
                .engine()
                .map_or("`systemctl set-property`", Engine::resource_update),
        ),
        None => "as `systemctl daemon-reload` does to containers whose devices were not passed as device specs, or an update of their resources: `docker update`, the kubelet's UpdateContainerResources from its CPU manager or an in-place resize".to_string(),
    };
    Some(Finding {
        explanation: format!("{what}: its device rules were rewritten while it ran ({how})"),
        fix,
    })
}

/// The unit's properties set as the denying program was loaded, where
/// systemd's drop-ins say so.
fn trigger(facts: &Facts) -> Option<&PropertiesSet> {
    match facts.culprit()? {
        DeniedBy::Program {
            writer: Some(writer),
            ..
        } => writer.trigger.as_deref(),
        _ => None,
    }
}

/// When the program that denied it was loaded past the start's grace after
/// the cgroup's first process: the delay and that process.
fn written_after_start(facts: &Facts) -> Option<(u64, u32)> {
    let first = facts.started?;
    match facts.culprit()? {
        DeniedBy::Program { loaded_boot_ns, .. } => {
            Some((seconds_after_start(*loaded_boot_ns, first)?, first.pid))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use crate::{
        analysis::{diagnose::testing::*, test_support::PROC_DEVICES},
        cgroup::first_process::FirstProcess,
        model::{
            denied_by::DeniedBy,
            policy_writer::{Manager, PropertiesSet},
            rendered::Rendered,
        },
    };

    #[test]
    fn a_policy_written_after_the_cgroup_started_is_a_rewrite_without_history() {
        let mut r = denied(DOCKER_SCOPE, "/dev/nvidia0", 195, 0);
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
        let majors = CharMajors::parse(PROC_DEVICES);
        r.denied_by = Some(Rc::new(Rendered::new(program(200))));
        let diag = Diagnoser::default()
            .diagnose(&r, &majors, 0, Some(started), None)
            .expect("diagnosis");
        assert_eq!(diag.cause, Cause::RulesRewritten);
        assert_has(
            &diag.explanation,
            "was written 3 min 12 s after the cgroup's first process (pid 8812) started, and denies nvidia0 (c 195:0)",
        );
        assert_has(&diag.hint, "create-dev-char-symlinks");
        // Loaded with the start (within the grace): not a rewrite.
        r.denied_by = Some(Rc::new(Rendered::new(program(9))));
        let diag = Diagnoser::default()
            .diagnose(&r, &majors, 0, Some(started), None)
            .expect("diagnosis");
        assert_ne!(diag.cause, Cause::RulesRewritten);
    }

    #[test]
    fn properties_set_as_the_program_was_loaded_are_named_as_the_trigger() {
        let mut d = Diagnoser::default();
        let allowed = record(KUBEPODS_SCOPE, "/dev/nvidia0", 195, 0, Verdict::Allowed, 3);
        assert!(diagnose(&mut d, &allowed).is_none());
        let mut denied = denied(KUBEPODS_SCOPE, "/dev/nvidia0", 195, 0);
        let mut culprit = (**by_program(KUBEPODS_SCOPE, Manager::Systemd)).clone();
        if let DeniedBy::Program {
            writer: Some(writer),
            ..
        } = &mut culprit
        {
            writer.trigger = Some(Box::new(PropertiesSet {
                unit: "cri-containerd-3f2a.scope".into(),
                properties: vec!["AllowedCPUs".into(), "CPUWeight".into()],
                set_at: "2026-11-30T06:00:00Z".into(),
                drop_ins: "/run/systemd/transient/cri-containerd-3f2a.scope.d".into(),
            }));
        }
        denied.denied_by = Some(Rc::new(Rendered::new(culprit)));
        let diag = diagnosed_as(&mut d, &denied, Cause::RulesRewritten);
        assert_has(
            &diag.explanation,
            "its device rules were rewritten while it ran (when AllowedCPUs, CPUWeight of cri-containerd-3f2a.scope were set at 2026-11-30T06:00:00Z (drop-ins in /run/systemd/transient/cri-containerd-3f2a.scope.d): setting a unit's properties makes systemd apply its device rules again, as the CRI's UpdateContainerResources (the kubelet's CPU manager, an in-place resize) through the runtime's shim and runc does)",
        );
        assert!(
            !diag.explanation.contains("daemon-reload"),
            "{}",
            diag.explanation
        );
    }

    #[test]
    fn allowed_then_denied_means_rules_were_rewritten() {
        let mut d = Diagnoser::default();
        let allowed = record(DOCKER_SCOPE, "/dev/nvidia0", 195, 0, Verdict::Allowed, 3);
        assert!(diagnose(&mut d, &allowed).is_none());
        let denied = denied(DOCKER_SCOPE, "/dev/nvidia0", 195, 0);
        let diag = diagnosed_as(&mut d, &denied, Cause::RulesRewritten);
        assert_has(&diag.hint, "create-dev-char-symlinks");
    }

    #[test]
    fn a_pods_rewrite_asks_the_device_plugin_for_device_specs_not_a_hand_edit() {
        let mut d = Diagnoser::default();
        let allowed = record(KUBEPODS_SCOPE, "/dev/nvidia0", 195, 0, Verdict::Allowed, 3);
        assert!(diagnose(&mut d, &allowed).is_none());
        let denied = denied(KUBEPODS_SCOPE, "/dev/nvidia0", 195, 0);
        let diag = diagnosed_as(&mut d, &denied, Cause::RulesRewritten);
        assert_has(&diag.explanation, "UpdateContainerResources");
        assert_starts(
            &diag.hint,
            "have the device plugin pass the GPUs as device specs so that an update of the pod's resources keeps them: NVIDIA's with `PASS_DEVICE_SPECS=true`",
        );
        assert_has(&diag.hint, "`cgroupDriver: cgroupfs`");
        assert!(!diag.hint.contains("--device"), "{}", diag.hint);
        assert!(!diag.hint.contains("195:*"), "{}", diag.hint);
    }
}
