//! `no-cgroups-hook`: an engine's own program denied an NVIDIA node, and
//! NVIDIA's runtime configuration says `no-cgroups = true`: its hook never
//! added the GPUs to the container's rules (right for rootless podman, not
//! for a rootful runtime, which has a program of its own here).

use super::prelude::*;
use crate::runtime;

pub(super) fn find(facts: &Facts, cx: &Context) -> Option<Finding> {
    if !facts.denied_by_policy() {
        return None;
    }
    // NVIDIA's nodes only: its hook adds no other.
    facts.node?;
    let container = facts.container();
    let engine = runtime::of(container.runtime).engine().is_some();
    let (attached_at, _) = facts.culprit_program()?;
    if !engine || !attached_at.starts_with(&container.cgroup) {
        return None;
    }
    let config = (cx.host.no_cgroups_config)()?;
    let shown = config.display().to_string();
    let mut fix = vec![format!(
        "set `no-cgroups = false` under [nvidia-container-cli] in {} (rootful runtimes), then recreate the container",
        prose(&shown)
    )];
    fix.extend(facts.allow_denied());
    Some(Finding {
        explanation: format!(
            "{} denies {}: {} says `no-cgroups = true`, so NVIDIA's hook added no GPU to the container's device rules",
            facts.policy_text(),
            facts.device_text(),
            prose(&shown)
        ),
        fix,
    })
}

#[cfg(test)]
mod tests {
    use crate::{analysis::diagnose::testing::*, model::policy_writer::Manager};

    #[test]
    fn a_runtime_config_with_no_cgroups_is_named() {
        let mut r = denied(DOCKER_SCOPE, "/dev/nvidia0", 195, 0);
        r.denied_by = Some(by_program(DOCKER_SCOPE, Manager::Runc));
        let mut d = Diagnoser::default();
        d.host.no_cgroups_config = || Some("/etc/nvidia-container-runtime/config.toml".into());
        let diag = diagnosed_as(&mut d, &r, Cause::NoCgroupsHook);
        assert_starts(&diag.hint, "set `no-cgroups = false` under [nvidia-container-cli] in /etc/nvidia-container-runtime/config.toml");
        let mut d = Diagnoser::default();
        d.host.no_cgroups_config = || None;
        assert_ne!(
            diagnose(&mut d, &r).expect("diagnosis").cause,
            Cause::NoCgroupsHook
        );
    }
}
