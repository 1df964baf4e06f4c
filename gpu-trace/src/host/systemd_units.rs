//! What systemd says of a unit: its `DeviceAllow=` list, as `systemctl show`
//! prints it. Asked only about units whose device program systemd holds.

use std::{
    io::Read,
    process::{Command, Stdio},
    thread,
    time::{Duration, Instant},
};

/// `systemctl` may wait on a busy systemd; an answer later than this is
/// not worth holding up the event stream for.
const ANSWER_WITHIN: Duration = Duration::from_secs(1);

/// The unit's DeviceAllow= entries ("char-nvidia-frontend rw", "/dev/null rw");
/// None when systemctl is missing, fails or is slow.
pub fn device_allow_of(unit: &str) -> Option<Vec<String>> {
    let mut child = Command::new("systemctl")
        .args(["show", "--property=DeviceAllow", "--value", "--"])
        .arg(unit)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    // Read as it comes: a child blocked on a full pipe would never exit.
    let mut stdout = child.stdout.take()?;
    let reader = thread::spawn(move || {
        let mut out = String::new();
        stdout.read_to_string(&mut out).map(|_| out)
    });
    let deadline = Instant::now() + ANSWER_WITHIN;
    let status = loop {
        match child.try_wait().ok()? {
            Some(status) => break status,
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            None => thread::sleep(Duration::from_millis(5)),
        }
    };
    let out = reader.join().ok()?.ok()?;
    status.success().then(|| parse_device_allow(&out))
}

/// Whether `name` matches systemd's `char-` pattern `pattern` (`*`, `?`).
pub fn glob_matches(pattern: &str, name: &str) -> bool {
    fn matches(p: &[u8], n: &[u8]) -> bool {
        match (p.first(), n.first()) {
            (None, None) => true,
            (Some(b'*'), _) => matches(&p[1..], n) || (!n.is_empty() && matches(p, &n[1..])),
            (Some(b'?'), Some(_)) => matches(&p[1..], &n[1..]),
            (Some(a), Some(b)) if a == b => matches(&p[1..], &n[1..]),
            _ => false,
        }
    }
    matches(pattern.as_bytes(), name.as_bytes())
}

/// systemd prints the list on one line, entries separated by ", ":
/// "char-nvidia-frontend rw, /dev/null rw".
fn parse_device_allow(text: &str) -> Vec<String> {
    text.split([',', '\n'])
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(str::to_string)
        .collect()
}

/// The driver names of the `char-NAME` entries.
pub fn char_names(entries: &[String]) -> impl Iterator<Item = &str> {
    entries.iter().filter_map(|e| {
        e.split_whitespace()
            .next()?
            .strip_prefix("char-")
            .filter(|n| !n.is_empty())
    })
}

/// The unit a cgroup path ends in ("/system.slice/x.service" -> "x.service").
pub fn unit_of_cgroup(cgroup: &str) -> Option<&str> {
    let last = cgroup.rsplit('/').next()?;
    [".service", ".scope", ".slice"]
        .iter()
        .any(|suffix| last.ends_with(suffix) && last.len() > suffix.len())
        .then_some(last)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_systemctls_device_allow_line() {
        let entries = parse_device_allow("char-nvidia-frontend rw, /dev/null rw, char-pts rwm\n");
        assert_eq!(
            entries,
            ["char-nvidia-frontend rw", "/dev/null rw", "char-pts rwm"]
        );
        assert_eq!(
            char_names(&entries).collect::<Vec<_>>(),
            ["nvidia-frontend", "pts"]
        );
        assert!(parse_device_allow("\n").is_empty());
    }

    #[test]
    fn char_names_match_as_globs() {
        assert!(glob_matches("nvidia*", "nvidia-uvm"));
        assert!(glob_matches("nvidia", "nvidia"));
        assert!(!glob_matches("nvidia-frontend", "nvidia"));
        assert!(glob_matches("nvidia-?vm", "nvidia-uvm"));
        assert!(!glob_matches("nv*x", "nvidia"));
    }

    #[test]
    fn units_end_cgroup_paths() {
        assert_eq!(
            unit_of_cgroup("/system.slice/docker-ab.scope"),
            Some("docker-ab.scope")
        );
        assert_eq!(unit_of_cgroup("/gpu.slice"), Some("gpu.slice"));
        assert_eq!(unit_of_cgroup("/lxc/200"), None);
        assert_eq!(unit_of_cgroup("/x/.service"), None);
    }
}
