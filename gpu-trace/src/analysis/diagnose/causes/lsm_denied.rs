//! `lsm-denied`: the device check allowed it and the open still got
//! EACCES: SELinux or AppArmor, which check after it.

use super::prelude::*;
use crate::host::security_modules::SecurityModule;

pub(super) fn find(facts: &Facts, cx: &Context) -> Option<Finding> {
    if facts.verdict != Verdict::DeniedAfterDeviceCheck {
        return None;
    }
    let path = facts.path_text();
    let (who, fix) = match facts.process.and_then(cx.host.security_module) {
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
    Some(Finding {
        explanation: format!(
            "the device policy allowed {} for {}, but the open got EACCES after it: {who} refused it",
            facts.device_text(),
            facts.label()
        ),
        fix,
    })
}

#[cfg(test)]
mod tests {
    use crate::{analysis::diagnose::testing::*, host::security_modules::SecurityModule};

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
        let diag = diagnosed_as(&mut d, &r, Cause::LsmDenied);
        assert_has(&diag.explanation, "profile gpu-jobs, enforce mode");
        assert_starts(
            &diag.hint,
            "allow the node in profile gpu-jobs: `/dev/nvidia-uvm rw,`",
        );
        let mut d = Diagnoser::default();
        d.host.security_module = |_| Some(SecurityModule::SeLinux { context: None });
        let diag = diagnose(&mut d, &r).expect("diagnosis");
        assert_has(&diag.hint, "setsebool -P container_use_devices 1");
    }
}
