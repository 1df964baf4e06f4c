//! systemd units (`NAME.service`) of the host: their device policy is the
//! unit's DeviceAllow=.

use crate::{
    model::container::{Container, Runtime},
    runtime::{ContainerRuntime, DeviceToAllow, NameSources, PathStep, CONTAINER, NODE_PATH},
    text::shell_word::{command_word, plain_or, prose},
};

pub struct Systemd;

impl ContainerRuntime for Systemd {
    fn runtime(&self) -> Runtime {
        Runtime::Systemd
    }

    fn recognise(&self, step: &PathStep) -> Option<String> {
        step.component
            .strip_suffix(".service")
            .map(|unit| format!("{unit}.service"))
    }

    /// A service inside an LXC container belongs to that container.
    fn is_host_unit(&self) -> bool {
        true
    }

    fn name(&self, id: &str, _: &NameSources) -> Option<String> {
        Some(unescape_unit(id))
    }

    fn label(&self, id: &str) -> String {
        format!("{} {id}", self.runtime().label())
    }

    fn allow_device(&self, container: &Container, device: &DeviceToAllow) -> Vec<String> {
        // One node of many: by its path, not by the driver's name, which
        // would allow every node of the major.
        let rule = match device.minor {
            Some(_) => format!("`DeviceAllow={} rw`", plain_or(device.path, NODE_PATH)),
            None => format!(
                "`DeviceAllow=char-{} rw` (follows the driver's major)",
                plain_or(device.driver, "DRIVER")
            ),
        };
        vec![format!(
            "in {}: {rule} (`systemctl edit {}`)",
            prose(&container.id),
            command_word(&container.id, CONTAINER)
        )]
    }

    fn keep_rules(&self, container: &Container, device: &DeviceToAllow) -> Vec<String> {
        let rule = match device.minor {
            Some(_) => format!(
                "DeviceAllow={} rw (the unit's own rule survives reloads)",
                plain_or(device.path, NODE_PATH)
            ),
            None => format!(
                "DeviceAllow=char-{} rw (a rule by driver name survives reloads and new majors)",
                plain_or(device.driver, "DRIVER")
            ),
        };
        vec![format!("in {}: {rule}", prose(&container.id))]
    }
}

/// systemd's unit-name escaping: "\x2d" -> "-".
pub fn unescape_unit(name: &str) -> String {
    let mut out = Vec::with_capacity(name.len());
    let bytes = name.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let escaped = bytes
            .get(i..i + 4)
            .filter(|b| b[0] == b'\\' && b[1] == b'x');
        match escaped
            .and_then(|b| std::str::from_utf8(&b[2..4]).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::unescape_unit;

    #[test]
    fn unit_names_are_unescaped() {
        assert_eq!(
            unescape_unit("jupyter\\x2dlab.service"),
            "jupyter-lab.service"
        );
        assert_eq!(
            unescape_unit("a\\x2"),
            "a\\x2",
            "a cut escape stays as it is"
        );
    }
}
