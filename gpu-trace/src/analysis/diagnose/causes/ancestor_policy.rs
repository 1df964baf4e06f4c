//! `ancestor-policy`: the program that denied it sits above the
//! container's own cgroup (a slice, a parent scope, a user's delegated
//! tree), and a rule at the container cannot widen it.

use super::prelude::*;
use crate::{host::systemd_units::unit_of_cgroup, model::policy_writer::Manager};

pub(super) fn find(facts: &Facts, _: &Context) -> Option<Finding> {
    if !facts.denied_by_policy() {
        return None;
    }
    let (attached_at, writer) = facts.culprit_program()?;
    let container = facts.container();
    if !is_strict_ancestor(attached_at, &container.cgroup) {
        return None;
    }
    let fix = match unit_of_cgroup(attached_at) {
        Some(unit) if writer == Some(Manager::Systemd) => {
            let unit_word = command_word(unit, CONTAINER);
            // One node of many by its path: the driver's name would allow
            // every node of the major to every unit below.
            let entry = match facts.denied_minor() {
                Some(_) => plain_or(&facts.host_node_path(), NODE_PATH).to_string(),
                None => format!("char-{}", plain_or(facts.driver_name(), "DRIVER")),
            };
            vec![
                format!(
                    "allow it in {unit_word}, whose policy every unit below it inherits: `systemctl set-property {unit_word} DeviceAllow='{entry} rw'`"
                ),
                format!("or run {} outside {unit_word}", facts.label()),
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
    Some(Finding {
        explanation: format!(
            "{} denies {}: it sits at {}, above {}'s own cgroup {}, and governs everything below it",
            facts.policy_text(),
            facts.device_text(),
            prose(attached_at),
            facts.label(),
            prose(&container.cgroup)
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

#[cfg(test)]
mod tests {
    use super::is_strict_ancestor;
    use crate::{analysis::diagnose::testing::*, model::policy_writer::Manager};

    #[test]
    fn a_slices_program_is_an_ancestor_policy() {
        let mut r = denied("/gpu.slice/job.scope", "/dev/nvidia-uvm", 509, 0);
        r.denied_by = Some(by_program("/gpu.slice", Manager::Systemd));
        let diag = diagnosis_naming(&r, Cause::AncestorPolicy);
        assert_has(&diag.explanation, "it sits at /gpu.slice, above");
        assert_has(
            &diag.hint,
            "`systemctl set-property gpu.slice DeviceAllow='char-nvidia-uvm rw'`",
        );
        // At the container's own cgroup: not an ancestor.
        r.denied_by = Some(by_program("/gpu.slice/job.scope", Manager::Systemd));
        assert_ne!(diagnosis_of(&r).cause, Cause::AncestorPolicy);
        assert!(is_strict_ancestor("/", "/a"));
        assert!(!is_strict_ancestor("/a", "/ab"));
    }
}
