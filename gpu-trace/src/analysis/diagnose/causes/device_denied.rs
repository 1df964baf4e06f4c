//! `device-denied`: a device policy denied it, and no cause before this
//! one in the table fits.

use crate::analysis::diagnose::{
    facts::{Context, Facts},
    phrasing::Finding,
};

pub(super) fn find(facts: &Facts, _: &Context) -> Option<Finding> {
    if !facts.denied_by_policy() {
        return None;
    }
    Some(Finding {
        explanation: format!("{} denies {}", facts.policy_text(), facts.device_text()),
        fix: facts.allow_denied(),
    })
}

#[cfg(test)]
mod tests {
    use crate::{
        analysis::diagnose::testing::{assert_has, denied, diagnosis_of, HOSTILE},
        model::diagnosis::Cause,
        scenario::pasted::assert_paste_safe,
    };

    #[test]
    fn a_denied_frontend_node_is_allowed_by_its_path_not_by_the_drivers_name() {
        // A rule by name (char-nvidia, char-nvidia-frontend before driver
        // 550) would allow every GPU of the node.
        for driver in ["nvidia", "nvidia-frontend"] {
            let mut r = denied("/system.slice/cuda-job.service", "/dev/nvidiactl", 195, 255);
            r.driver = Some(driver.into());
            let diag = diagnosis_of(&r);
            assert_eq!(diag.cause, Cause::DeviceDenied);
            assert_has(&diag.hint, "`DeviceAllow=/dev/nvidiactl rw`");
            assert!(!diag.hint.contains("char-"), "{}", diag.hint);
        }
    }

    #[test]
    fn hostile_paths_reach_the_device_hint_as_literal_words() {
        for name in HOSTILE {
            // A device with no NVIDIA node: the --device hint names the path.
            let path = format!("/tmp/{name}/card");
            let mut other = denied(
                "/docker/3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8",
                &path,
                226,
                0,
            );
            other.node = None;
            let diag = diagnosis_of(&other);
            assert_has(&diag.hint, "--device");
            assert_paste_safe(&diag.hint, &path);
        }
    }
}
