//! `device-allow-name-unresolved`: systemd's program denied it, and the
//! unit's DeviceAllow= names a char driver /proc/devices does not list, so
//! systemd left that rule out (NVIDIA's driver 550 renamed nvidia-frontend
//! to nvidia).

use super::prelude::*;
use crate::{
    host::systemd_units::{char_names, glob_matches, unit_of_cgroup},
    model::policy_writer::Manager,
};

pub(super) fn find(facts: &Facts, cx: &Context) -> Option<Finding> {
    if !facts.denied_by_policy() {
        return None;
    }
    let (attached_at, Some(Manager::Systemd)) = facts.culprit_program()? else {
        return None;
    };
    let unit = unit_of_cgroup(attached_at)?;
    let entries = facts.device_allow.as_deref()?;
    // A rule that names the denied device's driver today means the name
    // is not why it was denied.
    let driver_today = facts.driver.as_deref();
    if char_names(entries).any(|name| driver_today.is_some_and(|d| glob_matches(name, d))) {
        return None;
    }
    let missing: Vec<&str> = char_names(entries)
        .filter(|name| {
            !cx.majors
                .iter()
                .any(|(_, driver)| glob_matches(name, driver))
        })
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
    let mut fix = vec![format!(
        "in {unit_word}: `DeviceAllow=char-{} rw`, the name /proc/devices lists today for major {} (`systemctl edit {unit_word}`, then restart it)",
        plain_or(facts.driver_name(), "DRIVER"),
        facts.major
    )];
    if let Some(node) = facts.node {
        fix.push(format!(
            "or name the node: `DeviceAllow={} rw`",
            node.dev_path()
        ));
    }
    Some(Finding {
        explanation: format!(
            "{} denies {}: {}'s DeviceAllow= names {listed}, which /proc/devices does not list today, so systemd left that rule out (NVIDIA's driver 550 renamed nvidia-frontend to nvidia)",
            facts.policy_text(),
            facts.device_text(),
            prose(unit)
        ),
        fix,
    })
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use crate::{analysis::diagnose::testing::*, model::policy_writer::Manager};

    #[test]
    fn a_device_allow_name_no_driver_has_is_named_with_todays_name() {
        let mut r = denied("/system.slice/cuda-job.service", "/dev/nvidiactl", 195, 255);
        r.driver = Some("nvidia".into());
        r.denied_by = Some(by_program(
            "/system.slice/cuda-job.service",
            Manager::Systemd,
        ));
        // Driver 550: major 195 is "nvidia" now.
        let majors = CharMajors::parse("Character devices:\n195 nvidia\n511 nvidia-uvm\n");
        let cause_with = |rules: &[&str]| {
            let rules: Rc<[String]> = rules.iter().map(|r| r.to_string()).collect();
            Diagnoser::default()
                .diagnose(&r, &majors, 0, None, Some(&rules))
                .expect("diagnosis")
        };
        let diag = cause_with(&["char-nvidia-frontend rw", "char-nvidia-uvm rw"]);
        assert_eq!(diag.cause, Cause::DeviceAllowNameUnresolved);
        assert_has(
            &diag.explanation,
            "names char-nvidia-frontend, which /proc/devices does not list today",
        );
        assert_has(&diag.hint, "`DeviceAllow=char-nvidia rw`");
        // Today's name listed beside the old one (for portability), or a
        // glob that covers it: the name is not why it was denied.
        for rules in [
            &["char-nvidia-frontend rw", "char-nvidia rw"][..],
            &["char-nvidia* rw"],
        ] {
            assert_ne!(
                cause_with(rules).cause,
                Cause::DeviceAllowNameUnresolved,
                "{rules:?}"
            );
        }
        // Every name resolves: not this cause.
        assert_ne!(
            cause_with(&["char-nvidia rw"]).cause,
            Cause::DeviceAllowNameUnresolved
        );
    }
}
