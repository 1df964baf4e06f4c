//! Which GPU, allocated or probed, for pods made through containerd's CRI
//! on a pure cgroup2 host, with either cgroup driver: the stand-in lists
//! its GPUs in /proc/driver/nvidia as the NVIDIA driver does, and a
//! PodResources server at the kubelet's own socket says which of them the
//! pod was given. Neither gpu-trace nor its tests are told where either is.

use gpu_trace::host::pod_resources::DEFAULT_SOCKET;

use crate::{
    common::*,
    cri::{CgroupDriver, Containerd, PodSpec},
    lab::*,
    pod_resources_server::PodResourcesServer,
    pods::{cri_node, NodeRuntimesStopped},
};

const NAMESPACE: &str = "vision";
const POD: &str = "detector-7f9c";
const CONTAINER: &str = "infer";

/// The GPUs the stand-in lists with `gpus=3`, by minor: its UUIDs and bus ids.
const GPUS: [(u32, &str, &str); 3] = [
    (
        0,
        "GPU-5ca1ab1e-0000-4000-8000-000000000000",
        "0000:18:00.0",
    ),
    (
        1,
        "GPU-5ca1ab1e-0000-4000-8000-000000000001",
        "0000:19:00.0",
    ),
    (
        2,
        "GPU-5ca1ab1e-0000-4000-8000-000000000002",
        "0000:1a:00.0",
    ),
];

/// Opens /dev/nvidia0, 1 and 2 once /ctl/go appears, and writes what each
/// open did ("ok" or "denied", a line each) to /ctl/said.
const OPEN_EACH_GPU: &str = "while [ ! -e /ctl/go ]; do sleep 0.1; done; \
    for n in 0 1 2; do if (exec 3<>/dev/nvidia$n) 2>/dev/null; then echo ok; \
    else echo denied; fi; done > /ctl/said.tmp; mv /ctl/said.tmp /ctl/said; exec sleep 600";

/// The kubelet's PodResources socket where a node has it, served by the
/// test; removed when dropped.
pub(crate) fn kubelet_at_its_socket() -> PodResourcesServer {
    let socket = Path::new(DEFAULT_SOCKET);
    fs::create_dir_all(socket.parent().expect("a folder")).expect("the kubelet's folder");
    PodResourcesServer::start(socket)
}

/// /dev/nvidia1 and /dev/nvidia2 beside the lab's /dev/nvidia0; removed
/// when dropped, so that no other scene meets them.
pub(crate) struct MoreGpuNodes;

impl MoreGpuNodes {
    pub(crate) fn make() -> Self {
        for (minor, _, _) in &GPUS[1..] {
            mknod(&gpu_node(*minor), 195, *minor);
        }
        MoreGpuNodes
    }
}

impl Drop for MoreGpuNodes {
    fn drop(&mut self) {
        for (minor, _, _) in &GPUS[1..] {
            let _ = fs::remove_file(gpu_node(*minor));
        }
    }
}

pub(crate) fn gpu_node(minor: u32) -> PathBuf {
    PathBuf::from(format!("/dev/nvidia{minor}"))
}

/// The lab with the stand-in listing three GPUs and their nodes made, the
/// static pause, and the node's runtimes stopped; None (said) outside it.
pub(crate) fn gpu_pod_lab(
    test: &str,
) -> Option<(Driver, MoreGpuNodes, PathBuf, NodeRuntimesStopped)> {
    let (driver, _uvm, pause, stopped) = cri_node(test, &["gpus=3"])?;
    Some((driver, MoreGpuNodes::make(), pause, stopped))
}

