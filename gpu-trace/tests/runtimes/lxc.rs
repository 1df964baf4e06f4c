//! A real LXC container whose device policy LXC itself generates and
//! attaches: the incident as users meet it on Proxmox and LXC hosts.
//!
//! LXC writes cgroup2 device programs only when it sees a pure cgroup2
//! layout, so the container starts in a private mount namespace with
//! cgroup2 mounted at /sys/fs/cgroup (the hierarchy is the host's own).

use std::{os::unix::fs::symlink, process::Child};

use gpu_trace::kernel::bpf_sys::device_programs;

use crate::common::*;

/// A container's files and the command that starts it with lxc-execute.
pub struct LxcContainer {
    pub name: String,
    dir: tempfile::TempDir,
    /// `unshare -m sh -c SCRIPT`: starts the container in its own mount namespace.
    argv: Vec<String>,
    /// Set by `start`; stopped and reaped on drop.
    running: Option<Child>,
}

impl LxcContainer {
    /// A container that runs `command` (busybox sh) and may use c 195:* and
    /// /dev/null only, with `nodes` bind-mounted into its /dev.
    pub fn new(
        test: &str,
        nodes: &DeviceNodes,
        names: &[&str],
        device_rules: &[String],
        command: &str,
    ) -> Self {
        let name = format!("gt-{test}-{}", std::process::id());
        let dir = temp_dir_named("gpu-trace-lxc-");
        let root = dir.path().join("rootfs");
        for sub in ["bin", "dev", "proc", "sys", "tmp"] {
            fs::create_dir_all(root.join(sub)).expect("rootfs dirs");
        }
        fs::copy(BUSYBOX, root.join("bin/busybox")).expect("copy busybox");
        for applet in ["sh", "cat", "sleep"] {
            symlink("busybox", root.join("bin").join(applet)).expect("applet link");
        }
        let mut config = format!(
            "lxc.uts.name = {name}\n\
             lxc.rootfs.path = dir:{}\n\
             lxc.mount.auto = proc:rw sys:ro\n\
             lxc.net.0.type = empty\n\
             lxc.apparmor.profile = unconfined\n",
            root.display()
        );
        for rule in device_rules {
            config.push_str(&format!("{rule}\n"));
        }

        for node in names {
            config.push_str(&format!(
                "lxc.mount.entry = {} dev/{node} none bind,create=file 0 0\n",
                nodes.path(node).display()
            ));
        }
        let config_path = dir.path().join("config");
        fs::write(&config_path, config).expect("write config");
        let script = format!(
            "mount --make-rprivate / && {PURE_CGROUP2} && \
             exec lxc-execute -n {name} -P {lxcpath} -f {config} -- /bin/sh -c '{command}'",
            lxcpath = dir.path().display(),
            config = config_path.display(),
        );
        let argv = ["unshare", "-m", "sh", "-c", &script]
            .map(String::from)
            .to_vec();
        Self {
            name,
            dir,
            argv,
            running: None,
        }
    }

    /// Starts it in the background.
    pub fn start(&mut self) {
        let child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start lxc-execute");
        self.running = Some(child);
    }

    /// The container's cgroup on the host, once its process is in it.
    pub fn wait_running(&self, cgroup2_mount: &Path) -> PathBuf {
        let cgroup = cgroup2_mount.join(format!("lxc.payload.{}", self.name));
        let deadline = Instant::now() + WAIT;
        // Running: a process in the payload cgroup, and LXC's device
        // program attached (which LXC may do just after the move).
        let ready = || {
            fs::read_to_string(cgroup.join("cgroup.procs")).is_ok_and(|p| !p.trim().is_empty())
                && fs::File::open(&cgroup)
                    .ok()
                    .and_then(|dir| device_programs(dir, false).ok())
                    .is_some_and(|attached| !attached.program_ids.is_empty())
        };
        while !ready() {
            assert!(
                Instant::now() < deadline,
                "container {} never started",
                self.name
            );
            thread::sleep(Duration::from_millis(50));
        }
        cgroup
    }
}

