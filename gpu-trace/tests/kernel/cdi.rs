//! CDI specs against the host: `check` names spec entries whose device
//! number differs from the host's node, or whose path is gone, and `watch`
//! names the stale spec behind a denied node.

use crate::common::*;

/// Written before a driver update: the old major, and a node since gone.
const STALE_YAML: &str = "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia-uvm\n      hostPath: {uvm}\n      major: {old_major}\n      minor: 0\n    - path: /dev/nvidia-gone\n      hostPath: {nodes}/nvidia-gone\n";

/// The spec injected this node (same path in the container) with last
/// week's major; the policy, written from it, does not allow today's.
const STALE_JSON: &str = r#"{"cdiVersion":"0.6.0","kind":"nvidia.com/gpu","devices":[{"name":"all","containerEdits":{"deviceNodes":[{"path":"{uvm}","major":{old_major},"minor":0}]}}]}"#;

/// A stale spec's scene: a node nvidia-uvm on a major no driver owns, a
/// spec that names it with the major it had before a driver update, and a
/// scratch cgroup. Fields drop in order: the cgroup first, the node last.
struct StaleSpec {
    cgroup: ScratchCgroup,
    /// The spec's directory, as `--cdi-dir` and GPU_TRACE_CDI_DIRS take.
    specs: tempfile::TempDir,
    spec: PathBuf,
    uvm: PathBuf,
    nodes: DeviceNodes,
    /// Today's major; the spec says the one above it.
    major: u32,
}

/// The scene for test `test`, its cgroup named `cgroup`, its spec `name`
/// written from `template`, where {uvm} stands for the node's path,
/// {old_major} for the major before the update and {nodes} for the nodes'
/// directory. None when the test cannot run here.
fn stale_spec(test: &str, cgroup: &str, name: &str, template: &str) -> Option<StaleSpec> {
    let host = kernel_test(test)?;
    let major = uvm_standin();
    let nodes = DeviceNodes::create(&[("nvidia-uvm", major, 0)]).expect("mknod");
    let uvm = nodes.path("nvidia-uvm");
    let specs = tempfile::tempdir().expect("temp dir");
    let spec = specs.path().join(name);
    let text = template
        .replace("{uvm}", &uvm.display().to_string())
        .replace("{old_major}", &(major + 1).to_string())
        .replace("{nodes}", &nodes.dir().display().to_string());
    fs::write(&spec, text).expect("write the spec");
    let cgroup = scratch_cgroup(&host, cgroup);
    Some(StaleSpec {
        cgroup,
        specs,
        spec,
        uvm,
        nodes,
        major,
    })
}

#[test]
fn check_names_cdi_spec_entries_that_no_longer_match_the_host() {
    let scene = or_skip!(stale_spec, "cdi", "nvidia.yaml", STALE_YAML);
    let relative = scene
        .cgroup
        .relative_path()
        .to_str()
        .expect("UTF-8")
        .to_string();
    let dir = scene.specs.path().to_str().expect("UTF-8");
    let (_, report) = check_json_with(&["--cgroup", &relative, "--cdi-dir", dir], None);
    let stale = report["cdi"]["stale"].as_array().expect("cdi.stale");
    assert_eq!(stale.len(), 2, "{report:#}");
    let file = scene.spec.display().to_string();
    for entry in stale {
        assert_eq!(entry["cause"], "stale-cdi-spec", "{entry:#}");
        assert_eq!(entry["file"], file.as_str(), "{entry:#}");
        assert_eq!(entry["device"], "nvidia.com/gpu=all", "{entry:#}");
        assert_eq!(
            entry["fix"],
            format!("regenerate it: `nvidia-ctk cdi generate --output={file}`"),
            "{entry:#}"
        );
    }
    assert_eq!(
        stale[0]["problem"],
        format!(
            "the spec says c {}:0, the host's {} is c {}:0",
            scene.major + 1,
            scene.uvm.display(),
            scene.major
        )
    );
    assert_eq!(
        stale[1]["problem"],
        format!(
            "{}/nvidia-gone does not exist on the host",
            scene.nodes.dir().display()
        )
    );
    // And in the human report, as warnings.
    let out = std::process::Command::new(crate::common::gpu_trace())
        .args(["check", "--cgroup", &relative, "--cdi-dir", dir])
        .output()
        .expect("run check");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(&format!(
            "warning: stale CDI spec {file} (nvidia.com/gpu=all)"
        )),
        "{text}"
    );
}

#[test]
fn watch_names_the_stale_cdi_spec_behind_a_denied_node() {
    let scene = or_skip!(stale_spec, "cdi-watch", "nvidia.json", STALE_JSON);
    let _policy = ScratchPolicy::attach(
        &scene.cgroup,
        &[(scene.major, ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD)],
    )
    .expect("attach");
    let mut command = std::process::Command::new(crate::common::gpu_trace());
    command
        .args([
            "watch",
            "--format",
            "json",
            "--major",
            &scene.major.to_string(),
        ])
        .env("GPU_TRACE_CDI_DIRS", scene.specs.path());
    let watcher = Watcher::spawn(command);
    let (_, event) = denied_open(
        &watcher,
        &[&scene.cgroup],
        scene.uvm.clone(),
        OpenMode::ReadWrite,
    );
    let event = &event;
    assert_eq!(event["cause"], "stale-cdi-spec", "{event:#}");
    assert_event_says(
        event,
        "explanation",
        &format!(
            "was injected from CDI spec {} (nvidia.com/gpu=all)",
            scene.spec.display()
        ),
    );
    watcher.stop_cleanly();
}
