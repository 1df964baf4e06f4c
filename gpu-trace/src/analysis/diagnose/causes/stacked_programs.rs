//! `stacked-programs`: another program in force allows what the culprit
//! denies. Every program on the path must allow an access (crun's program
//! beside systemd's, a hook that patched only one of them).

use super::prelude::*;
use crate::model::{denied_by::DeniedBy, policy_writer::Manager};

pub(super) fn find(facts: &Facts, _: &Context) -> Option<Finding> {
    if !facts.denied_by_policy() {
        return None;
    }
    let DeniedBy::Program {
        allowed_by, writer, ..
    } = facts.culprit()?
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
    let mut fix = vec![format!(
        "make the denying program allow it too{writer}: a rule added to one program alone is not enough"
    )];
    fix.extend(facts.allow_denied());
    Some(Finding {
        explanation: format!(
            "{} denies {}, while prog {}{allowing_name} at {} allows it: every device program in force must allow an access, so the one that denies decides",
            facts.policy_text(),
            facts.device_text(),
            allowing.id,
            prose(&allowing.attached_at),
        ),
        fix,
    })
}

#[cfg(test)]
mod tests {
    use std::rc::Rc;

    use crate::{
        analysis::diagnose::testing::*,
        model::{
            denied_by::{AllowingProgram, DeniedBy},
            policy_writer::Manager,
            rendered::Rendered,
        },
    };

    #[test]
    fn a_second_program_that_allows_makes_it_stacked() {
        let mut r = denied(
            "/machine.slice/libpod-ab.scope/container",
            "/dev/nvidia-uvm",
            509,
            0,
        );
        let mut culprit =
            (**by_program("/machine.slice/libpod-ab.scope/container", Manager::Crun)).clone();
        if let DeniedBy::Program { allowed_by, .. } = &mut culprit {
            allowed_by.push(AllowingProgram {
                id: 12,
                name: "hook".into(),
                attached_at: "/machine.slice/libpod-ab.scope".into(),
            });
        }
        r.denied_by = Some(Rc::new(Rendered::new(culprit)));
        let diag = diagnosis_naming(&r, Cause::StackedPrograms);
        assert_has(
            &diag.explanation,
            "while prog 12 (hook) at /machine.slice/libpod-ab.scope allows it",
        );
        assert_starts(
            &diag.hint,
            "make the denying program allow it too (written by crun)",
        );
    }
}
