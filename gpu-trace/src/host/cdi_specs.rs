//! CDI (Container Device Interface) specs: the files NVIDIA's toolkit and
//! other vendors' generators write to tell runtimes which device nodes to
//! inject. Read as YAML, which JSON specs are too.

use std::{
    fs,
    io::Read,
    os::unix::fs::OpenOptionsExt,
    path::{Path, PathBuf},
};

use yaml_rust2::{Yaml, YamlLoader};

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
    if !opened.metadata().map_err(|e| e.to_string())?.is_file() {
        return Err("not a regular file".into());
    }
    let mut text = String::new();
    opened
        .take(SPEC_SIZE_LIMIT + 1)
        .read_to_string(&mut text)
        .map_err(|e| e.to_string())?;
    if text.len() as u64 > SPEC_SIZE_LIMIT {
        return Err("more than 4 MiB, more than a spec".into());
    }
    // The YAML loader copies what an alias names: a few lines of nested
    // anchors would fill memory. CDI specs use none.
    if has_yaml_anchor(&text) {
        return Err("YAML anchors or aliases, which CDI specs do not use".into());
    }
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

/// An anchor (`&name`) or alias (`*name`) where YAML reads one: after
/// a space, `-`, `:`, `[`, `{` or `,`, or at the start of a line.
fn has_yaml_anchor(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.windows(2).enumerate().any(|(i, w)| {
        (w[0] == b'&' || w[0] == b'*')
            && (w[1].is_ascii_alphanumeric() || w[1] == b'_')
            && (i == 0
                || matches!(
                    bytes[i - 1],
                    b' ' | b'\n' | b'\t' | b'-' | b':' | b'[' | b'{' | b','
                ))
    })
}

#[cfg(test)]
mod tests {
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
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.yaml")).unwrap();
        fs::write(dir.path().join("notes.txt"), "not a spec").unwrap();
        let (nodes, unreadable) = read_spec_nodes(&[dir.path().to_path_buf()]);
        assert_eq!(unreadable.len(), 3, "{unreadable:?}");
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
}
