//! Docker on this machine's own layout: a private dockerd (its own socket,
//! data and exec roots, no network) with its default cgroupfs driver, whose
//! containers a cgroup v1/v2 hybrid host confines with v1 devices.list rules.

use std::os::unix::fs::symlink;

use crate::{common::*, lxc::lxc_test};

/// Debian's docker.io client and daemon (the image check's pair).
const DOCKER: &str = "/usr/bin/docker";
const DOCKERD: &str = "/usr/sbin/dockerd";
/// The image the containers run: busybox-static, imported, never pulled.
const IMAGE: &str = "gpu-trace-test-busybox";

/// A dockerd of the test's own, stopped (and its containers with it) on drop.
struct Dockerd {
    child: std::process::Child,
    host: String,
    _dir: tempfile::TempDir,
}

impl Dockerd {
    fn start() -> Self {
        let dir = temp_dir_named("gpu-trace-dockerd-");
        let host = format!("unix://{}", dir.path().join("docker.sock").display());
        let log = fs::File::create(dir.path().join("dockerd.log")).expect("log");
        let child = Command::new(DOCKERD)
            .arg("--host")
            .arg(&host)
            .arg("--data-root")
            .arg(dir.path().join("root"))
            .arg("--exec-root")
            .arg(dir.path().join("exec"))
            .arg("--pidfile")
            .arg(dir.path().join("dockerd.pid"))
            .args(["--bridge=none", "--iptables=false", "--ip6tables=false"])
            .args(["--storage-driver", "vfs"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start dockerd");
        let mut daemon = Self {
            child,
            host,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !daemon.quiet(&["info"]) {
            if let Some(status) = daemon.child.try_wait().expect("dockerd") {
                panic!("dockerd exited ({status}) before answering");
            }
            assert!(Instant::now() < deadline, "dockerd did not answer in 60 s");
            thread::sleep(Duration::from_millis(200));
        }
        daemon.import_busybox();
        daemon
    }

    fn docker(&self, args: &[&str]) -> Command {
        let mut command = Command::new(DOCKER);
        command.arg("--host").arg(&self.host).args(args);
        command.stdin(Stdio::null());
        command
    }

    /// `docker ARGS` with no output; whether it succeeded.
    fn quiet(&self, args: &[&str]) -> bool {
        self.docker(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// The busybox root filesystem as an image, from a tarball on stdin.
    fn import_busybox(&self) {
        let rootfs = temp_dir_named("gpu-trace-docker-rootfs-");
        let bin = rootfs.path().join("bin");
        fs::create_dir_all(&bin).expect("bin");
        fs::copy("/bin/busybox", bin.join("busybox")).expect("busybox");
        for applet in ["sh", "sleep"] {
            symlink("busybox", bin.join(applet)).expect("applet");
        }
        let mut tar = Command::new("tar")
            .arg("-C")
            .arg(rootfs.path())
            .args(["-c", "."])
            .stdout(Stdio::piped())
            .spawn()
            .expect("tar");
        let status = self
            .docker(&["import", "-", IMAGE])
            .stdin(tar.stdout.take().expect("piped"))
            .stdout(Stdio::null())
            .status()
            .expect("docker import");
        assert!(status.success(), "docker import");
        assert!(tar.wait().expect("tar").success(), "tar");
    }

    /// A container of the image running `sleep`, with `args` before the
    /// image; its full id.
    fn run(&self, name: &str, args: &[&str]) -> String {
        let mut all = vec!["run", "-d", "--name", name, "--network", "none"];
        all.extend(args);
        all.extend([IMAGE, "sleep", "600"]);
        let out = self.docker(&all).output().expect("docker run");
        assert!(
            out.status.success(),
            "docker run: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

impl Drop for Dockerd {
    /// SIGTERM: dockerd stops its containers and its containerd.
    fn drop(&mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(30);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn docker_v1_test(name: &str) -> Option<(gpu_trace::host::preflight::Host, PathBuf)> {
    let host = lxc_test(name)?; // busybox-static, root, cgroup2
                                // A property of the host's layout: a pure cgroup2 host has no devices.list.
    let v1_devices = v1_devices_mount(name)?;
    if !Path::new(DOCKERD).exists() {
        crate::skip::cannot_run(name, "Debian's docker.io is not installed");
        return None;
    }
    Some((host, v1_devices))
}

/// The field's report: a long-running container with nvidia-uvm
/// bind-mounted, not passed as a device, and `docker exec CT sh -c 'exec
/// 3</dev/nvidia-uvm'`. The exec'd shell is refused by the container's v1
/// devices.list and exits at once, usually before watch reads its event;
/// each of twenty in a row must still be traced to that devices.list.
#[test]
fn docker_exec_refused_by_v1_devices_list_keeps_its_culprit_after_it_exits() {
    let Some((_host, v1_devices)) = docker_v1_test("docker_exec_v1") else {
        return;
    };
    let major = uvm_standin();
    let nodes = DeviceNodes::create(&[("nvidia-uvm", major, 0)]).expect("mknod");
    let daemon = Dockerd::start();
    let mount = format!("{}:/dev/nvidia-uvm", nodes.path("nvidia-uvm").display());
    let id = daemon.run(
        &format!("gt-v1exec-{}", std::process::id()),
        &["-v", &mount],
    );
    let v1_cgroup = format!("/docker/{id}");
    assert!(
        v1_devices
            .join(&v1_cgroup[1..])
            .join("devices.list")
            .exists(),
        "docker's cgroupfs driver made no v1 devices cgroup {v1_cgroup}"
    );
    // Unfolded: twenty first sightings, not one and nineteen repeats.
    let watcher = Watcher::start(&[
        "--format",
        "json",
        "--fold",
        "0",
        "--major",
        &major.to_string(),
    ]);
    for run in 0..20 {
        let refused = !daemon.quiet(&["exec", &id, "sh", "-c", "exec 3</dev/nvidia-uvm"]);
        assert!(refused, "run {run}: the open was allowed");
    }
    let deadline = Instant::now() + WAIT;
    let denials = loop {
        let denials: Vec<Value> = watcher
            .lines()
            .iter()
            .map(|l| serde_json::from_str::<Value>(l).expect("JSON"))
            .filter(|e| e["verdict"] == "denied" && e["major"] == major)
            .collect();
        if denials.len() >= 20 || Instant::now() > deadline {
            break denials;
        }
        thread::sleep(Duration::from_millis(50));
    };
    watcher.stop_cleanly();
    assert_eq!(denials.len(), 20, "{denials:#?}");
    for event in &denials {
        assert_eq!(event["errno"], "EPERM", "{event:#}");
        assert_eq!(event["container"]["runtime"], "docker", "{event:#}");
        assert_eq!(event["container"]["id"], id.as_str(), "{event:#}");
        let culprit = &event["denied_by"];
        assert_eq!(culprit["kind"], "devices-list", "{event:#}");
        assert_eq!(culprit["cgroup"], v1_cgroup.as_str(), "{event:#}");
        assert_eq!(culprit["found_by"], "sighting", "{event:#}");
        assert_eq!(
            culprit["note"],
            format!("no rule allows c {major}:0"),
            "{event:#}"
        );
    }
}