/// A pod allocated GPUs 0 and 2, given GPU 0 as a device spec and the
/// others only mounted (as the legacy hook, or a hostPath of /dev, shows
/// them): `check --pod` says before any open that GPU 1 is denied but not
/// the pod's and GPU 2 is the pod's and denied; the pod's opens then give
/// one denial of each kind, named with the pod and the GPU.
fn gpus_of_a_cri_pod(pause: &Path, driver: CgroupDriver) {
    let kubelet = kubelet_at_its_socket();
    // --all: the allowed open of the pod's own GPU is seen too.
    let watcher = Watcher::start(&["--format", "json", "--all"]);
    // Admitted after watch's first list, which lacks the pod.
    let deadline = Instant::now() + WAIT;
    while kubelet.calls() == 0 {
        assert!(Instant::now() < deadline, "watch never asked the kubelet");
        thread::sleep(Duration::from_millis(20));
    }
    kubelet.allocate(NAMESPACE, POD, CONTAINER, &[GPUS[0].1, GPUS[2].1]);
    let containerd = Containerd::start_with(pause, driver);
    let ctl = temp_dir_named("gpu-trace-pod-ctl-");
    let pod = PodSpec::new(NAMESPACE, POD, CONTAINER, &["/bin/sh", "-c", OPEN_EACH_GPU])
        .device(&gpu_node(0), "/dev/nvidia0")
        .mount(&gpu_node(1), "/dev/nvidia1", false)
        .mount(&gpu_node(2), "/dev/nvidia2", false)
        .mount(ctl.path(), "/ctl", false)
        .run(&containerd);
    let id = pod.container_id().to_string();
    let cgroup = pod.container_cgroup();

    let pod_name = format!("{NAMESPACE}/{POD}");
    let (_, report) = check_json_with(&["--pod", &pod_name], None);
    let target = element_where(&report["views"], "name", "target").expect("target view");
    let seen: Vec<(String, String, bool)> = ["nvidia0", "nvidia1", "nvidia2"]
        .iter()
        .map(|kind| {
            let row = element_where(&target["nodes"], "kind", kind)
                .unwrap_or_else(|| panic!("no {kind} in {target:#}"));
            (
                row["verdict"].as_str().expect("verdict").to_string(),
                row["gpu"].as_str().expect("gpu").to_string(),
                row["allocated"].as_bool().expect("allocated"),
            )
        })
        .collect();
    let expected: Vec<(String, String, bool)> = [
        ("allowed", GPUS[0].1, true),
        ("denied", GPUS[1].1, false),
        ("denied", GPUS[2].1, true),
    ]
    .iter()
    .map(|(v, g, a)| (v.to_string(), g.to_string(), *a))
    .collect();
    assert_eq!(seen, expected, "{report:#}");
    // Of GPUs 1 and 2, only the pod's own is a problem, in both views
    // (the host's /dev and the pod's).
    let gpu_problems: Vec<&str> = report["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .filter_map(Value::as_str)
        .filter(|p| p.contains("/dev/nvidia1:") || p.contains("/dev/nvidia2:"))
        .collect();
    assert_eq!(gpu_problems.len(), 2, "{gpu_problems:#?}");
    assert!(
        gpu_problems
            .iter()
            .all(|p| p.contains("/dev/nvidia2: denied")),
        "{gpu_problems:#?}"
    );

    fs::write(ctl.path().join("go"), "").expect("write go");
    let said = ctl.path().join("said");
    let deadline = Instant::now() + WAIT;
    while !said.exists() {
        assert!(Instant::now() < deadline, "the pod never opened its GPUs");
        thread::sleep(Duration::from_millis(50));
    }
    let said = fs::read_to_string(&said).expect("read said");
    assert_eq!(said.lines().collect::<Vec<_>>(), ["ok", "denied", "denied"]);

    let event_of = |minor: u32| {
        wait_for_event_of_id(
            &watcher,
            &id,
            |e| e["minor"] == minor && e["verdict"] == "denied",
            || format!("waited for a denial of GPU {minor}"),
        )
    };
    let probe = event_of(1);
    let incident = event_of(2);
    for (event, minor) in [(&probe, 1), (&incident, 2)] {
        let (_, uuid, bus) = GPUS[minor];
        assert_eq!(event["path"], format!("/dev/nvidia{minor}"), "{event:#}");
        assert_eq!(event["major"], 195, "{event:#}");
        assert_eq!(event["gpu"]["uuid"], uuid, "{event:#}");
        assert_eq!(event["gpu"]["pci_bus_id"], bus, "{event:#}");
        assert_eq!(event["gpu"]["minor"], minor, "{event:#}");
        let container = &event["container"];
        assert_eq!(container["runtime"], "containerd", "{event:#}");
        assert_eq!(container["cgroup"], cgroup.as_str(), "{event:#}");
        assert_eq!(container["namespace"], NAMESPACE, "{event:#}");
        assert_eq!(container["pod"], POD, "{event:#}");
        assert_eq!(container["pod_uid"], pod.uid.as_str(), "{event:#}");
        assert_eq!(container["name"], CONTAINER, "{event:#}");
        assert_eq!(
            event["allocation"]["container_gpus"],
            serde_json::json!([GPUS[0].1, GPUS[2].1]),
            "{event:#}"
        );
        // Never the whole frontend for a pod.
        assert!(!fix_text(event).contains("195:*"), "{event:#}");
    }
    assert_eq!(probe["allocation"]["allocated"], false, "{probe:#}");
    assert_eq!(probe["cause"], "not-allocated", "{probe:#}");
    assert_event_starts(
        &probe,
        "hint",
        "nothing, if the workload needs only the GPUs it was given",
    );
    assert_eq!(incident["allocation"]["allocated"], true, "{incident:#}");
    // The incident: the pod's own GPU, whose node was mounted, not passed.
    assert_eq!(incident["cause"], "device-denied", "{incident:#}");
    assert_event_starts(
        &incident,
        "hint",
        &format!("the kubelet allocated GPU {} to this container", GPUS[2].1),
    );
    assert_event_says(&incident, "hint", "`PASS_DEVICE_SPECS=true`");
    assert_event_says(&incident, "hint", "c 195:2 rw");
    // GPU 0 was the pod's and opened: seen allowed, never denied.
    let gpu0: Vec<Value> = events_of_id(&watcher, &id)
        .into_iter()
        .filter(|e| e["minor"] == 0)
        .collect();
    assert!(!gpu0.is_empty(), "the allowed open of GPU 0 is seen");
    assert!(gpu0.iter().all(|e| e["verdict"] == "allowed"), "{gpu0:#?}");
    drop(pod);
    drop(containerd);
    watcher.stop_cleanly();
}

#[test]
fn a_systemd_driver_pods_gpus_are_named_allocated_or_probed() {
    let (_driver, _nodes, pause, _stopped) = or_skip!(gpu_pod_lab);
    gpus_of_a_cri_pod(&pause, CgroupDriver::Systemd);
}

/// The cgroupfs driver on cgroup2: runc attaches its own program at
/// /kubepods/burstable/pod<UID>/<ID>, with no systemd unit about it.
#[test]
fn a_cgroupfs_driver_pods_gpus_are_named_allocated_or_probed() {
    let (_driver, _nodes, pause, _stopped) = or_skip!(gpu_pod_lab);
    gpus_of_a_cri_pod(&pause, CgroupDriver::Cgroupfs);
}
