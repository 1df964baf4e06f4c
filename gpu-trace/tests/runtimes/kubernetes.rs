//! Kubernetes without a cluster: containerd's CRI driven as the kubelet
//! drives it (tests/support/cri.rs), with the cgroupfs driver, so that on
//! a cgroup v1/v2 hybrid host the pod's containers are confined by v1
//! devices.list rules that runc writes from the CRI's devices.

use crate::{
    common::*,
    cri::{containerd_installed, Containerd, PodSpec},
    pod_resources_server::PodResourcesServer,
};

/// The NVIDIA frontend's fixed major.
const NVIDIA: u32 = 195;

/// The pod's identity, in Kubernetes' form (gpu-trace takes no other).
const NAMESPACE: &str = "ml-team";
const POD: &str = "train-0";
const CONTAINER: &str = "trainer";

/// The host's v1 devices hierarchy and the static pause; None (said) where
/// `test` cannot run.
fn kubernetes_test(test: &str) -> Option<(PathBuf, PathBuf)> {
    let _host = kernel_test(test)?;
    // A property of the host's layout: a pure cgroup2 host has no devices.list.
    let v1_devices = v1_devices_mount(test)?;
    if !containerd_installed(test) {
        return None;
    }
    let pause = c_program(test, "pause", &[])?;
    Some((v1_devices, pause))
}

/// A GPU the pod was not given: the device plugin passed nvidia0, while
/// every node is visible through a read-only hostPath (as the legacy hook
/// or a DCGM probe sees them). The pod's open of nvidia1 is refused by
/// the devices.list runc wrote, and watch names the pod, its namespace
/// and its container from containerd's own record of them.
#[test]
fn a_cri_pod_denied_a_gpu_it_was_not_passed_is_named_by_namespace_pod_and_container() {
    let (v1_devices, pause) = or_skip!(kubernetes_test);
    let nodes =
        DeviceNodes::create(&[("nvidia0", NVIDIA, 0), ("nvidia1", NVIDIA, 1)]).expect("mknod");
    let hostdev = nodes
        .path("nvidia0")
        .parent()
        .expect("the nodes' directory")
        .to_path_buf();
    // Both before the pod, so that its container is first met in an event.
    let json = Watcher::start(&["--format", "json"]);
    let text = Watcher::start(&[]);
    let containerd = Containerd::start(&pause);
    // The opens wait for `go`, so that they come after the resource update
    // the kubelet's CPU manager sends a started container. Each in a
    // subshell: a failed redirection of `exec` ends the shell.
    let script = "while [ ! -e /hostdev/go ]; do sleep 0.1; done; \
                  (exec 3<>/dev/nvidia0); (exec 3<>/hostdev/nvidia1); exec sleep 600";
    let pod = PodSpec::new(NAMESPACE, POD, CONTAINER, &["/bin/sh", "-c", script])
        .device(&nodes.path("nvidia0"), "/dev/nvidia0")
        .mount(&hostdev, "/hostdev", true)
        .run(&containerd);
    let id = pod.container_id().to_string();
    let cgroup = pod.container_cgroup();

    pod.update_resources(1024, "0");
    // runc's update leaves the v1 device rules as they were (cgroupfs).
    let list = fs::read_to_string(v1_devices.join(&cgroup[1..]).join("devices.list"))
        .unwrap_or_else(|e| panic!("devices.list of {cgroup}: {e}"));
    assert!(list.lines().any(|l| l == "c 195:0 rw"), "{list}");
    assert!(!list.lines().any(|l| l.starts_with("c 195:1 ")), "{list}");
    fs::write(hostdev.join("go"), "").expect("write go");

    let deadline = Instant::now() + WAIT;
    let event = loop {
        let found = json
            .lines()
            .iter()
            .map(|l| serde_json::from_str::<Value>(l).expect("JSON"))
            .find(|e| e["path"] == "/hostdev/nvidia1");
        if let Some(event) = found {
            break event;
        }
        assert!(
            Instant::now() < deadline,
            "no event of /hostdev/nvidia1: {:#?}\ncontainerd's log:\n{}",
            json.lines(),
            containerd.log_tail()
        );
        thread::sleep(Duration::from_millis(50));
    };
    let label = format!("pod {NAMESPACE}/{POD} (container {CONTAINER})");
    let deadline = Instant::now() + WAIT;
    while !text.lines().iter().any(|l| l.contains(&label)) {
        assert!(
            Instant::now() < deadline,
            "no {label:?} in {:#?}",
            text.lines()
        );
        thread::sleep(Duration::from_millis(50));
    }

    assert_eq!(event["verdict"], "denied", "{event:#}");
    assert_eq!(event["errno"], "EPERM", "{event:#}");
    assert_eq!(event["major"], NVIDIA, "{event:#}");
    assert_eq!(event["minor"], 1, "{event:#}");
    let container = &event["container"];
    assert_eq!(container["runtime"], "containerd", "{event:#}");
    assert_eq!(container["id"], id.as_str(), "{event:#}");
    assert_eq!(container["cgroup"], cgroup.as_str(), "{event:#}");
    assert_eq!(container["namespace"], NAMESPACE, "{event:#}");
    assert_eq!(container["pod"], POD, "{event:#}");
    assert_eq!(container["pod_uid"], pod.uid.as_str(), "{event:#}");
    assert_eq!(container["name"], CONTAINER, "{event:#}");
    let culprit = &event["denied_by"];
    assert_eq!(culprit["kind"], "devices-list", "{event:#}");
    assert_eq!(culprit["cgroup"], cgroup.as_str(), "{event:#}");
    assert_eq!(culprit["found_by"], "sighting", "{event:#}");
    assert_eq!(culprit["note"], "no rule allows c 195:1", "{event:#}");
    // The GPU it was given is allowed (reported only for its missing
    // driver's ENXIO).
    let denied: Vec<Value> = json
        .lines()
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).expect("JSON"))
        .filter(|e| e["verdict"] == "denied" && e["minor"] != 1)
        .collect();
    assert_eq!(denied, Vec::<Value>::new());

    drop(pod);
    drop(containerd);
    json.stop_cleanly();
    text.stop_cleanly();
}

