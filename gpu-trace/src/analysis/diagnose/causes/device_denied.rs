//! `device-denied`: a device policy denied it, and no cause before this
//! one in the table fits.

use super::prelude::*;

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
    use crate::{analysis::diagnose::testing::*, scenario::pasted::assert_paste_safe};

    #[test]
    fn a_denied_frontend_node_is_allowed_by_its_path_not_by_the_drivers_name() {
        // A rule by name (char-nvidia, char-nvidia-frontend before driver
        // 550) would allow every GPU of the node.
        for driver in ["nvidia", "nvidia-frontend"] {
            let mut r = denied("/system.slice/cuda-job.service", "/dev/nvidiactl", 195, 255);
            r.driver = Some(driver.into());
            let diag = diagnosis_naming(&r, Cause::DeviceDenied);
            assert_has(&diag.hint, "`DeviceAllow=/dev/nvidiactl rw`");
            assert!(!diag.hint.contains("char-"), "{}", diag.hint);
        }
    }

    #[test]
    fn hostile_paths_never_reach_a_fix_for_one_node_of_many() {
        for name in HOSTILE {
            // A render node opened through a path the tenant chose: the
            // fix names the host's link for the numbers the kernel saw.
            let path = format!("/tmp/{name}/card");
            let mut drm = denied(DOCKER_CGROUPFS, &path, 226, 0);
            drm.node = None;
            let diag = diagnosis_of(&drm);
            assert_has(&diag.hint, "`--device /dev/char/226:0`");
            assert!(!diag.hint.contains(name), "{}", diag.hint);
            // A single-purpose major: the path opened, as a literal word.
            let path = format!("/tmp/{name}/accel");
            let mut other = denied(DOCKER_CGROUPFS, &path, 240, 0);
            other.node = None;
            let diag = diagnosis_of(&other);
            assert_has(&diag.hint, "--device");
            assert_paste_safe(&diag.hint, &path);
        }
    }
}
