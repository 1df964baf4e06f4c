//! CDI (Container Device Interface) specs: the files NVIDIA's toolkit and
//! other vendors' generators write to tell runtimes which device nodes to
//! inject. Read as YAML, which JSON specs are too.

use std::{
    fs,
    io::Read,
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
};

use yaml_rust2::{
    parser::{Event, Parser},
    Yaml, YamlLoader,
};

/// Directories (colon-separated) `watch` and `run` read specs from
/// instead of the defaults, as `check --cdi-dir` does.
pub const CDI_DIRS_ENV: &str = "GPU_TRACE_CDI_DIRS";
/// Where runtimes look for specs unless told otherwise.
pub const DEFAULT_CDI_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];
/// Specs read per directory: a directory full of files is not a reason to
/// read forever.
const SPECS_PER_DIR: usize = 256;
/// Bigger files are not CDI specs anyone wrote by hand or tool.
const SPEC_SIZE_LIMIT: u64 = 4 << 20;
/// A spec nests six levels (devices, a device, containerEdits, deviceNodes,
/// a node, and a value); a parser that recursed on deeper ones would run
/// out of stack.
const YAML_DEPTH_LIMIT: usize = 32;
/// Parser events read from one file, at most.
const YAML_EVENTS_LIMIT: usize = 1_000_000;

/// One device node a spec injects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecNode {
    /// The spec file.
    pub file: PathBuf,
    /// "nvidia.com/gpu=0", or "nvidia.com/gpu (every device)" for the
    /// spec's own containerEdits.
    pub device: String,
    /// The path in the container, and on the host when `hostPath` is not set.
    pub path: String,
    pub host_path: String,
    /// As the spec writes them; None when left out (the runtime then takes
    /// the host node's).
    pub major: Option<u32>,
    pub minor: Option<u32>,
}

/// The device nodes of every spec in `dirs`; files that do not parse are
/// listed in the second half with why.
pub fn read_spec_nodes(dirs: &[PathBuf]) -> (Vec<SpecNode>, Vec<String>) {
    let mut nodes = Vec::new();
    let mut unreadable = Vec::new();
    for dir in dirs {
        let Ok(meta) = fs::metadata(dir) else {
            continue;
        };
        if let Err(why) = trusted(&meta) {
            unreadable.push(format!("{}: skipped: {why}", dir.display()));
            continue;
        }
        let Ok(entries) = fs::read_dir(dir) else {
            continue;
        };
        let mut files: Vec<PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.extension()
                    .is_some_and(|e| e == "json" || e == "yaml" || e == "yml")
            })
            .collect();
        files.sort();
        for file in files.into_iter().take(SPECS_PER_DIR) {
            match read_spec(&file) {
                Ok(found) => nodes.extend(found),
                Err(why) => unreadable.push(format!("{}: {why}", file.display())),
            }
        }
    }
    (nodes, unreadable)
}

fn read_spec(file: &Path) -> Result<Vec<SpecNode>, String> {
    // Not a FIFO that blocks, nor a device that never ends; no symlink.
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(file)
        .map_err(|e| e.to_string())?;
    let meta = opened.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    trusted(&meta).map_err(|why| format!("skipped: {why}"))?;
    let mut text = String::new();
    opened
        .take(SPEC_SIZE_LIMIT + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > SPEC_SIZE_LIMIT {
        return Err("more than 4 MiB, more than a spec".into());
    }
    within_yaml_bounds(&text)?;
    let docs = YamlLoader::load_from_str(&text).map_err(|e| e.to_string())?;
    let spec = docs.first().ok_or("empty")?;
    let kind = spec["kind"].as_str().ok_or("no kind")?;
    let mut nodes = Vec::new();
    let mut add = |device: String, edits: &Yaml| {
        for node in edits["deviceNodes"].as_vec().into_iter().flatten() {
            let Some(path) = node["path"].as_str() else {
                continue;
            };
            let number = |key: &str| node[key].as_i64().and_then(|n| u32::try_from(n).ok());
            nodes.push(SpecNode {
                file: file.to_path_buf(),
                device: device.clone(),
                path: path.to_string(),
                host_path: node["hostPath"].as_str().unwrap_or(path).to_string(),
                major: number("major"),
                minor: number("minor"),
            });
        }
    };
    add(format!("{kind} (every device)"), &spec["containerEdits"]);
    for device in spec["devices"].as_vec().into_iter().flatten() {
        let name = device["name"].as_str().unwrap_or("?");
        add(format!("{kind}={name}"), &device["containerEdits"]);
    }
    Ok(nodes)
}

/// Specs tell runtimes what to give containers, and gpu-trace's fixes
/// follow them: only root's count. Owned by root, and writable by no one
/// else (by a group only when it is root's).
fn trusted(meta: &fs::Metadata) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt;
    if meta.uid() != 0 {
        return Err(format!("owned by uid {}, not root", meta.uid()));
    }
    let mode = meta.mode();
    if mode & 0o002 != 0 || (mode & 0o020 != 0 && meta.gid() != 0) {
        return Err(format!("writable by others (mode {:o})", mode & 0o7777));
    }
    Ok(())
}

