//! CDI specs against the host as it is today: a spec written before a
//! driver update can carry a major the driver no longer has (a spec saying
//! 510 while nvidia-uvm has 509 gave cuInit 999), or a path that is gone.

use std::{fs, os::unix::fs::MetadataExt};

use serde::Serialize;

use crate::{
    host::{cdi_specs::SpecNode, proc_devices::CharMajors},
    model::node::NvidiaNode,
    text::shell_word::{command_word, prose},
};

/// One spec entry that does not match the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StaleCdiEntry {
    pub cause: &'static str,
    pub file: String,
    pub device: String,
    pub path: String,
    pub problem: String,
    pub fix: String,
}

/// The entries of `nodes` that do not match the host today.
pub fn stale_entries(nodes: &[SpecNode], majors: &CharMajors) -> Vec<StaleCdiEntry> {
    nodes
        .iter()
        .filter_map(|node| {
            let problem = problem_of(node, majors)?;
            let file = node.file.display().to_string();
            Some(StaleCdiEntry {
                cause: "stale-cdi-spec",
                fix: regenerate(&node.device, &file),
                file,
                device: node.device.clone(),
                path: node.path.clone(),
                problem,
            })
        })
        .collect()
}

fn problem_of(node: &SpecNode, majors: &CharMajors) -> Option<String> {
    let host = &node.host_path;
    let Ok(meta) = fs::metadata(host) else {
        return Some(format!("{} does not exist on the host", prose(host)));
    };
    let (major, minor) = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
    if let (Some(spec_major), Some(spec_minor)) = (node.major, node.minor) {
        if (spec_major, spec_minor) != (major, minor) {
            return Some(format!(
                "the spec says c {spec_major}:{spec_minor}, the host's {} is c {major}:{minor}",
                prose(host)
            ));
        }
    }
    // The node itself may be as stale as the spec: the driver's major today.
    let spec_major = node.major?;
    let driver = NvidiaNode::from_path(node.path.as_bytes())
        .map(NvidiaNode::driver)
        .or(node.path.ends_with("/kfd").then_some("kfd"))?;
    let today = majors
        .iter()
        .find(|(_, name)| *name == driver || (driver == "nvidia-frontend" && *name == "nvidia"))
        .map(|(m, _)| m)?;
    (today != spec_major).then(|| {
        format!("the spec says major {spec_major}, but {driver} has major {today} today (/proc/devices)")
    })
}

/// The generator that rewrites a spec of this kind.
fn regenerate(device: &str, file: &str) -> String {
    let output = command_word(file, "SPEC_FILE");
    if device.starts_with("nvidia.com/") {
        format!("regenerate it: `nvidia-ctk cdi generate --output={output}`")
    } else if device.starts_with("amd.com/") {
        format!("regenerate it: `amd-ctk cdi generate --output={output}`")
    } else {
        format!("regenerate {} with its vendor's CDI generator", prose(file))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(path: &str, major: Option<u32>, minor: Option<u32>) -> SpecNode {
        SpecNode {
            file: "/etc/cdi/nvidia.yaml".into(),
            device: "nvidia.com/gpu=all".into(),
            path: path.into(),
            host_path: path.into(),
            major,
            minor,
        }
    }

    #[test]
    fn specs_that_disagree_with_the_host_are_stale() {
        let majors = CharMajors::parse("Character devices:\n  1 mem\n");
        // /dev/null is c 1:3 everywhere.
        let found = stale_entries(
            &[
                node("/dev/null", Some(1), Some(3)),
                node("/dev/null", Some(1), Some(5)),
                node("/dev/null", None, None),
                node("/dev/nvidia-gpu-trace-none", Some(195), Some(0)),
            ],
            &majors,
        );
        let problems: Vec<&str> = found.iter().map(|e| e.problem.as_str()).collect();
        assert_eq!(
            problems,
            [
                "the spec says c 1:5, the host's /dev/null is c 1:3",
                "/dev/nvidia-gpu-trace-none does not exist on the host",
            ]
        );
        assert_eq!(
            found[0].fix,
            "regenerate it: `nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml`"
        );
    }
}
