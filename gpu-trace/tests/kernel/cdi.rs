//! CDI specs against the host: `check` names spec entries whose device
//! number differs from the host's node, or whose path is gone, and `watch`
//! names the stale spec behind a denied node.

use std::{fs, path::PathBuf};

use gpu_trace::scenario::{DeviceNodes, OpenMode, ScratchPolicy};
use gpu_trace_common::{ACCESS_MKNOD, ACCESS_READ, ACCESS_WRITE};

use crate::common::{
    assert_event_says, check_json_with, denied_open, kernel_test, or_skip, scratch_cgroup,
    uvm_standin, Watcher,
};

/// A node nvidia-uvm on a major no driver owns, as a spec's node after a
/// driver update; the major and the node.
fn uvm_node() -> (u32, DeviceNodes) {
    let major = uvm_standin();
    let nodes = DeviceNodes::create(&[("nvidia-uvm", major, 0)]).expect("mknod");
    (major, nodes)
}

/// A fresh directory, as `--cdi-dir` and GPU_TRACE_CDI_DIRS take, holding
/// one spec, `name`, that says `text`: the directory and the spec's path.
fn spec_dir(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let specs = tempfile::tempdir().expect("temp dir");
    let spec = specs.path().join(name);
    fs::write(&spec, text).expect("write the spec");
    (specs, spec)
}

#[test]
fn check_names_cdi_spec_entries_that_no_longer_match_the_host() {
    let host = or_skip!(kernel_test);
    let (major, nodes) = uvm_node();
    let uvm = nodes.path("nvidia-uvm");
    // Written before a driver update: the old major, and a node since gone.
    let (specs, spec) = spec_dir(
        "nvidia.yaml",
        &format!(
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n- name: all\n  containerEdits:\n    deviceNodes:\n    - path: /dev/nvidia-uvm\n      hostPath: {}\n      major: {}\n      minor: 0\n    - path: /dev/nvidia-gone\n      hostPath: {}/nvidia-gone\n",
            uvm.display(),
            major + 1,
            nodes.dir().display()
        ),
    );
    let cgroup = scratch_cgroup(&host, "cdi");
    let relative = cgroup.relative_path().to_str().expect("UTF-8").to_string();
    let dir = specs.path().to_str().expect("UTF-8");
    let (_, report) = check_json_with(&["--cgroup", &relative, "--cdi-dir", dir], None);
    let stale = report["cdi"]["stale"].as_array().expect("cdi.stale");
    assert_eq!(stale.len(), 2, "{report:#}");
    let file = spec.display().to_string();
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
            "the spec says c {}:0, the host's {} is c {major}:0",
            major + 1,
            uvm.display()
        )
    );
    assert_eq!(
        stale[1]["problem"],
        format!(
            "{}/nvidia-gone does not exist on the host",
            nodes.dir().display()
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
    let host = or_skip!(kernel_test);
    let (major, nodes) = uvm_node();
    let uvm = nodes.path("nvidia-uvm");
    // The spec injected this node (same path in the container) with last
    // week's major; the policy, written from it, does not allow today's.
    let (specs, spec) = spec_dir(
        "nvidia.json",
        &format!(
            r#"{{"cdiVersion":"0.6.0","kind":"nvidia.com/gpu","devices":[{{"name":"all","containerEdits":{{"deviceNodes":[{{"path":"{}","major":{},"minor":0}}]}}}}]}}"#,
            uvm.display(),
            major + 1
        ),
    );
    let cgroup = scratch_cgroup(&host, "cdi-watch");
    let _policy = ScratchPolicy::attach(
        &cgroup,
        &[(major, ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD)],
    )
    .expect("attach");
    let mut command = std::process::Command::new(crate::common::gpu_trace());
    command
        .args(["watch", "--format", "json", "--major", &major.to_string()])
        .env("GPU_TRACE_CDI_DIRS", specs.path());
    let watcher = Watcher::spawn(command);
    let (_, event) = denied_open(&watcher, &[&cgroup], uvm.clone(), OpenMode::ReadWrite);
    let event = &event;
    assert_eq!(event["cause"], "stale-cdi-spec", "{event:#}");
    assert_event_says(
        event,
        "explanation",
        &format!(
            "was injected from CDI spec {} (nvidia.com/gpu=all)",
            spec.display()
        ),
    );
    watcher.stop_cleanly();
}