/// Reads `text` as a stream of parser events, before anything is built
/// from it: no anchors or aliases (the loader copies what an alias names,
/// so a few lines of nested ones fill memory; CDI specs use none), no
/// nesting past YAML_DEPTH_LIMIT, no more than YAML_EVENTS_LIMIT events.
fn within_yaml_bounds(text: &str) -> Result<(), String> {
    let mut parser = Parser::new_from_str(text);
    let mut depth = 0usize;
    for _ in 0..YAML_EVENTS_LIMIT {
        let (event, _) = parser.next_token().map_err(|e| e.to_string())?;
        let anchor = match event {
            Event::StreamEnd => return Ok(()),
            Event::Alias(_) => 1,
            Event::Scalar(_, _, anchor, _) => anchor,
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                depth += 1;
                if depth > YAML_DEPTH_LIMIT {
                    return Err(format!(
                        "nested deeper than {YAML_DEPTH_LIMIT} levels, which no spec is"
                    ));
                }
                anchor
            }
            Event::SequenceEnd | Event::MappingEnd => {
                depth = depth.saturating_sub(1);
                0
            }
            _ => 0,
        };
        if anchor != 0 {
            return Err("YAML anchors or aliases, which CDI specs do not use".into());
        }
    }
    Err(format!(
        "more than {YAML_EVENTS_LIMIT} YAML events, more than a spec"
    ))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    #[test]
    fn reads_yaml_and_json_specs() {
        let dir = tempfile::tempdir().expect("temp dir");
        fs::write(
            dir.path().join("nvidia.yaml"),
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: \"0\"\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia0\n      major: 195\n      minor: 0\ncontainerEdits:\n  deviceNodes:\n  - path: /dev/nvidia-uvm\n    hostPath: /dev/nvidia-uvm\n    major: 510\n    minor: 0\n  - path: /dev/nvidiactl\n",
        )
        .unwrap();
        fs::write(
            dir.path().join("amd.json"),
            r#"{"cdiVersion":"0.6.0","kind":"amd.com/gpu","devices":[{"name":"all","containerEdits":{"deviceNodes":[{"path":"/dev/kfd","major":511,"minor":0}]}}]}"#,
        )
        .unwrap();
        fs::write(dir.path().join("broken.yaml"), "kind: [").unwrap();
        fs::write(
            dir.path().join("laughs.yaml"),
            "a: &a [x, x]\nb: &b [*a, *a]\nkind: x\n",
        )
        .unwrap();
        // Anchors whose names start with a dot, nine levels deep.
        let laughs: String = (0..9)
            .map(|i| {
                format!(
                    "l{i}: &.{i} [*.{p}, *.{p}, *.{p}, *.{p}, *.{p}, *.{p}, *.{p}, *.{p}, *.{p}]\n",
                    p = i.max(1) - 1
                )
            })
            .collect();
        fs::write(
            dir.path().join("dotted.yaml"),
            format!("x: &.0 [lol]\n{laughs}kind: x\n"),
        )
        .unwrap();
        fs::write(dir.path().join("deep.yaml"), "- ".repeat(1_500_000)).unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.yaml")).unwrap();
        fs::write(dir.path().join("notes.txt"), "not a spec").unwrap();
        let (nodes, unreadable) = read_spec_nodes(&[dir.path().to_path_buf()]);
        assert_eq!(unreadable.len(), 5, "{unreadable:?}");
        for part in [
            "deep.yaml: nested deeper than 32",
            "dotted.yaml: YAML anchors",
        ] {
            assert!(
                unreadable.iter().any(|u| u.contains(part)),
                "{part}: {unreadable:?}"
            );
        }
        let summary: Vec<(String, String, Option<u32>)> = nodes
            .iter()
            .map(|n| (n.device.clone(), n.path.clone(), n.major))
            .collect();
        assert_eq!(
            summary,
            [
                ("amd.com/gpu=all".into(), "/dev/kfd".into(), Some(511)),
                (
                    "nvidia.com/gpu (every device)".into(),
                    "/dev/nvidia-uvm".into(),
                    Some(510)
                ),
                (
                    "nvidia.com/gpu (every device)".into(),
                    "/dev/nvidiactl".into(),
                    None
                ),
                ("nvidia.com/gpu=0".into(), "/dev/nvidia0".into(), Some(195)),
            ]
        );
    }

    #[test]
    fn only_roots_specs_count_and_the_rest_are_named() {
        let dir = tempfile::tempdir().expect("temp dir");
        let spec = r#"{"kind":"amd.com/gpu","devices":[{"name":"all","containerEdits":{"deviceNodes":[{"path":"/dev/kfd"}]}}]}"#;
        fs::write(dir.path().join("root.json"), spec).unwrap();
        // A tenant's file in root's directory, and a directory anyone
        // writes to: both skipped, and said.
        let tenants = dir.path().join("tenant.json");
        fs::write(&tenants, spec).unwrap();
        std::os::unix::fs::chown(&tenants, Some(65534), None).unwrap();
        let open = tempfile::tempdir().expect("temp dir");
        fs::set_permissions(open.path(), fs::Permissions::from_mode(0o777)).unwrap();
        fs::write(open.path().join("nvidia.json"), spec).unwrap();
        let (nodes, unreadable) =
            read_spec_nodes(&[dir.path().to_path_buf(), open.path().to_path_buf()]);
        let files: Vec<&Path> = nodes.iter().map(|n| n.file.as_path()).collect();
        assert_eq!(files, [dir.path().join("root.json")]);
        assert_eq!(
            unreadable,
            [
                format!(
                    "{}: skipped: owned by uid 65534, not root",
                    tenants.display()
                ),
                format!(
                    "{}: skipped: writable by others (mode 777)",
                    open.path().display()
                ),
            ]
        );
    }
}