impl Drop for LxcContainer {
    fn drop(&mut self) {
        // lxc-stop lets LXC tear down as usual, cgroups included.
        let _ = Command::new("lxc-stop")
            .args(["-k", "-n", &self.name, "-P"])
            .arg(self.dir.path())
            .stderr(Stdio::null())
            .status();
        if let Some(mut child) = self.running.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        // Whatever LXC could not remove (a test that died mid-way).
        let mount = gpu_trace::host::mountinfo::cgroup2_mount().ok().flatten();
        for kind in ["payload", "monitor"] {
            let Some(mount) = &mount else { break };
            let dir = mount.join(format!("lxc.{kind}.{}", self.name));
            let _ = fs::write(dir.join("cgroup.kill"), "1");
            for _ in 0..50 {
                if !dir.exists() || remove_tree(&dir).is_ok() {
                    break;
                }
                thread::sleep(Duration::from_millis(20));
            }
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
    fs::remove_dir(dir)
}

const BUSYBOX: &str = "/bin/busybox";

/// The incident's policy: everything denied but /dev/null and the NVIDIA
/// frontend (195), with the uvm major left out.
fn incident_rules() -> Vec<String> {
    allowlist_rules(&["c 1:3 rwm", "c 195:* rwm"])
}

pub fn allowlist_rules(allowed: &[&str]) -> Vec<String> {
    std::iter::once("lxc.cgroup2.devices.deny = a".to_string())
        .chain(
            allowed
                .iter()
                .map(|rule| format!("lxc.cgroup2.devices.allow = {rule}")),
        )
        .collect()
}

/// LXC and busybox-static are test dependencies (`cargo xtask test` installs them).
pub fn lxc_test(name: &str) -> Option<gpu_trace::host::preflight::Host> {
    let host = kernel_test(name)?;
    let present = Command::new("lxc-execute")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
        && Path::new(BUSYBOX).exists();
    if !present {
        crate::skip::cannot_run(name, "lxc or busybox-static not installed");
        return None;
    }
    Some(host)
}

fn stand_in_nodes() -> (DeviceNodes, u32) {
    let major = uvm_standin();
    let nodes =
        DeviceNodes::create(&[("nvidia-uvm", major, 0), ("nvidiactl", 195, 255)]).expect("mknod");
    (nodes, major)
}

/// `gpu-trace run --format json --major MAJOR ARGS --`, for the command to follow.
fn run_json(major: u32, args: &[&str]) -> Command {
    let mut command = Command::new(gpu_trace());
    command
        .args(["run", "--format", "json", "--major", &major.to_string()])
        .args(args)
        .arg("--");
    command
}

fn report_of(stderr: &str) -> Value {
    stderr
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find_map(|v| v.get("report").cloned())
        .unwrap_or_else(|| panic!("no report in: {stderr}"))
}

#[test]
fn run_traces_a_launch_inside_an_lxc_container_and_names_the_lxc_fix() {
    let _host = or_skip!(lxc_test);
    let (nodes, major) = stand_in_nodes();
    let container = LxcContainer::new(
        "launch",
        &nodes,
        &["nvidia-uvm", "nvidiactl"],
        &incident_rules(),
        "cat /dev/nvidiactl; cat /dev/nvidia-uvm; exit 5",
    );

    // gpu-trace starts lxc-execute itself: the container's processes are its descendants.
    let traced = run_json(major, &[])
        .args(&container.argv)
        .output()
        .expect("gpu-trace run lxc-execute");
    let stderr = String::from_utf8_lossy(&traced.stderr);
    assert!(
        stderr.contains("'/dev/nvidia-uvm': Operation not permitted"),
        "LXC's own policy denies uvm: {stderr}"
    );
    assert!(
        stderr.contains("'/dev/nvidiactl': No such device or address"),
        "and allows 195: {stderr}"
    );
    assert_eq!(
        traced.status.code(),
        Some(5),
        "the container command's status: {stderr}"
    );
    let report = report_of(&stderr);
    let problems = report["problems"].as_array().expect("problems");
    assert_eq!(problems.len(), 1, "{report:#}");
    let event = &problems[0]["event"];
    assert_eq!(
        event["path"], "/dev/nvidia-uvm",
        "the path as the container saw it"
    );
    assert_eq!(event["container"]["runtime"], "lxc", "{event:#}");
    assert_eq!(event["container"]["id"], container.name.as_str());
    assert_eq!(
        event["verdict_source"], "cgroup-bpf",
        "LXC's program refused it"
    );
    assert_eq!(event["cause"], "dynamic-major-not-allowed");
    assert_event_says(
        event,
        "hint",
        &format!("lxc.cgroup2.devices.allow: c {major}:* rwm"),
    );
    assert_event_says(
        event,
        "hint",
        "lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm",
    );
}

#[test]
fn run_with_container_reproduces_under_its_policy_from_the_host() {
    let host = or_skip!(lxc_test);
    let (nodes, major) = stand_in_nodes();
    let mut container = LxcContainer::new(
        "host",
        &nodes,
        &["nvidia-uvm", "nvidiactl"],
        &incident_rules(),
        "sleep 60",
    );
    container.start();
    let cgroup = container.wait_running(&host.cgroup2_mount);

    let open = ProbeOp::Open {
        path: nodes.path("nvidia-uvm"),
        mode: OpenMode::ReadWrite,
    };
    let output = run_json(major, &["--container", &container.name])
        .args([gpu_trace(), "__probe", &open.to_arg()])
        .output()
        .expect("gpu-trace run --container");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout).trim(),
        libc::EPERM.to_string(),
        "denied by LXC's policy: {stderr}"
    );
    let report = report_of(&stderr);
    let event = &report["problems"][0]["event"];
    assert_eq!(event["container"]["runtime"], "lxc", "{report:#}");
    assert_eq!(event["container"]["id"], container.name.as_str());
    assert_eq!(
        event["cgroup"],
        format!("/{}", cgroup.file_name().expect("name").to_string_lossy())
    );
    assert_eq!(event["verdict_source"], "cgroup-bpf");
    assert_eq!(event["cause"], "dynamic-major-not-allowed");
    assert!(event["hint"]
        .as_str()
        .expect("hint")
        .contains(&format!("c {major}:* rwm")));
}
