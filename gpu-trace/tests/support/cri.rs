//! A Kubernetes node without the kubelet: a containerd of the test's own,
//! its CRI plugin driven over gRPC with the calls and the settings the
//! kubelet uses (the cgroupfs or the systemd cgroup driver, host-network
//! pods), and images imported
//! from tarballs made here, so that nothing is pulled.
//!
//! The CRI messages (`runtime.v1`, cri-api's api.proto) are declared by
//! hand with the API's field numbers, only the fields set or read; prost
//! skips the rest.

use std::{cell::RefCell, io::Read, os::unix::fs::symlink, process::Child};

use tonic::{codegen::http::uri::PathAndQuery, transport::Channel};

use crate::common::*;

/// Debian's containerd (with ctr) and the runc its shim runs.
pub const CONTAINERD: &str = "/usr/bin/containerd";
pub const CTR: &str = "/usr/bin/ctr";
pub const RUNC: &str = "/usr/sbin/runc";
const BUSYBOX: &str = "/bin/busybox";

/// The state directory of a real node's containerd. The CRI tasks' bundles
/// land in STATE/io.containerd.runtime.v2.task/k8s.io/<ID>, which is where
/// gpu-trace reads a pod's names: a containerd with a state directory of
/// its own would hide them from it. Shared safely with a dockerd's
/// containerd, which keeps its state under dockerd's exec root (namespace
/// moby); a node's own containerd is refused (containerd_installed).
pub const NODE_STATE: &str = "/run/containerd";
/// Where a node's own containerd would listen.
const NODE_SOCKET: &str = "/run/containerd/containerd.sock";

/// The images, imported under these names, never pulled.
const SANDBOX_IMAGE: &str = "gpu-trace.test/pause:1";
pub const BUSYBOX_IMAGE: &str = "gpu-trace.test/busybox:1";

/// Every CRI call gives up after this long.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// NamespaceMode.
const NAMESPACE_CONTAINER: i32 = 1;
const NAMESPACE_NODE: i32 = 2;

