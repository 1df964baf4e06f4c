//! The DaemonSet as shipped (contrib/kubernetes/daemonset.yaml), run as
//! the kubelet would run it, through containerd's CRI, from the image
//! `cargo xtask image` saves: its arguments with their `$(VAR)`s expanded,
//! its environment, privileges, host PID namespace, memory limit and
//! hostPath mounts, read from the manifest itself. It must name a GPU pod
//! made beside it by namespace, pod, container and GPU, tell a probe from
//! an incident through the kubelet's socket it mounts, count it for
//! Prometheus, and stop as the kubelet stops it, leaving nothing attached.
//!
//! One difference from a cluster: no CNI here, so the pod runs on the
//! node's network and its `status.podIP` is the loopback address.

use std::collections::HashSet;

use yaml_rust2::YamlLoader;

use crate::{
    common::*,
    cri::{CgroupDriver, Containerd, PodSpec},
    lab::patch_like_a_hook,
    pod_gpus::{gpu_node, gpu_pod_lab, kubelet_at_its_socket},
};

const NAMESPACE: &str = "batch";
const POD: &str = "sweep-3";
const CONTAINER: &str = "worker";
const PROBED_UUID: &str = "GPU-5ca1ab1e-0000-4000-8000-000000000001";
const GIVEN_UUID: &str = "GPU-5ca1ab1e-0000-4000-8000-000000000000";

/// What the kubelet would make of the manifest's one container.
struct DaemonSetPod {
    args: Vec<String>,
    envs: Vec<(String, String)>,
    host_pid: bool,
    privileged: bool,
    memory_limit: i64,
    image: String,
    /// (host path, container path, read-only)
    mounts: Vec<(PathBuf, String, bool)>,
    metrics_port: u16,
}

/// The manifest at GPU_TRACE_LAB_DAEMONSET, read as the kubelet reads it.
fn daemonset_pod(manifest: &Path) -> DaemonSetPod {
    let text = fs::read_to_string(manifest).expect("read the DaemonSet");
    let ds = YamlLoader::load_from_str(&text)
        .expect("the DaemonSet's YAML")
        .remove(0);
    let spec = &ds["spec"]["template"]["spec"];
    let containers = spec["containers"].as_vec().expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    let container = &containers[0];
    let node = fs::read_to_string("/etc/hostname").expect("hostname");
    let envs: Vec<(String, String)> = container["env"]
        .as_vec()
        .expect("env")
        .iter()
        .map(|env| {
            let name = env["name"].as_str().expect("an env name").to_string();
            let value = match env["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                // The node's network (see above).
                Some("status.podIP" | "status.hostIP") => "127.0.0.1".to_string(),
                Some("spec.nodeName") => node.trim().to_string(),
                Some(other) => panic!("a fieldRef the lab does not resolve: {other}"),
                None => env["value"].as_str().expect("a value").to_string(),
            };
            (name, value)
        })
        .collect();
    // The kubelet's expansion of $(VAR) in args.
    let args = container["args"]
        .as_vec()
        .expect("args")
        .iter()
        .map(|arg| {
            envs.iter()
                .fold(arg.as_str().expect("an arg").to_string(), |arg, (k, v)| {
                    arg.replace(&format!("$({k})"), v)
                })
        })
        .collect();
    let volumes = spec["volumes"].as_vec().expect("volumes");
    let mounts = container["volumeMounts"]
        .as_vec()
        .expect("volumeMounts")
        .iter()
        .map(|mount| {
            let name = mount["name"].as_str().expect("a volume name");
            let volume = volumes
                .iter()
                .find(|v| v["name"].as_str() == Some(name))
                .unwrap_or_else(|| panic!("no volume {name}"));
            let host = PathBuf::from(volume["hostPath"]["path"].as_str().expect("a hostPath"));
            if volume["hostPath"]["type"].as_str() == Some("DirectoryOrCreate") {
                fs::create_dir_all(&host).expect("DirectoryOrCreate");
            }
            let readonly = mount["readOnly"].as_bool().unwrap_or(false);
            let path = mount["mountPath"]
                .as_str()
                .expect("a mountPath")
                .to_string();
            (host, path, readonly)
        })
        .collect();
    let memory = container["resources"]["limits"]["memory"]
        .as_str()
        .expect("a memory limit");
    let mebibytes: i64 = memory
        .strip_suffix("Mi")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a limit in Mi, not {memory}"));
    let port = container["ports"]
        .as_vec()
        .expect("ports")
        .iter()
        .find(|p| p["name"].as_str() == Some("metrics"))
        .and_then(|p| p["containerPort"].as_i64())
        .expect("the metrics port");
    DaemonSetPod {
        args,
        envs,
        host_pid: spec["hostPID"].as_bool() == Some(true),
        privileged: container["securityContext"]["privileged"].as_bool() == Some(true),
        memory_limit: mebibytes * 1024 * 1024,
        image: container["image"].as_str().expect("an image").to_string(),
        mounts,
        metrics_port: u16::try_from(port).expect("a port"),
    }
}

