//! Kubernetes on a systemd host: containerd's CRI driven as the kubelet
//! drives it with the systemd cgroup driver (pure cgroup2), its pods' GPU
//! nodes from the stand-in driver. Where kubernetes#77073 happens: a pod
//! whose GPU nodes were only mounted, its policy patched the legacy hook's
//! way, loses them when the kubelet's CPU manager (or an in-place resize)
//! calls UpdateContainerResources; a pod given them as device specs keeps
//! them.

use crate::{
    common::*,
    cri::{containerd_installed, CgroupDriver, Containerd, PodSpec},
    lab::*,
};

const NAMESPACE: &str = "ml-team";
const POD: &str = "train-0";
const CONTAINER: &str = "trainer";

/// Opens /dev/nvidia-uvm each time /ctl/goN appears, and writes "ok" or
/// "denied" to /ctl/saidN. In a subshell: a failed redirection of `exec`
/// ends the shell.
const OPEN_ON_CUE: &str = "for n in 1 2; do \
    while [ ! -e /ctl/go$n ]; do sleep 0.1; done; \
    if (exec 3<>/dev/nvidia-uvm) 2>/dev/null; then echo ok > /ctl/said$n; \
    else echo denied > /ctl/said$n; fi; done; exec sleep 600";

/// The node's containerd and dockerd, stopped while the test's own
/// containerd uses the node's state directory; started again when dropped.
pub(crate) struct NodeRuntimesStopped;

impl NodeRuntimesStopped {
    pub(crate) fn stop() -> Self {
        let _ = run(
            "systemctl",
            &[
                "stop",
                "docker.socket",
                "docker.service",
                "containerd.service",
            ],
        );
        NodeRuntimesStopped
    }
}

impl Drop for NodeRuntimesStopped {
    fn drop(&mut self) {
        let _ = run(
            "systemctl",
            &[
                "start",
                "containerd.service",
                "docker.socket",
                "docker.service",
            ],
        );
    }
}

/// The lab with the stand-in's nodes, the static pause, and the node's
/// runtimes stopped; None (said) outside the lab.
fn pod_lab(test: &str) -> Option<(Driver, u32, PathBuf, NodeRuntimesStopped)> {
    cri_node(test, &[])
}

/// A node for the test's own containerd: the stand-in loaded with
/// `params` and its nodes made (the uvm major returned), the static
/// pause, and the node's runtimes stopped; None (said) outside the lab.
pub(crate) fn cri_node(
    test: &str,
    params: &[&str],
) -> Option<(Driver, u32, PathBuf, NodeRuntimesStopped)> {
    let (_lab, driver) = lab_with_driver(test, params)?;
    let uvm = make_nodes();
    let pause = c_program(test, "pause", &[])?;
    let stopped = NodeRuntimesStopped::stop();
    assert!(
        containerd_installed(test),
        "containerd, runc and busybox in the lab"
    );
    Some((driver, uvm, pause, stopped))
}

/// Writes /ctl/goN and waits for the pod's /ctl/saidN: "ok" or "denied".
fn open_on_cue(ctl: &Path, n: u32) -> String {
    fs::write(ctl.join(format!("go{n}")), "").expect("write go");
    let said = ctl.join(format!("said{n}"));
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(text) = fs::read_to_string(&said) {
            if !text.is_empty() {
                return text.trim().to_string();
            }
        }
        assert!(Instant::now() < deadline, "the pod never opened on cue {n}");
        thread::sleep(Duration::from_millis(50));
    }
}

/// What `check --pod` says of the pod's /dev/nvidia-uvm.
fn uvm_verdict_of_pod() -> String {
    let (_, report) = check_json_with(&["--pod", &format!("{NAMESPACE}/{POD}")], None);
    println!("check --pod: {report:#}");
    let target = element_where(&report["views"], "name", "target").expect("target view");
    let row = element_where(&target["nodes"], "kind", "nvidia-uvm")
        .unwrap_or_else(|| panic!("no nvidia-uvm in {target:#}"));
    row["verdict"].as_str().expect("a verdict").to_string()
}