#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StatusResponse {
    #[prost(message, optional, tag = "1")]
    pub status: Option<RuntimeStatus>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RuntimeStatus {
    #[prost(message, repeated, tag = "1")]
    pub conditions: Vec<RuntimeCondition>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RuntimeCondition {
    #[prost(string, tag = "1")]
    pub r#type: String,
    #[prost(bool, tag = "2")]
    pub status: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub uid: String,
    #[prost(string, tag = "3")]
    pub namespace: String,
    #[prost(uint32, tag = "4")]
    pub attempt: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxConfig {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<PodSandboxMetadata>,
    #[prost(string, tag = "2")]
    pub hostname: String,
    /// Where the containers' logs go, each at its log_path.
    #[prost(string, tag = "3")]
    pub log_directory: String,
    #[prost(message, optional, tag = "8")]
    pub linux: Option<LinuxPodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxPodSandboxConfig {
    #[prost(string, tag = "1")]
    pub cgroup_parent: String,
    #[prost(message, optional, tag = "2")]
    pub security_context: Option<LinuxSandboxSecurityContext>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxSandboxSecurityContext {
    #[prost(message, optional, tag = "1")]
    pub namespace_options: Option<NamespaceOption>,
    /// A privileged container needs a privileged sandbox.
    #[prost(bool, tag = "6")]
    pub privileged: bool,
}

/// Modes are NamespaceMode values.
#[derive(Clone, PartialEq, prost::Message)]
pub struct NamespaceOption {
    #[prost(int32, tag = "1")]
    pub network: i32,
    #[prost(int32, tag = "2")]
    pub pid: i32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxRequest {
    #[prost(message, optional, tag = "1")]
    pub config: Option<PodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct RunPodSandboxResponse {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

/// StopPodSandboxRequest and RemovePodSandboxRequest alike.
#[derive(Clone, PartialEq, prost::Message)]
pub struct PodSandboxIdRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
}

/// The answers that carry nothing.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Empty {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerMetadata {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(uint32, tag = "2")]
    pub attempt: u32,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ImageSpec {
    #[prost(string, tag = "1")]
    pub image: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Mount {
    #[prost(string, tag = "1")]
    pub container_path: String,
    #[prost(string, tag = "2")]
    pub host_path: String,
    #[prost(bool, tag = "3")]
    pub readonly: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Device {
    #[prost(string, tag = "1")]
    pub container_path: String,
    #[prost(string, tag = "2")]
    pub host_path: String,
    #[prost(string, tag = "3")]
    pub permissions: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerConfig {
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ContainerMetadata>,
    #[prost(message, optional, tag = "2")]
    pub image: Option<ImageSpec>,
    #[prost(string, repeated, tag = "3")]
    pub command: Vec<String>,
    #[prost(string, repeated, tag = "4")]
    pub args: Vec<String>,
    #[prost(message, repeated, tag = "6")]
    pub envs: Vec<KeyValue>,
    #[prost(message, repeated, tag = "7")]
    pub mounts: Vec<Mount>,
    #[prost(message, repeated, tag = "8")]
    pub devices: Vec<Device>,
    /// In the sandbox's log_directory.
    #[prost(string, tag = "11")]
    pub log_path: String,
    #[prost(message, optional, tag = "15")]
    pub linux: Option<LinuxContainerConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(string, tag = "2")]
    pub value: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerConfig {
    #[prost(message, optional, tag = "1")]
    pub resources: Option<LinuxContainerResources>,
    #[prost(message, optional, tag = "2")]
    pub security_context: Option<LinuxContainerSecurityContext>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerSecurityContext {
    #[prost(bool, tag = "2")]
    pub privileged: bool,
    #[prost(message, optional, tag = "3")]
    pub namespace_options: Option<NamespaceOption>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerRequest {
    #[prost(string, tag = "1")]
    pub pod_sandbox_id: String,
    #[prost(message, optional, tag = "2")]
    pub config: Option<ContainerConfig>,
    #[prost(message, optional, tag = "3")]
    pub sandbox_config: Option<PodSandboxConfig>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct CreateContainerResponse {
    #[prost(string, tag = "1")]
    pub container_id: String,
}

/// StartContainerRequest and RemoveContainerRequest alike.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerIdRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct StopContainerRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(int64, tag = "2")]
    pub timeout: i64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct LinuxContainerResources {
    #[prost(int64, tag = "3")]
    pub cpu_shares: i64,
    /// 0: no limit.
    #[prost(int64, tag = "4")]
    pub memory_limit_in_bytes: i64,
    #[prost(string, tag = "6")]
    pub cpuset_cpus: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct UpdateContainerResourcesRequest {
    #[prost(string, tag = "1")]
    pub container_id: String,
    #[prost(message, optional, tag = "2")]
    pub linux: Option<LinuxContainerResources>,
}

/// The service's methods.
const STATUS: &str = "/runtime.v1.RuntimeService/Status";
const RUN_POD_SANDBOX: &str = "/runtime.v1.RuntimeService/RunPodSandbox";
const STOP_POD_SANDBOX: &str = "/runtime.v1.RuntimeService/StopPodSandbox";
const REMOVE_POD_SANDBOX: &str = "/runtime.v1.RuntimeService/RemovePodSandbox";
const CREATE_CONTAINER: &str = "/runtime.v1.RuntimeService/CreateContainer";
const START_CONTAINER: &str = "/runtime.v1.RuntimeService/StartContainer";
const UPDATE_CONTAINER_RESOURCES: &str = "/runtime.v1.RuntimeService/UpdateContainerResources";
const STOP_CONTAINER: &str = "/runtime.v1.RuntimeService/StopContainer";
const REMOVE_CONTAINER: &str = "/runtime.v1.RuntimeService/RemoveContainer";

/// One unary call on `channel`.
async fn unary<Req, Resp>(
    channel: Channel,
    method: &'static str,
    request: Req,
) -> Result<Resp, tonic::Status>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(format!("{method}: {e}")))?;
    let answer = grpc
        .unary(
            tonic::Request::new(request),
            PathAndQuery::from_static(method),
            tonic::codec::ProstCodec::default(),
        )
        .await?;
    Ok(answer.into_inner())
}

/// Debian's containerd, ctr and runc, and busybox-static for the images;
/// false (said, through crate::skip) where one is missing.
pub fn containerd_installed(test: &str) -> bool {
    let missing: Vec<&str> = [CONTAINERD, CTR, RUNC, BUSYBOX]
        .into_iter()
        .filter(|path| !Path::new(path).exists())
        .collect();
    if !missing.is_empty() {
        let why = format!(
            "{} not installed (containerd, runc, busybox-static)",
            missing.join(", ")
        );
        crate::skip::cannot_run(test, &why);
        return false;
    }
    if Path::new(NODE_SOCKET).exists() {
        // Two containerds sharing one state directory would manage each
        // other's tasks.
        let why = format!("a containerd of the node's own uses {NODE_STATE}");
        crate::skip::cannot_run(test, &why);
        return false;
    }
    true
}

/// How the kubelet and runc lay out a pod's cgroups.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum CgroupDriver {
    /// `/kubepods/burstable/pod<UID>/<ID>`, written by runc itself.
    Cgroupfs,
    /// `/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<UID>.slice/cri-containerd-<ID>.scope`:
    /// units of systemd, which runc asks to make them.
    Systemd,
}

impl CgroupDriver {
    /// The pod's cgroup parent as the kubelet passes it in RunPodSandbox.
    fn cgroup_parent(self, uid: &str) -> String {
        match self {
            CgroupDriver::Cgroupfs => self.pod_cgroup(uid),
            CgroupDriver::Systemd => pod_slice(uid),
        }
    }

    /// The pod's cgroup, from the root of a hierarchy.
    fn pod_cgroup(self, uid: &str) -> String {
        match self {
            CgroupDriver::Cgroupfs => format!("/kubepods/burstable/pod{uid}"),
            CgroupDriver::Systemd => format!(
                "/kubepods.slice/kubepods-burstable.slice/{}",
                pod_slice(uid)
            ),
        }
    }

    /// A container's cgroup in its pod's.
    fn container_cgroup(self, uid: &str, id: &str) -> String {
        match self {
            CgroupDriver::Cgroupfs => format!("{}/{id}", self.pod_cgroup(uid)),
            CgroupDriver::Systemd => {
                format!("{}/cri-containerd-{id}.scope", self.pod_cgroup(uid))
            }
        }
    }

    /// Removes what a pod left: systemd stops its slice; under cgroupfs the
    /// directories are removed by hand (containerd never does).
    fn remove_pod_cgroups(self, uid: &str) {
        match self {
            CgroupDriver::Cgroupfs => remove_pod_cgroups(uid),
            CgroupDriver::Systemd => {
                let _ = Command::new("systemctl")
                    .args(["stop", &pod_slice(uid)])
                    .output();
            }
        }
    }
}

/// The systemd driver's slice for a pod: the kubelet writes a UID's dashes
/// as underscores, since a dash in a slice's name means a level.
fn pod_slice(uid: &str) -> String {
    format!("kubepods-burstable-pod{}.slice", uid.replace('-', "_"))
}

/// A containerd of the test's own: its root (images, snapshots, metadata),
/// socket and config in a temporary directory, its state where a node's
/// is (NODE_STATE). Stopped on drop, with the pods' cgroups it leaves.
pub struct Containerd {
    child: Child,
    driver: CgroupDriver,
    dir: tempfile::TempDir,
    socket: PathBuf,
    runtime: tokio::runtime::Runtime,
    channel: Channel,
    /// Pods run, by UID: their cgroups are removed after the daemon stops.
    pod_uids: RefCell<Vec<String>>,
}

impl Containerd {
    /// Starts it with the cgroupfs driver (as `start_with`).
    pub fn start(pause: &Path) -> Self {
        Self::start_with(pause, CgroupDriver::Cgroupfs)
    }

    /// Starts it with `driver`, waits until its CRI says RuntimeReady, and
    /// imports the sandbox image (the static C pause `pause`) and the
    /// busybox image.
    pub fn start_with(pause: &Path, driver: CgroupDriver) -> Self {
        let dir = temp_dir_named("gpu-trace-containerd-");
        // Not /run/containerd/containerd.sock: a dockerd started meanwhile
        // would take that for a node's containerd and use it.
        let socket = dir.path().join("containerd.sock");
        let config = dir.path().join("config.toml");
        let cni = dir.path().join("cni");
        fs::create_dir_all(&cni).expect("cni dir");
        // As a kubeadm node with `driver`, host-network pods only: no CNI config, so NetworkReady stays false, which
        // host-network pods do not need. restrict_oom_score_adj: root here
        // may lack CAP_SYS_RESOURCE, and runc could not lower the sandbox's
        // oom_score_adj to -998.
        let text = format!(
            r#"version = 2
root = "{root}"
state = "{NODE_STATE}"

[grpc]
  address = "{socket}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{SANDBOX_IMAGE}"
  restrict_oom_score_adj = true
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni}"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{RUNC}"
        SystemdCgroup = {systemd}

[plugins."io.containerd.internal.v1.opt"]
  path = "{opt}"
"#,
            root = dir.path().join("root").display(),
            socket = socket.display(),
            cni = cni.display(),
            opt = dir.path().join("opt").display(),
            systemd = driver == CgroupDriver::Systemd,
        );
        fs::write(&config, text).expect("write config.toml");
        let log = fs::File::create(dir.path().join("containerd.log")).expect("log");
        let child = Command::new(CONTAINERD)
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start containerd");
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        let mut child = child;
        let deadline = Instant::now() + Duration::from_secs(60);
        // A new channel each time: one made before the socket is there
        // waits about a second before it tries again.
        loop {
            if let Some(status) = child.try_wait().expect("containerd") {
                panic!(
                    "containerd exited ({status}) before its CRI was ready: {}",
                    log_tail(&dir.path().join("containerd.log"))
                );
            }
            if runtime.block_on(runtime_ready(&socket)) {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "containerd's CRI was not ready in 60 s: {}",
                    log_tail(&dir.path().join("containerd.log"))
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
        let channel = runtime
            .block_on(gpu_trace::host::grpc_unix::unix_channel(
                &socket,
                CALL_TIMEOUT,
            ))
            .expect("connect to containerd");
        let daemon = Self {
            child,
            driver,
            dir,
            socket,
            runtime,
            channel,
            pod_uids: RefCell::new(Vec::new()),
        };
        daemon.import(SANDBOX_IMAGE, &[(pause, "pause")], &[], &["/pause"]);
        daemon.import(
            BUSYBOX_IMAGE,
            &[(Path::new(BUSYBOX), "bin/busybox")],
            &[("busybox", "bin/sh"), ("busybox", "bin/sleep")],
            &["/bin/sh"],
        );
        daemon
    }

    /// An image saved by `docker save` (or made as `import` makes one),
    /// imported into the CRI's namespace under the names it carries.
    pub fn import_tarball(&self, tarball: &Path) {
        run_ok(
            Command::new(CTR)
                .arg("--address")
                .arg(&self.socket)
                .args(["--namespace", "k8s.io", "images", "import"])
                .arg(tarball),
        );
    }

    /// The daemon's log, for a failure's message.
    pub fn log_tail(&self) -> String {
        log_tail(&self.dir.path().join("containerd.log"))
    }

    /// One CRI call, run to its end on the harness's runtime.
    fn call<Req, Resp>(
        &self,
        method: &'static str,
        request: Req,
    ) -> Result<Resp, Box<tonic::Status>>
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        self.runtime
            .block_on(unary(self.channel.clone(), method, request))
            .map_err(Box::new)
    }

    /// A docker-save tarball (manifest.json with RepoTags, the config, one
    /// layer.tar) of `files` (host file, path in the image) and `links`
    /// (target, path in the image), imported into the CRI's namespace.
    fn import(
        &self,
        name: &str,
        files: &[(&Path, &str)],
        links: &[(&str, &str)],
        entrypoint: &[&str],
    ) {
        let work = temp_dir_named("gpu-trace-image-");
        let rootfs = work.path().join("rootfs");
        for (from, to) in files {
            let to = rootfs.join(to);
            fs::create_dir_all(to.parent().expect("a parent")).expect("image dirs");
            fs::copy(from, &to).expect("copy into the image");
        }
        for (target, link) in links {
            symlink(target, rootfs.join(link)).expect("link in the image");
        }
        let archive = work.path().join("archive");
        fs::create_dir_all(&archive).expect("archive dir");
        let layer = archive.join("layer.tar");
        run_ok(
            Command::new("tar")
                .arg("-C")
                .arg(&rootfs)
                .arg("-cf")
                .arg(&layer)
                .arg("."),
        );
        let sum = run_ok(Command::new("sha256sum").arg(&layer));
        let diff_id = sum.split_whitespace().next().expect("a digest");
        let architecture = match std::env::consts::ARCH {
            "x86_64" => "amd64",
            "aarch64" => "arm64",
            other => other,
        };
        let config = serde_json::json!({
            "architecture": architecture,
            "os": "linux",
            "config": {"Entrypoint": entrypoint},
            "rootfs": {"type": "layers", "diff_ids": [format!("sha256:{diff_id}")]},
        });
        fs::write(archive.join("config.json"), config.to_string()).expect("image config");
        let manifest = serde_json::json!([{
            "Config": "config.json",
            "RepoTags": [name],
            "Layers": ["layer.tar"],
        }]);
        fs::write(archive.join("manifest.json"), manifest.to_string()).expect("manifest");
        let tarball = work.path().join("image.tar");
        run_ok(
            Command::new("tar")
                .arg("-C")
                .arg(&archive)
                .arg("-cf")
                .arg(&tarball)
                .args(["manifest.json", "config.json", "layer.tar"]),
        );
        self.import_tarball(&tarball);
    }
}

/// Whether the CRI at `socket` reports RuntimeReady.
async fn runtime_ready(socket: &Path) -> bool {
    let Ok(channel) =
        gpu_trace::host::grpc_unix::unix_channel(socket, Duration::from_secs(2)).await
    else {
        return false;
    };
    let status: Result<StatusResponse, _> = unary(channel, STATUS, StatusRequest {}).await;
    status.is_ok_and(|s| {
        s.status.is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.r#type == "RuntimeReady" && c.status)
        })
    })
}

/// `command`'s stdout; panics with its stderr when it fails.
fn run_ok(command: &mut Command) -> String {
    let out = command
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{command:?}: {e}"));
    assert!(
        out.status.success(),
        "{command:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The last lines of a log.
fn log_tail(path: &Path) -> String {
    let text = fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

impl Drop for Containerd {
    /// SIGTERM, then the pod cgroups: containerd never removes them.
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for uid in self.pod_uids.borrow().iter() {
            self.driver.remove_pod_cgroups(uid);
        }
    }
}

/// A fresh pod UID: a version 4 UUID, as the API server makes them.
fn pod_uid() -> String {
    let mut bytes = [0u8; 16];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("read /dev/urandom");
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Every cgroup hierarchy's mount point: each v1 one and the unified tree.
fn cgroup_mounts() -> Vec<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").expect("read mountinfo");
    mountinfo
        .lines()
        .filter_map(|line| {
            let (mount, fs) = line.split_once(" - ")?;
            let fstype = fs.split(' ').next()?;
            let point = mount.split(' ').nth(4)?;
            ["cgroup", "cgroup2"]
                .contains(&fstype)
                .then(|| PathBuf::from(point))
        })
        .collect()
}

/// Removes the pod's cgroup from every hierarchy, its children first, and
/// the kubepods parents once empty (rmdir refuses a cgroup still in use).
fn remove_pod_cgroups(uid: &str) {
    let pod = CgroupDriver::Cgroupfs.pod_cgroup(uid);
    for mount in cgroup_mounts() {
        let dir = mount.join(&pod[1..]);
        if dir.exists() {
            for _ in 0..50 {
                if remove_tree(&dir).is_ok() {
                    break;
                }
                thread::sleep(Duration::from_millis(20));
            }
        }
        for parent in ["kubepods/burstable", "kubepods"] {
            let _ = fs::remove_dir(mount.join(parent));
        }
    }
}

/// Removes a cgroup directory and its children, deepest first.
fn remove_tree(dir: &Path) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)?.flatten() {
        if entry.file_type()?.is_dir() {
            remove_tree(&entry.path())?;
        }
    }
    match fs::remove_dir(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// A pod of one container, made as the kubelet makes it.
pub struct PodSpec {
    pub namespace: String,
    pub name: String,
    pub container: String,
    pub image: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    pub envs: Vec<KeyValue>,
    pub devices: Vec<Device>,
    pub mounts: Vec<Mount>,
    pub privileged: bool,
    /// The node's PID namespace (`hostPID: true`).
    pub host_pid: bool,
    /// 0: none.
    pub memory_limit: i64,
    /// The container's stdout and stderr, in the CRI's log format.
    pub log_file: Option<PathBuf>,
}

impl PodSpec {
    /// Pod `name` in `namespace` whose container `container` runs `command`
    /// from the busybox image.
    pub fn new(namespace: &str, name: &str, container: &str, command: &[&str]) -> Self {
        Self {
            namespace: namespace.into(),
            name: name.into(),
            container: container.into(),
            image: BUSYBOX_IMAGE.into(),
            command: command.iter().map(|s| s.to_string()).collect(),
            args: Vec::new(),
            envs: Vec::new(),
            devices: Vec::new(),
            mounts: Vec::new(),
            privileged: false,
            host_pid: false,
            memory_limit: 0,
            log_file: None,
        }
    }

    /// Pod `name` in `namespace` whose container `container` runs the
    /// entry point of `image` (imported with `Containerd::import_tarball`)
    /// with `args`.
    pub fn of_image(
        namespace: &str,
        name: &str,
        container: &str,
        image: &str,
        args: Vec<String>,
    ) -> Self {
        Self {
            image: image.into(),
            args,
            ..Self::new(namespace, name, container, &[])
        }
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.envs.push(KeyValue {
            key: key.into(),
            value: value.into(),
        });
        self
    }

    /// A device passed as a device plugin passes one: rw in the cgroup.
    pub fn device(mut self, host: &Path, container: &str) -> Self {
        self.devices.push(Device {
            container_path: container.into(),
            host_path: host.display().to_string(),
            permissions: "rw".into(),
        });
        self
    }

    /// A hostPath volume.
    pub fn mount(mut self, host: &Path, container: &str, readonly: bool) -> Self {
        self.mounts.push(Mount {
            container_path: container.into(),
            host_path: host.display().to_string(),
            readonly,
        });
        self
    }

    /// RunPodSandbox, CreateContainer, StartContainer.
    pub fn run(self, containerd: &Containerd) -> Pod<'_> {
        let pid = if self.host_pid {
            NAMESPACE_NODE
        } else {
            NAMESPACE_CONTAINER
        };
        let namespaces = NamespaceOption {
            network: NAMESPACE_NODE,
            pid,
        };
        let (log_directory, log_path) = match &self.log_file {
            Some(file) => (
                file.parent().expect("a log folder").display().to_string(),
                file.file_name()
                    .expect("a log file")
                    .to_string_lossy()
                    .into_owned(),
            ),
            None => (String::new(), String::new()),
        };
        let uid = pod_uid();
        // Recorded first: a failed RunPodSandbox leaves the cgroup too.
        containerd.pod_uids.borrow_mut().push(uid.clone());
        let mut pod = Pod {
            containerd,
            uid: uid.clone(),
            sandbox_id: None,
            container_id: None,
        };
        let sandbox_config = PodSandboxConfig {
            metadata: Some(PodSandboxMetadata {
                name: self.name.clone(),
                uid: uid.clone(),
                namespace: self.namespace.clone(),
                attempt: 0,
            }),
            // Must be empty: a host-network pod has no UTS namespace of its own.
            hostname: String::new(),
            log_directory,
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: containerd.driver.cgroup_parent(&uid),
                security_context: Some(LinuxSandboxSecurityContext {
                    namespace_options: Some(namespaces.clone()),
                    privileged: self.privileged,
                }),
            }),
        };
        let sandbox: RunPodSandboxResponse = pod.expect(
            RUN_POD_SANDBOX,
            RunPodSandboxRequest {
                config: Some(sandbox_config.clone()),
            },
        );
        pod.sandbox_id = Some(sandbox.pod_sandbox_id.clone());
        let created: CreateContainerResponse = pod.expect(
            CREATE_CONTAINER,
            CreateContainerRequest {
                pod_sandbox_id: sandbox.pod_sandbox_id,
                config: Some(ContainerConfig {
                    metadata: Some(ContainerMetadata {
                        name: self.container,
                        attempt: 0,
                    }),
                    image: Some(ImageSpec { image: self.image }),
                    command: self.command,
                    args: self.args,
                    envs: self.envs,
                    mounts: self.mounts,
                    devices: self.devices,
                    log_path,
                    linux: Some(LinuxContainerConfig {
                        resources: Some(LinuxContainerResources {
                            memory_limit_in_bytes: self.memory_limit,
                            ..Default::default()
                        }),
                        security_context: Some(LinuxContainerSecurityContext {
                            privileged: self.privileged,
                            namespace_options: Some(namespaces),
                        }),
                    }),
                }),
                sandbox_config: Some(sandbox_config),
            },
        );
        pod.container_id = Some(created.container_id.clone());
        let _: Empty = pod.expect(
            START_CONTAINER,
            ContainerIdRequest {
                container_id: created.container_id,
            },
        );
        pod
    }
}

/// A running pod; stopped and removed on drop, as the kubelet deletes one.
pub struct Pod<'a> {
    containerd: &'a Containerd,
    pub uid: String,
    sandbox_id: Option<String>,
    container_id: Option<String>,
}

impl Pod<'_> {
    pub fn container_id(&self) -> &str {
        self.container_id.as_deref().expect("a container")
    }

    /// The container's cgroup, from the root of every hierarchy.
    pub fn container_cgroup(&self) -> String {
        self.containerd
            .driver
            .container_cgroup(&self.uid, self.container_id())
    }

    /// UpdateContainerResources, as the kubelet's CPU manager sends it.
    pub fn update_resources(&self, cpu_shares: i64, cpuset_cpus: &str) {
        let _: Empty = self.expect(
            UPDATE_CONTAINER_RESOURCES,
            UpdateContainerResourcesRequest {
                container_id: self.container_id().into(),
                linux: Some(LinuxContainerResources {
                    cpu_shares,
                    cpuset_cpus: cpuset_cpus.into(),
                    ..Default::default()
                }),
            },
        );
    }

    /// StopContainer as the kubelet sends it when a pod is deleted: the
    /// stop signal, then SIGKILL after `grace`.
    pub fn stop_within(&self, grace: Duration) {
        let _: Empty = self.expect(
            STOP_CONTAINER,
            StopContainerRequest {
                container_id: self.container_id().into(),
                timeout: grace.as_secs() as i64,
            },
        );
    }

    /// The answer, or a panic with the call's error and containerd's log.
    fn expect<Req, Resp>(&self, method: &'static str, request: Req) -> Resp
    where
        Req: prost::Message + Send + Sync + 'static,
        Resp: prost::Message + Default + Send + Sync + 'static,
    {
        self.containerd.call(method, request).unwrap_or_else(|e| {
            panic!(
                "{method}: {e}\ncontainerd's log:\n{}",
                self.containerd.log_tail()
            )
        })
    }
}

impl Drop for Pod<'_> {
    fn drop(&mut self) {
        let cri = self.containerd;
        if let Some(id) = self.container_id.take() {
            let stop = StopContainerRequest {
                container_id: id.clone(),
                timeout: 0,
            };
            let _ = cri.call::<_, Empty>(STOP_CONTAINER, stop);
            let remove = ContainerIdRequest { container_id: id };
            let _ = cri.call::<_, Empty>(REMOVE_CONTAINER, remove);
        }
        if let Some(id) = self.sandbox_id.take() {
            let stop = PodSandboxIdRequest {
                pod_sandbox_id: id.clone(),
            };
            let _ = cri.call::<_, Empty>(STOP_POD_SANDBOX, stop);
            let remove = PodSandboxIdRequest { pod_sandbox_id: id };
            let _ = cri.call::<_, Empty>(REMOVE_POD_SANDBOX, remove);
        }
        cri.driver.remove_pod_cgroups(&self.uid);
    }
}
