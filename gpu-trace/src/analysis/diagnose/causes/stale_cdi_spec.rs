//! `stale-cdi-spec`: the node the process opened was injected from a CDI
//! spec that no longer matches the host (it predates the driver).

use super::prelude::*;
use crate::analysis::diagnose::causes::stale_major::stale_node_opened;

pub(super) fn find(facts: &Facts, cx: &Context) -> Option<Finding> {
    // Allowed, only when the node turned out stale (ENXIO).
    let fits = facts.denied_by_policy()
        || (facts.verdict == Verdict::Allowed && stale_node_opened(facts, cx).is_some());
    if !fits {
        return None;
    }
    let path = facts.path.as_deref()?;
    let entries = cx.host.stale_cdi_entries(cx.majors);
    let entry = entries.iter().find(|e| e.path.as_bytes() == path)?;
    Some(Finding {
        explanation: format!(
            "{} was injected from CDI spec {} ({}), which no longer matches the host: {}",
            prose(&entry.path),
            prose(&entry.file),
            prose(&entry.device),
            entry.problem
        ),
        fix: vec![
            entry.fix.clone(),
            format!("then recreate {}", facts.label()),
        ],
    })
}

#[cfg(test)]
mod tests {
    use crate::analysis::{cdi_check::StaleCdiEntry, diagnose::testing::*};

    #[test]
    fn a_node_from_a_stale_cdi_spec_names_the_spec() {
        let r = denied(DOCKER_SCOPE, "/dev/nvidia-uvm", 509, 0);
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
        let diag = diagnosed_as(&mut d, &r, Cause::StaleCdiSpec);
        assert_has(
            &diag.explanation,
            "injected from CDI spec /etc/cdi/nvidia.yaml (nvidia.com/gpu=all)",
        );
        assert!(
            diag.hint
                .starts_with("regenerate it: `nvidia-ctk cdi generate"),
            "{}",
            diag.hint
        );
    }
}