#[test]
fn a_kubelet_style_update_rewrites_a_hook_patched_pods_rules_and_is_named_with_the_pod() {
    let (_driver, uvm, pause, _stopped) = or_skip!(pod_lab);
    let ctl = temp_dir_named("gpu-trace-pod-ctl-");
    let watcher = Watcher::start(&["--format", "json"]);
    let containerd = Containerd::start_with(&pause, CgroupDriver::Systemd);
    // The node only mounted, as the legacy hook mounts it.
    let pod = PodSpec::new(NAMESPACE, POD, CONTAINER, &["/bin/sh", "-c", OPEN_ON_CUE])
        .mount(Path::new("/dev/nvidia-uvm"), "/dev/nvidia-uvm", false)
        .mount(ctl.path(), "/ctl", false)
        .run(&containerd);
    let id = pod.container_id().to_string();
    let scope = pod.container_cgroup();
    assert!(
        scope.starts_with("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"),
        "{scope}"
    );
    let hook = patch_like_a_hook(&scope);
    assert_eq!(open_on_cue(ctl.path(), 1), "ok", "the patched pod opens it");
    assert_eq!(events_of_id(&watcher, &id), Vec::<Value>::new());

    // What the kubelet's CPU manager sends a started container, on its
    // reconcile loop (every 10 s): past the start, as in the field, where
    // NVML's "Unknown Error" comes some seconds after a pod worked.
    thread::sleep(Duration::from_secs(3));
    pod.update_resources(1024, "0");
    let programs = programs_at(&scope);
    let added: Vec<&(u32, String)> = programs.iter().filter(|(id, _)| *id != hook).collect();
    assert!(
        !added.is_empty(),
        "a program written by the update: {programs:?}"
    );
    // check says so before the pod's next open.
    assert_eq!(uvm_verdict_of_pod(), "denied");
    assert_eq!(
        open_on_cue(ctl.path(), 2),
        "denied",
        "the update took it away"
    );

    let event = wait_for_event_of_id(
        &watcher,
        &id,
        |_| true,
        || format!("containerd's log:\n{}", containerd.log_tail()),
    );
    assert_eq!(event["path"], "/dev/nvidia-uvm", "{event:#}");
    assert_eq!(event["major"], uvm, "{event:#}");
    assert_eq!(event["verdict"], "denied", "{event:#}");
    let container = &event["container"];
    assert_eq!(container["runtime"], "containerd", "{event:#}");
    assert_eq!(container["cgroup"], scope.as_str(), "{event:#}");
    assert_eq!(container["namespace"], NAMESPACE, "{event:#}");
    assert_eq!(container["pod"], POD, "{event:#}");
    assert_eq!(container["pod_uid"], pod.uid.as_str(), "{event:#}");
    assert_eq!(container["name"], CONTAINER, "{event:#}");
    let writer = assert_rewritten_at(&event, &scope, &added);
    // The trigger, from the drop-ins systemd wrote for the update: runc
    // set the scope's CPUWeight and AllowedCPUs through it.
    let unit = scope.rsplit('/').next().expect("the scope");
    let trigger = &event["denied_by"]["writer"]["trigger"];
    assert_eq!(trigger["unit"], unit, "{event:#}");
    assert_eq!(
        trigger["properties"],
        serde_json::json!(["AllowedCPUs", "CPUWeight"]),
        "{event:#}"
    );
    assert_eq!(
        trigger["drop_ins"],
        format!("/run/systemd/transient/{unit}.d"),
        "{event:#}"
    );
    let explanation = event["explanation"].as_str().unwrap_or_default();
    assert!(
        explanation.contains("after the cgroup's first process"),
        "{explanation}"
    );
    assert!(
        explanation.contains("the CRI's UpdateContainerResources"),
        "{explanation}"
    );
    // The fix names the device plugin's setting, never a hand edit.
    let fix = fix_text(&event);
    assert!(fix.contains("`PASS_DEVICE_SPECS=true`"), "{fix}");
    assert!(!fix.contains(&format!("{uvm}:*")), "{fix}");
    println!("the update's program was written by {writer}; the fix: {fix}");
    drop(pod);
    drop(containerd);
    watcher.stop_cleanly();
}

#[test]
fn a_pod_given_its_gpu_as_device_specs_keeps_it_through_a_kubelet_style_update() {
    let (_driver, uvm, pause, _stopped) = or_skip!(pod_lab);
    // runc names a device to systemd by its /dev/char link and leaves out
    // one that has none, as a node made by nvidia-modprobe has not:
    // `nvidia-ctk system create-dev-char-symlinks` makes them.
    let link = PathBuf::from(format!("/dev/char/{uvm}:0"));
    let _ = fs::remove_file(&link);
    std::os::unix::fs::symlink("../nvidia-uvm", &link).expect("the /dev/char link");
    let ctl = temp_dir_named("gpu-trace-pod-ctl-");
    let watcher = Watcher::start(&["--format", "json"]);
    let containerd = Containerd::start_with(&pause, CgroupDriver::Systemd);
    // As a device plugin with PASS_DEVICE_SPECS=true passes it.
    let pod = PodSpec::new(NAMESPACE, POD, CONTAINER, &["/bin/sh", "-c", OPEN_ON_CUE])
        .device(Path::new("/dev/nvidia-uvm"), "/dev/nvidia-uvm")
        .mount(ctl.path(), "/ctl", false)
        .run(&containerd);
    let id = pod.container_id().to_string();
    assert_eq!(open_on_cue(ctl.path(), 1), "ok");
    pod.update_resources(1024, "0");
    assert_eq!(uvm_verdict_of_pod(), "allowed");
    assert_eq!(
        open_on_cue(ctl.path(), 2),
        "ok",
        "the device spec survives the update"
    );
    thread::sleep(Duration::from_secs(1));
    assert_eq!(events_of_id(&watcher, &id), Vec::<Value>::new());
    drop(pod);
    drop(containerd);
    let _ = fs::remove_file(&link);
    watcher.stop_cleanly();
}