/// The stream and text of each line of a CRI container log
/// (`TIME STREAM TAG TEXT`).
fn log_lines(log: &Path) -> Vec<(String, String)> {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let mut parts = line.splitn(4, ' ');
            let (_time, stream, _tag) = (parts.next()?, parts.next()?, parts.next()?);
            Some((stream.to_string(), parts.next().unwrap_or("").to_string()))
        })
        .collect()
}

/// Waits for a line of `stream` that `wanted` accepts.
fn wait_for_log(log: &Path, stream: &str, what: &str, wanted: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        let lines = log_lines(log);
        if let Some((_, text)) = lines.iter().find(|(s, t)| s == stream && wanted(t)) {
            return text.clone();
        }
        assert!(
            Instant::now() < deadline,
            "the DaemonSet's pod never wrote {what}: {lines:#?}"
        );
        thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_daemonset_as_shipped_names_a_pods_probed_gpu_from_its_own_pod() {
    let (_driver, _nodes, pause, _stopped) = or_skip!(gpu_pod_lab);
    let (Ok(manifest), Ok(image)) = (
        std::env::var("GPU_TRACE_LAB_DAEMONSET"),
        std::env::var("GPU_TRACE_LAB_TRACE_IMAGE"),
    ) else {
        panic!("the lab sets GPU_TRACE_LAB_DAEMONSET and GPU_TRACE_LAB_TRACE_IMAGE");
    };
    let shipped = daemonset_pod(Path::new(&manifest));
    assert!(shipped.host_pid && shipped.privileged);
    let kubelet = kubelet_at_its_socket();
    kubelet.allocate(NAMESPACE, POD, CONTAINER, &[GIVEN_UUID]);
    let containerd = Containerd::start_with(&pause, CgroupDriver::Systemd);
    containerd.import_tarball(Path::new(&image));

    let logs = temp_dir_named("gpu-trace-daemonset-logs-");
    let log = logs.path().join("gpu-trace.log");
    let mut spec = PodSpec::of_image(
        "kube-system",
        "gpu-trace-x7k2p",
        "gpu-trace",
        &shipped.image,
        shipped.args.clone(),
    );
    for (key, value) in &shipped.envs {
        spec = spec.env(key, value);
    }
    for (host, path, readonly) in &shipped.mounts {
        spec = spec.mount(host, path, *readonly);
    }
    spec.privileged = shipped.privileged;
    spec.host_pid = shipped.host_pid;
    spec.memory_limit = shipped.memory_limit;
    spec.log_file = Some(log.clone());
    let before = gpu_trace_program_ids();
    let tracer = spec.run(&containerd);
    wait_for_log(&log, "stderr", "its ready line", |t| {
        t.starts_with("gpu-trace: ready")
    });
    let limit = Path::new("/sys/fs/cgroup")
        .join(&tracer.container_cgroup()[1..])
        .join("memory.max");
    assert_eq!(
        fs::read_to_string(&limit).expect("memory.max").trim(),
        shipped.memory_limit.to_string(),
        "the manifest's limit holds it"
    );

    // The workload: given GPU 0 by the device plugin, a probe of GPU 1
    // through a mounted node, as NVML's scan makes one; later an open of
    // the uvm node, mounted only.
    let ctl = temp_dir_named("gpu-trace-pod-ctl-");
    let script = "while [ ! -e /ctl/go ]; do sleep 0.1; done; \
        (exec 3<>/dev/nvidia1) 2>/dev/null; \
        while [ ! -e /ctl/go2 ]; do sleep 0.1; done; \
        (exec 3<>/dev/nvidia-uvm) 2>/dev/null; exec sleep 600";
    let workload = PodSpec::new(NAMESPACE, POD, CONTAINER, &["/bin/sh", "-c", script])
        .device(&gpu_node(0), "/dev/nvidia0")
        .mount(&gpu_node(1), "/dev/nvidia1", false)
        .mount(Path::new("/dev/nvidia-uvm"), "/dev/nvidia-uvm", false)
        .mount(ctl.path(), "/ctl", false)
        .run(&containerd);
    // Its first process has started by now: the rewrite below must come
    // past the start's grace (2 s) from here, however slow the guest.
    let started = Instant::now();
    fs::write(ctl.path().join("go"), "").expect("write go");
    let line = wait_for_log(&log, "stdout", "the probe's event", |t| {
        t.contains("\"/dev/nvidia1\"")
    });
    let event: Value = serde_json::from_str(&line).expect("a JSON event");
    assert_eq!(event["verdict"], "denied", "{event:#}");
    assert_eq!(event["cause"], "not-allocated", "{event:#}");
    assert_eq!(event["gpu"]["uuid"], PROBED_UUID, "{event:#}");
    assert_eq!(event["allocation"]["allocated"], false, "{event:#}");
    let container = &event["container"];
    assert_eq!(container["runtime"], "containerd", "{event:#}");
    assert_eq!(container["id"], workload.container_id(), "{event:#}");
    assert_eq!(
        container["cgroup"],
        workload.container_cgroup().as_str(),
        "{event:#}"
    );
    assert_eq!(container["namespace"], NAMESPACE, "{event:#}");
    assert_eq!(container["pod"], POD, "{event:#}");
    assert_eq!(container["name"], CONTAINER, "{event:#}");

    let metrics = scrape(&format!("127.0.0.1:{}", shipped.metrics_port));
    assert!(
        metrics
            .lines()
            .any(|l| l == "gpu_trace_problems_total{cause=\"not-allocated\"} 1"),
        "{metrics}"
    );

    // kubernetes#77073 seen from the DaemonSet: the uvm node allowed by a
    // hook's patch, then the kubelet's update (past the start's grace)
    // makes systemd rewrite the rules; the trigger comes from the scope's
    // drop-ins, through the manifest's /run/systemd/transient mount.
    let scope = workload.container_cgroup();
    patch_like_a_hook(&scope);
    thread::sleep(Duration::from_secs(3).saturating_sub(started.elapsed()));
    workload.update_resources(1024, "0");
    fs::write(ctl.path().join("go2"), "").expect("write go2");
    let line = wait_for_log(&log, "stdout", "the rewrite's event", |t| {
        t.contains("\"/dev/nvidia-uvm\"")
    });
    let event: Value = serde_json::from_str(&line).expect("a JSON event");
    assert_eq!(event["cause"], "rules-rewritten", "{event:#}");
    let trigger = &event["denied_by"]["writer"]["trigger"];
    assert_eq!(
        trigger["unit"],
        scope.rsplit('/').next().expect("the scope"),
        "{event:#}"
    );
    assert_eq!(
        trigger["properties"],
        serde_json::json!(["AllowedCPUs", "CPUWeight"]),
        "{event:#}"
    );
    drop(workload);

    // As the kubelet deletes a pod: SIGTERM, then a grace period.
    let ours: HashSet<u32> = gpu_trace_program_ids()
        .difference(&before)
        .copied()
        .collect();
    assert!(!ours.is_empty(), "its programs are loaded");
    tracer.stop_within(Duration::from_secs(30));
    wait_for_log(&log, "stderr", "its closing line", |t| {
        t.contains("detached;")
    });
    let deadline = Instant::now() + WAIT;
    while gpu_trace_program_ids().intersection(&ours).next().is_some() {
        assert!(
            Instant::now() < deadline,
            "left loaded after the pod stopped"
        );
        thread::sleep(Duration::from_millis(100));
    }
    drop(tracer);
    drop(containerd);
}
