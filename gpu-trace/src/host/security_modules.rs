//! Which security module may have refused a process an open after the
//! device check allowed it: SELinux (enforcing, with the process's
//! context) or AppArmor (the process's profile, when it is confined).

use std::fs;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecurityModule {
    /// SELinux in enforcing mode, with the process's context when known.
    SeLinux { context: Option<String> },
    /// An AppArmor profile in enforce mode, e.g. "docker-default".
    AppArmor { profile: String },
}

/// The module that confines process `pid`, if one does.
pub fn security_module_of(pid: u32) -> Option<SecurityModule> {
    let read = |path: String| fs::read_to_string(path).ok();
    if read("/sys/fs/selinux/enforce".into()).is_some_and(|v| v.trim() == "1") {
        return Some(SecurityModule::SeLinux {
            context: read(format!("/proc/{pid}/attr/current"))
                .map(|c| c.trim_end_matches(['\0', '\n']).to_string()),
        });
    }
    // Kernels since 5.1 give AppArmor its own attr directory.
    let label = read(format!("/proc/{pid}/attr/apparmor/current"))
        .or_else(|| read(format!("/proc/{pid}/attr/current")))?;
    apparmor_profile(&label).map(|profile| SecurityModule::AppArmor { profile })
}

/// "docker-default (enforce)" -> docker-default; unconfined and complain
/// mode refuse nothing.
fn apparmor_profile(label: &str) -> Option<String> {
    let label = label.trim_end_matches(['\0', '\n']).trim();
    let profile = label.strip_suffix(" (enforce)")?;
    Some(profile.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_enforcing_apparmor_profiles_count() {
        assert_eq!(
            apparmor_profile("docker-default (enforce)\n"),
            Some("docker-default".into())
        );
        assert_eq!(apparmor_profile("unconfined\n"), None);
        assert_eq!(apparmor_profile("lxc-container-default (complain)"), None);
    }
}