/// The GPUs of the node, by minor, as the driver and the device plugin name them.
const GPUS: [(u32, &str); 3] = [
    (0, "GPU-0a1b2c3d-0000-4000-8000-000000000000"),
    (1, "GPU-0a1b2c3d-1111-4000-8000-000000000001"),
    (2, "GPU-0a1b2c3d-2222-4000-8000-000000000002"),
];

/// Allocated or probed, from the kubelet's PodResources API (a server in
/// the test speaking its protocol): the pod was allocated GPUs 0 and 2,
/// the device plugin passed GPU 0 only, and the legacy hook's way mounted
/// every node into the container's /dev. Its open of GPU 1 is a probe
/// (not-allocated); its open of GPU 2 is the incident, an allocated GPU
/// denied; and `check --pod` says both before any open.
#[test]
fn a_pods_probe_of_a_gpu_it_was_not_given_is_told_from_an_allocated_gpu_denied() {
    let (_v1_devices, pause) = or_skip!(kubernetes_test);
    let nodes = DeviceNodes::create(&[
        ("nvidia0", NVIDIA, 0),
        ("nvidia1", NVIDIA, 1),
        ("nvidia2", NVIDIA, 2),
    ])
    .expect("mknod");
    let proc_driver = proc_driver_with_gpus(&GPUS);
    let kubelet_dir = temp_dir_named("gpu-trace-pod-resources-");
    let kubelet = PodResourcesServer::start(&kubelet_dir.path().join("kubelet.sock"));
    let socket = kubelet.socket.to_str().expect("utf-8").to_string();
    let gpu_trace_with_gpus = |args: &[&str]| {
        let mut command = Command::new(gpu_trace());
        command
            .args(args)
            .args(["--pod-resources", &socket])
            .env("GPU_TRACE_PROC_DRIVER", proc_driver.path());
        command
    };
    let json = Watcher::spawn(gpu_trace_with_gpus(&["watch", "--format", "json"]));
    // The kubelet admits the pod (allocating its GPUs) after watch's first
    // list, which lacks it: the pod's first denial makes watch list again.
    let deadline = Instant::now() + WAIT;
    while kubelet.calls() == 0 {
        assert!(Instant::now() < deadline, "watch never asked the kubelet");
        thread::sleep(Duration::from_millis(20));
    }
    kubelet.allocate(NAMESPACE, POD, CONTAINER, &[GPUS[0].1, GPUS[2].1]);
    let containerd = Containerd::start(&pause);
    let go = temp_dir_named("gpu-trace-go-");
    let script = "while [ ! -e /go/go ]; do sleep 0.1; done; \
                  (exec 3<>/dev/nvidia1); (exec 3<>/dev/nvidia2); exec sleep 600";
    let pod = PodSpec::new(NAMESPACE, POD, CONTAINER, &["/bin/sh", "-c", script])
        .device(&nodes.path("nvidia0"), "/dev/nvidia0")
        .mount(&nodes.path("nvidia1"), "/dev/nvidia1", false)
        .mount(&nodes.path("nvidia2"), "/dev/nvidia2", false)
        .mount(go.path(), "/go", true)
        .run(&containerd);

    // Before any open: check reads the same allocation.
    let pod_name = format!("{NAMESPACE}/{POD}");
    let output = gpu_trace_with_gpus(&["check", "--format", "json", "--pod", &pod_name])
        .output()
        .expect("run check");
    let report: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "check's JSON: {e}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    });
    let target = element_where(&report["views"], "name", "target").expect("target view");
    let row = |kind: &str| {
        element_where(&target["nodes"], "kind", kind)
            .unwrap_or_else(|| panic!("no {kind} in {target:#}"))
            .clone()
    };
    let rows = [row("nvidia0"), row("nvidia1"), row("nvidia2")];
    let seen: Vec<(&str, &str, bool)> = rows
        .iter()
        .map(|r| {
            (
                r["verdict"].as_str().expect("verdict"),
                r["gpu"].as_str().expect("gpu"),
                r["allocated"].as_bool().expect("allocated"),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("allowed", GPUS[0].1, true),
            ("denied", GPUS[1].1, false),
            ("denied", GPUS[2].1, true),
        ],
        "{report:#}"
    );
    // (The stand-in has no driver: each node is also a stale-major problem.)
    let denials: Vec<&str> = report["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(Value::as_str)
        .filter(|p| p.contains(": denied"))
        .collect();
    assert_eq!(denials.len(), 1, "the allocated GPU's only: {denials:?}");
    assert!(denials[0].contains("/dev/nvidia2: denied"), "{denials:?}");

    fs::write(go.path().join("go"), "").expect("write go");
    let event_of = |path: &str| {
        let deadline = Instant::now() + WAIT;
        loop {
            let found = json
                .lines()
                .iter()
                .map(|l| serde_json::from_str::<Value>(l).expect("JSON"))
                .find(|e| e["path"] == path && e["verdict"] == "denied");
            if let Some(event) = found {
                return event;
            }
            assert!(
                Instant::now() < deadline,
                "no denial of {path}: {:#?}",
                json.lines()
            );
            thread::sleep(Duration::from_millis(50));
        }
    };
    let probe = event_of("/dev/nvidia1");
    assert_eq!(probe["gpu"]["uuid"], GPUS[1].1, "{probe:#}");
    assert_eq!(probe["allocation"]["allocated"], false, "{probe:#}");
    assert_eq!(
        probe["allocation"]["container_gpus"],
        serde_json::json!([GPUS[0].1, GPUS[2].1]),
        "{probe:#}"
    );
    assert_eq!(probe["cause"], "not-allocated", "{probe:#}");
    let incident = event_of("/dev/nvidia2");
    assert_eq!(incident["gpu"]["uuid"], GPUS[2].1, "{incident:#}");
    assert_eq!(incident["allocation"]["allocated"], true, "{incident:#}");
    assert_eq!(incident["cause"], "v1-devices-list", "{incident:#}");
    // The pod's rules are the kubelet's: no hand edit of devices.allow.
    // Allocated already: the device plugin should have passed it.
    assert_event_starts(
        &incident,
        "hint",
        &format!("the kubelet allocated GPU {} to this container", GPUS[2].1),
    );
    assert_event_says(&incident, "hint", "`PASS_DEVICE_SPECS=true`");
    assert!(
        !event_text(&incident, "hint").contains("devices.allow"),
        "{incident:#}"
    );
    assert_event_starts(
        &probe,
        "hint",
        "nothing, if the workload needs only the GPUs it was given",
    );
    assert!(kubelet.calls() >= 1);

    drop(pod);
    drop(containerd);
    json.stop_cleanly();
}
