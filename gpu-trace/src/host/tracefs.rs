//! tracefs, where the kernel lists the tracepoint ids that attaching needs.

use std::path::Path;

use anyhow::Context;
use nix::mount::{mount, MsFlags};

const TRACEFS: &str = "/sys/kernel/tracing";
const DEBUGFS_TRACING: &str = "/sys/kernel/debug/tracing";

fn has_events(dir: &str) -> bool {
    Path::new(dir).join("events").is_dir()
}

/// Mounts tracefs at /sys/kernel/tracing when neither usual place has it, as
/// most distributions do at boot. It stays mounted: another tracer may rely
/// on it by the time this one exits. Returns a note when it mounted it.
pub fn ensure_mounted() -> anyhow::Result<Option<String>> {
    if has_events(TRACEFS) || has_events(DEBUGFS_TRACING) {
        return Ok(None);
    }
    mount(
        Some("tracefs"),
        TRACEFS,
        Some("tracefs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        None::<&str>,
    )
    .with_context(|| format!("mounting tracefs at {TRACEFS} (needed to attach tracepoints)"))?;
    Ok(Some(format!("tracefs mounted at {TRACEFS}")))
}

/// The byte offset of `field` in a tracepoint's record, from its format file.
pub fn field_offset(category: &str, event: &str, field: &str) -> anyhow::Result<u32> {
    let dir = [TRACEFS, DEBUGFS_TRACING]
        .into_iter()
        .find(|d| has_events(d))
        .context("tracefs is not mounted")?;
    let path = Path::new(dir)
        .join("events")
        .join(category)
        .join(event)
        .join("format");
    let format =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    offset_in_format(&format, field)
        .with_context(|| format!("no field {field} in {}", path.display()))
}

/// Parses "field:pid_t child_pid;\toffset:20;\tsize:4;..." lines.
fn offset_in_format(format: &str, field: &str) -> Option<u32> {
    format.lines().find_map(|line| {
        let (declaration, rest) = line.trim().strip_prefix("field:")?.split_once(';')?;
        let name = declaration.split_whitespace().last()?;
        if name != field {
            return None;
        }
        rest.trim()
            .strip_prefix("offset:")?
            .split(';')
            .next()?
            .parse()
            .ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_child_pid_in_old_and_new_fork_formats() {
        // Kernels before 6.x: fixed-size comm arrays.
        let old = "\tfield:char parent_comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\tfield:pid_t parent_pid;\toffset:24;\tsize:4;\tsigned:1;\n\tfield:char child_comm[16];\toffset:28;\tsize:16;\tsigned:0;\n\tfield:pid_t child_pid;\toffset:44;\tsize:4;\tsigned:1;\n";
        // Newer kernels: __data_loc strings.
        let new = "\tfield:__data_loc char[] parent_comm;\toffset:8;\tsize:4;\tsigned:0;\n\tfield:pid_t parent_pid;\toffset:12;\tsize:4;\tsigned:1;\n\tfield:__data_loc char[] child_comm;\toffset:16;\tsize:4;\tsigned:0;\n\tfield:pid_t child_pid;\toffset:20;\tsize:4;\tsigned:1;\n";
        assert_eq!(offset_in_format(old, "child_pid"), Some(44));
        assert_eq!(offset_in_format(new, "child_pid"), Some(20));
        assert_eq!(offset_in_format(new, "parent_pid"), Some(12));
        assert_eq!(offset_in_format(new, "pid"), None);
    }
}
