//! NVIDIA's container runtime configuration: whether its hook was told not
//! to add the GPUs to a container's device rules (`no-cgroups = true` under
//! `[nvidia-container-cli]`), which on a rootful runtime leaves every GPU
//! denied unless the devices are passed some other way.

use std::{fs, path::PathBuf};

/// Overrides where the configuration is read from (tests, other layouts).
pub const CONFIG_ENV: &str = "GPU_TRACE_NVIDIA_RUNTIME_CONFIG";
const DEFAULT_CONFIG: &str = "/etc/nvidia-container-runtime/config.toml";

/// The configuration file, when it says `no-cgroups = true`.
pub fn no_cgroups_config() -> Option<PathBuf> {
    let path = std::env::var_os(CONFIG_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| DEFAULT_CONFIG.into());
    let text = fs::read_to_string(&path).ok()?;
    says_no_cgroups(&text).then_some(path)
}

fn says_no_cgroups(text: &str) -> bool {
    let Ok(table) = text.parse::<toml::Table>() else {
        return false;
    };
    table
        .get("nvidia-container-cli")
        .and_then(|cli| cli.get("no-cgroups"))
        .and_then(toml::Value::as_bool)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_no_cgroups_from_the_cli_section() {
        assert!(says_no_cgroups(
            "disable-require = false\n[nvidia-container-cli]\nldconfig = \"@/sbin/ldconfig\"\nno-cgroups = true\n"
        ));
        assert!(!says_no_cgroups(
            "[nvidia-container-cli]\nno-cgroups = false\n"
        ));
        assert!(!says_no_cgroups(
            "#no-cgroups = true\n[nvidia-container-cli]\n"
        ));
        assert!(!says_no_cgroups("no-cgroups = true\n"));
        assert!(!says_no_cgroups("not [toml"));
    }
}
