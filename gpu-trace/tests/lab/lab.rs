//! The field lab's scenarios: policies written by systemd, dockerd + runc
//! and podman + crun, against the stand-in GPU driver module (lab/driver),
//! whose nodes live in a real /proc/devices. They run only inside the lab's
//! guest (`cargo xtask lab`), which sets GPU_TRACE_LAB_DRIVER to the module
//! built for its kernel and GPU_TRACE_LAB_IMAGE to a busybox image both
//! engines hold; elsewhere they say that they skip.

use std::{os::unix::fs::PermissionsExt, process::Output};

use gpu_trace::{
    kernel::bpf_sys::{
        attach_device_program, device_programs, dump_program, load_device_program,
        replace_attached_program,
    },
    scenario::denylist_program,
};

use crate::common::*;

const FRONTEND: u32 = 195;

/// The lab's module and image, or None (said) outside the lab.
pub(crate) struct Lab {
    pub(crate) driver: PathBuf,
    pub(crate) image: String,
}

pub(crate) fn lab_test(name: &str) -> Option<Lab> {
    kernel_test(name)?;
    let (Ok(driver), Ok(image)) = (
        std::env::var("GPU_TRACE_LAB_DRIVER"),
        std::env::var("GPU_TRACE_LAB_IMAGE"),
    ) else {
        crate::skip::cannot_run(name, "not in the field lab (`cargo xtask lab` runs it)");
        return None;
    };
    Some(Lab {
        driver: driver.into(),
        image,
    })
}

/// The lab, with the stand-in driver loaded with `params`.
pub(crate) fn lab_with_driver(name: &str, params: &[&str]) -> Option<(Lab, Driver)> {
    let lab = lab_test(name)?;
    let driver = Driver::load(&lab, params);
    Some((lab, driver))
}

/// The lab with the stand-in driver loaded as it loads by default and its
/// nodes made: what most scenarios start from. The uvm major is the last.
pub(crate) fn lab_with_nodes(name: &str) -> Option<(Lab, Driver, u32)> {
    let (lab, driver) = lab_with_driver(name, &[])?;
    let uvm = make_nodes();
    Some((lab, driver, uvm))
}

/// The stand-in driver, loaded with `params`; unloaded when dropped.
pub(crate) struct Driver;

impl Driver {
    pub(crate) fn load(lab: &Lab, params: &[&str]) -> Self {
        // A test that failed may have left it loaded.
        let _ = Command::new("rmmod").arg("gpu_standin").output();
        let out = Command::new("insmod")
            .arg(&lab.driver)
            .args(params)
            .output()
            .expect("run insmod");
        assert!(out.status.success(), "insmod {params:?}: {out:?}");
        Driver
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let _ = Command::new("rmmod").arg("gpu_standin").output();
    }
}

/// The major /proc/devices lists for `name` (a char driver).
pub(crate) fn major_of(name: &str) -> Option<u32> {
    let devices = fs::read_to_string("/proc/devices").expect("read /proc/devices");
    devices
        .lines()
        .skip(1)
        .take_while(|l| !l.starts_with("Block"))
        .find_map(|l| {
            let (major, driver) = l.trim().split_once(' ')?;
            (driver == name).then(|| major.parse().ok())?
        })
}

/// The node at `path`, made anew as nvidia-modprobe makes it: mode 0666.
pub(crate) fn mknod(path: &Path, major: u32, minor: u32) {
    let _ = fs::remove_file(path);
    fs::create_dir_all(path.parent().expect("in a folder")).expect("node folder");
    let out = Command::new("mknod")
        .arg(path)
        .args(["c", &major.to_string(), &minor.to_string()])
        .output()
        .expect("run mknod");
    assert!(out.status.success(), "mknod {}: {out:?}", path.display());
    fs::set_permissions(path, fs::Permissions::from_mode(0o666)).expect("chmod node");
}

/// /dev/nvidia0, /dev/nvidiactl and /dev/nvidia-uvm from /proc/devices.
pub(crate) fn make_nodes() -> u32 {
    let uvm = major_of("nvidia-uvm").expect("nvidia-uvm in /proc/devices");
    mknod(Path::new("/dev/nvidia0"), FRONTEND, 0);
    mknod(Path::new("/dev/nvidiactl"), FRONTEND, 255);
    mknod(Path::new("/dev/nvidia-uvm"), uvm, 0);
    uvm
}

pub(crate) fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"))
}

pub(crate) fn succeeded(program: &str, args: &[&str]) -> Output {
    let out = run(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub(crate) fn stdout_of(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// A container of `engine` (docker or podman) by name; removed when dropped.
struct Container {
    engine: &'static str,
    name: String,
    id: String,
}

impl Container {
    /// `engine run -d --network none --name NAME ARGS IMAGE sleep 600`.
    fn start(engine: &'static str, lab: &Lab, name: &str, args: &[&str]) -> Self {
        let _ = run(engine, &["rm", "-f", name]);
        let mut all = vec!["run", "-d", "--network", "none", "--name", name];
        all.extend_from_slice(args);
        all.extend_from_slice(&[&lab.image, "sleep", "600"]);
        let id = stdout_of(&succeeded(engine, &all));
        Self {
            engine,
            name: name.to_string(),
            id,
        }
    }

    /// `engine exec NAME ARGS`.
    fn exec(&self, args: &[&str]) -> Output {
        let mut all = vec!["exec", self.name.as_str()];
        all.extend_from_slice(args);
        run(self.engine, &all)
    }

    /// Opens `path` inside for reading; the error message when it fails.
    fn open(&self, path: &str) -> Result<(), String> {
        let out = self.exec(&["cat", path]);
        if out.status.success() {
            Ok(())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
        }
    }

    /// The cgroup of its processes, relative to the cgroup2 mount.
    fn cgroup(&self) -> String {
        let out = succeeded(
            self.engine,
            &["exec", &self.name, "cat", "/proc/self/cgroup"],
        );
        let line = stdout_of(&out);
        // Inside, the cgroup namespace hides the path: ask from outside.
        let pid = stdout_of(&succeeded(
            self.engine,
            &["inspect", "-f", "{{.State.Pid}}", &self.name],
        ));
        let outside = fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("its cgroup");
        let path = outside
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap_or_else(|| panic!("no cgroup2 line: {outside} (inside: {line})"));
        path.to_string()
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = run(self.engine, &["rm", "-f", "-t", "0", &self.name]);
    }
}

fn cgroup_dir(relative: &str) -> PathBuf {
    Path::new("/sys/fs/cgroup").join(relative.trim_start_matches('/'))
}

/// Ids and names of the device programs attached at `cgroup` itself.
pub(crate) fn programs_at(cgroup: &str) -> Vec<(u32, String)> {
    let dir = fs::File::open(cgroup_dir(cgroup)).expect("open the cgroup");
    device_programs(&dir, false)
        .expect("query its device programs")
        .program_ids
        .into_iter()
        .map(|id| (id, dump_program(id).map(|d| d.name).unwrap_or_default()))
        .collect()
}

/// Replaces the program at `cgroup` by one that allows every device, the
/// way NVIDIA's legacy hook patches a container's policy behind runc's
/// back. Returns the new program's id.
pub(crate) fn patch_like_a_hook(cgroup: &str) -> u32 {
    let programs = programs_at(cgroup);
    assert_eq!(programs.len(), 1, "one program at {cgroup}: {programs:?}");
    let hook = load_device_program("gt_lab_hook", &denylist_program(&[])).expect("load the hook's");
    let dir = fs::File::open(cgroup_dir(cgroup)).expect("open the cgroup");
    replace_attached_program(&dir, programs[0].0, &hook).expect("replace the runtime's program");
    let now = programs_at(cgroup);
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!(now[0].1, "gt_lab_hook");
    now[0].0
}

/// The JSON events watch wrote for the container named `name`, waiting
/// until there are `count` of them.
fn events_of_container(watcher: &Watcher, name: &str, count: usize) -> Vec<Value> {
    let deadline = Instant::now() + WAIT;
    loop {
        let events: Vec<Value> = watcher
            .lines()
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|e| e["container"]["name"] == name)
            .collect();
        if events.len() >= count || Instant::now() > deadline {
            return events;
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// The one JSON event watch wrote for the container named `name`.
fn only_event_of_container(watcher: &Watcher, name: &str) -> Value {
    let mut events = events_of_container(watcher, name, 1);
    assert_eq!(events.len(), 1, "{events:#?}");
    events.remove(0)
}

/// Opens `node` in `container`, asserts that the policy refused it, and
/// returns the one event watch wrote for the container, checked to name
/// char major `major`.
fn denied_event(watcher: &Watcher, container: &Container, node: &str, major: u32) -> Value {
    assert_denied(container.open(node));
    let event = only_event_of_container(watcher, &container.name);
    assert_eq!(event["major"], major, "{event:#}");
    event
}

/// A docker container named `name` with `node` passed as a device, whose
/// open of it must succeed; removed when dropped.
fn opens_when_passed(lab: &Lab, name: &str, node: &str) -> Container {
    let passed = Container::start("docker", lab, name, &["--device", node]);
    passed
        .open(node)
        .unwrap_or_else(|e| panic!("{node} opens when passed: {e}"));
    passed
}

pub(crate) fn fix_text(event: &Value) -> String {
    event["hint"].as_str().unwrap_or_default().to_string()
}

/// The manager watch names as the writer of the program that denied it.
pub(crate) fn writer_of(event: &Value) -> &str {
    event["denied_by"]["writer"]["manager"]
        .as_str()
        .unwrap_or_else(|| panic!("no writer: {event:#}"))
}

fn assert_denied(result: Result<(), String>) {
    let message = result.expect_err("the open was allowed");
    assert!(
        message.contains("Operation not permitted"),
        "not a policy denial: {message}"
    );
}

/// nvidia-uvm bind-mounted, not passed as a device: the policy does not
/// allow its major.
const UVM_MOUNTED: [&str; 2] = ["-v", "/dev/nvidia-uvm:/dev/nvidia-uvm"];

/// The incident's Docker arguments: the GPU and control nodes passed as
/// devices, nvidia-uvm only bind-mounted.
const GPU_PASSED_UVM_MOUNTED: [&str; 6] = [
    "--device",
    "/dev/nvidia0",
    "--device",
    "/dev/nvidiactl",
    "-v",
    "/dev/nvidia-uvm:/dev/nvidia-uvm",
];

#[test]
fn docker_uvm_denied_while_195_allowed_is_the_incident() {
    let (lab, _driver, uvm) = or_skip!(lab_with_nodes);
    let watcher = Watcher::start(&["--format", "json"]);

    let name = "gt-lab-incident";
    let container = Container::start("docker", &lab, name, &GPU_PASSED_UVM_MOUNTED);
    container.open("/dev/nvidiactl").expect("nvidiactl opens");
    let event = &denied_event(&watcher, &container, "/dev/nvidia-uvm", uvm);
    let scope = container.cgroup();
    assert_eq!(
        scope,
        format!("/system.slice/docker-{}.scope", container.id)
    );
    assert_eq!(event["container"]["runtime"], "docker", "{event:#}");
    assert_eq!(event["container"]["id"], container.id.as_str(), "{event:#}");
    assert_eq!(event["minor"], 0, "{event:#}");
    assert_eq!(event["cause"], "dynamic-major-not-allowed", "{event:#}");
    assert_eq!(event["denied_by"]["kind"], "program", "{event:#}");
    assert_eq!(
        event["denied_by"]["attached_at"],
        scope.as_str(),
        "{event:#}"
    );
    // runc leaves its program unnamed and holds it by no descriptor: the
    // container's shim names the runtime.
    assert_eq!(event["denied_by"]["name"], "", "{event:#}");
    assert_eq!(writer_of(event), "runc", "{event:#}");
    assert_eq!(
        event["denied_by"]["writer"]["comm"], "containerd-shim",
        "{event:#}"
    );
    let fix = fix_text(event);
    assert!(fix.contains("--device"), "{fix}");
    assert!(fix.contains("/dev/nvidia-uvm"), "{fix}");

    // Passed as a device, the same node opens, and watch says nothing.
    let _allowed = opens_when_passed(&lab, "gt-lab-allowed", "/dev/nvidia-uvm");
    thread::sleep(Duration::from_secs(1));
    watcher.stop_cleanly();
    drop(container);
}

#[test]
fn a_driver_loaded_after_watch_started_is_watched() {
    let lab = or_skip!(lab_test);
    // The audit logger starts at boot; the NVIDIA modules load later.
    let _ = Command::new("rmmod").arg("gpu_standin").output();
    assert_eq!(major_of("nvidia-uvm"), None, "the stand-in is unloaded");
    let mut watcher = Watcher::start(&["--format", "json"]);
    let _driver = Driver::load(&lab, &[]);
    let uvm = make_nodes();
    watcher.wait_for_stderr(&format!(
        "gpu-trace: now also watching char major {uvm} (nvidia-uvm), registered after start"
    ));

    // Opened outside /dev/nvidia*, where a failed open is reported whatever
    // its major: only the kernel-side watch of the new major reports it.
    let name = "gt-lab-late-driver";
    let container = Container::start(
        "docker",
        &lab,
        name,
        &["--device", "/dev/nvidiactl", "-v", "/dev:/hostdev"],
    );
    let event = &denied_event(&watcher, &container, "/hostdev/nvidia-uvm", uvm);
    assert_eq!(event["driver"], "nvidia-uvm", "{event:#}");
    assert_eq!(event["cause"], "dynamic-major-not-allowed", "{event:#}");
    watcher.stop_cleanly();
    drop(container);
}

#[test]
fn daemon_reload_rewrites_a_patched_docker_containers_rules() {
    let (lab, _driver, uvm) = or_skip!(lab_with_nodes);
    let name = "gt-lab-reload";
    let container = Container::start("docker", &lab, name, &UVM_MOUNTED);
    let scope = container.cgroup();
    assert_denied(container.open("/dev/nvidia-uvm"));
    let hook = patch_like_a_hook(&scope);
    container
        .open("/dev/nvidia-uvm")
        .expect("opens once patched");

    let watcher = Watcher::start(&["--format", "json"]);
    succeeded("systemctl", &["daemon-reload"]);
    let programs = programs_at(&scope);
    let systemds: Vec<u32> = programs
        .iter()
        .filter(|(_, name)| name == "sd_devices")
        .map(|(id, _)| *id)
        .collect();
    assert_eq!(
        systemds.len(),
        1,
        "systemd's program at {scope}: {programs:?}"
    );
    assert!(programs.iter().any(|(id, _)| *id == hook), "{programs:?}");
    let event = &denied_event(&watcher, &container, "/dev/nvidia-uvm", uvm);
    assert_eq!(event["cause"], "rules-rewritten", "{event:#}");
    assert_eq!(event["denied_by"]["id"], systemds[0], "{event:#}");
    assert_eq!(event["denied_by"]["name"], "sd_devices", "{event:#}");
    assert_eq!(
        event["denied_by"]["attached_at"],
        scope.as_str(),
        "{event:#}"
    );
    assert_eq!(writer_of(event), "systemd", "{event:#}");
    assert_eq!(event["denied_by"]["writer"]["pid"], 1, "{event:#}");
    // A reload sets no property: no trigger on record.
    assert_eq!(
        event["denied_by"]["writer"]["trigger"],
        Value::Null,
        "{event:#}"
    );
    let fix = fix_text(event);
    assert!(fix.contains("--device"), "{fix}");
    assert!(fix.contains("create-dev-char-symlinks"), "{fix}");
    assert!(fix.contains("native.cgroupdriver=cgroupfs"), "{fix}");

    // check lists both programs with their writers, and the rewrite.
    let (_, report) = check_json_with(&["--cgroup", &scope], None);
    let writers: Vec<(u64, &str)> = report["programs"]
        .as_array()
        .unwrap_or_else(|| panic!("programs: {report:#}"))
        .iter()
        .map(|p| {
            (
                p["id"].as_u64().expect("an id"),
                p["writer"]["manager"].as_str().expect("a writer"),
            )
        })
        .collect();
    assert!(
        writers.contains(&(u64::from(systemds[0]), "systemd")),
        "{report:#}"
    );
    // The hook's program: loaded by this test, which closed it; no
    // evidence names its writer.
    assert!(
        writers.contains(&(u64::from(hook), "unknown")),
        "{report:#}"
    );
    // Nodes made as nvidia-modprobe makes them have no /dev/char links,
    // which is what lets systemd drop passed devices on a reload.
    let warnings = report["warnings"].to_string();
    assert!(
        warnings.contains(&format!(
            "/dev/char/{uvm}:0 is missing (for /dev/nvidia-uvm)"
        )),
        "{report:#}"
    );
    let rewritten = report["written_after_start"]
        .as_array()
        .expect("written_after_start");
    assert!(
        rewritten
            .iter()
            .any(|p| p["id"].as_u64() == Some(u64::from(systemds[0]))),
        "{report:#}"
    );
    watcher.stop_cleanly();
}

#[test]
fn docker_update_makes_runc_rewrite_a_patched_policy() {
    let (lab, _driver, uvm) = or_skip!(lab_with_nodes);
    let name = "gt-lab-update";
    let container = Container::start("docker", &lab, name, &UVM_MOUNTED);
    let scope = container.cgroup();
    let hook = patch_like_a_hook(&scope);
    container
        .open("/dev/nvidia-uvm")
        .expect("opens once patched");

    let watcher = Watcher::start(&["--format", "json"]);
    succeeded("docker", &["update", "--cpu-quota", "50000", name]);
    // runc hands the update to systemd (the systemd cgroup driver), which
    // attaches the device rules runc asked for at the start: the hook's
    // additions are outvoted by a program written now.
    let programs = programs_at(&scope);
    let added: Vec<&(u32, String)> = programs.iter().filter(|(id, _)| *id != hook).collect();
    assert!(
        !added.is_empty(),
        "a program written by the update: {programs:?}"
    );
    let event = &denied_event(&watcher, &container, "/dev/nvidia-uvm", uvm);
    assert_rewritten_at(event, &scope, &added);
    // The update set the scope's CPU quota through systemd, whose drop-in
    // says when.
    let trigger = &event["denied_by"]["writer"]["trigger"];
    println!("docker update's trigger: {trigger}");
    assert!(
        trigger["properties"].as_array().is_some_and(|p| p
            .iter()
            .any(|p| p.as_str().is_some_and(|p| p.starts_with("CPUQuota")))),
        "{event:#}"
    );
    assert!(
        event_text(event, "explanation")
            .contains("the engine's update of the container's resources"),
        "{event:#}"
    );
    watcher.stop_cleanly();
}

/// Asserts that `event` is a rewrite denied at `scope` by one of `added`
/// (the programs an update attached there), with that program's writer:
/// systemd for its `sd_devices`, else runc. Returns the writer.
pub(crate) fn assert_rewritten_at(
    event: &Value,
    scope: &str,
    added: &[&(u32, String)],
) -> &'static str {
    assert_eq!(event["cause"], "rules-rewritten", "{event:#}");
    assert_eq!(event["denied_by"]["attached_at"], scope, "{event:#}");
    let culprit = event["denied_by"]["id"].as_u64().expect("a program id") as u32;
    let (_, culprit_name) = added
        .iter()
        .find(|(id, _)| *id == culprit)
        .unwrap_or_else(|| panic!("the culprit is one of {added:?}: {event:#}"));
    let expected_writer = if culprit_name == "sd_devices" {
        "systemd"
    } else {
        "runc"
    };
    assert_eq!(writer_of(event), expected_writer, "{event:#}");
    expected_writer
}

/// Waits for the first JSON event about the container `id` that `wanted`
/// accepts; `context` adds to the failure's message (a daemon's log).
pub(crate) fn wait_for_event_of_id(
    watcher: &Watcher,
    id: &str,
    wanted: impl Fn(&Value) -> bool,
    context: impl Fn() -> String,
) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(event) = events_of_id(watcher, id).into_iter().find(&wanted) {
            return event;
        }
        assert!(
            Instant::now() < deadline,
            "no such event of {id}: {:#?}\n{}",
            watcher.lines(),
            context()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// The JSON events watch wrote about the container whose id is `id` (a
/// runtime's id, or a systemd unit).
pub(crate) fn events_of_id(watcher: &Watcher, id: &str) -> Vec<Value> {
    watcher
        .lines()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["container"]["id"] == id)
        .collect()
}

#[test]
fn a_driver_reload_moves_the_uvm_major_and_strands_old_nodes() {
    let lab = or_skip!(lab_test);
    let driver = Driver::load(&lab, &[]);
    let old = make_nodes();
    // An audit logger that runs through the reload, beside one started after it.
    let mut through = Watcher::start(&["--format", "json"]);
    // A copy of the node made before the reload, as a container bind-mounts it.
    // On the root disk: /run is mounted nodev, where no node opens.
    let stale_dir = Path::new("/var/lib/gt-lab-stale");
    mknod(&stale_dir.join("nvidia-uvm"), old, 0);

    // Rules by major, as LXC and `--device-cgroup-rule` users write them.
    let name = "gt-lab-moved";
    let container = Container::start(
        "docker",
        &lab,
        name,
        &[
            "--device-cgroup-rule",
            "c 195:* rwm",
            "--device-cgroup-rule",
            &format!("c {old}:* rwm"),
            "-v",
            "/dev:/hostdev",
            // Bound where the container's programs look for it.
            "-v",
            "/var/lib/gt-lab-stale/nvidia-uvm:/dev/nvidia-uvm",
        ],
    );
    container
        .open("/hostdev/nvidia-uvm")
        .expect("opens before the reload");

    drop(driver);
    let _driver = Driver::load(&lab, &["shift=1"]);
    let new = make_nodes();
    assert_ne!(new, old, "the reload moved the uvm major");
    assert_eq!(major_of("gpu-standin-shift"), None);
    through.wait_for_stderr(&format!(
        "gpu-trace: now also watching char major {new} (nvidia-uvm), registered after start"
    ));

    let watcher = Watcher::start(&["--format", "json"]);
    assert_denied(container.open("/hostdev/nvidia-uvm"));
    // The node made before the reload: the policy allows its old major,
    // and no driver owns it any more.
    let stale = container
        .open("/dev/nvidia-uvm")
        .expect_err("a stale node fails");
    assert!(stale.contains("No such device"), "{stale}");

    let events = events_of_container(&watcher, name, 2);
    assert_eq!(events.len(), 2, "{events:#?}");
    let moved = events
        .iter()
        .find(|e| e["major"] == new)
        .unwrap_or_else(|| panic!("the new major's denial: {events:#?}"));
    assert_eq!(moved["cause"], "dynamic-major-not-allowed", "{moved:#}");
    assert!(fix_text(moved).contains(&format!("c {new}:")), "{moved:#}");
    let stranded = events
        .iter()
        .find(|e| e["major"] == old)
        .unwrap_or_else(|| panic!("the stale node's failure: {events:#?}"));
    assert_eq!(stranded["errno"], "ENXIO", "{stranded:#}");
    assert_eq!(stranded["cause"], "stale-major", "{stranded:#}");
    assert!(
        stranded["explanation"]
            .as_str()
            .is_some_and(|e| e.contains(&format!("major {new} today"))),
        "{stranded:#}"
    );
    watcher.stop_cleanly();
    // The watch that ran through the reload says the same: the new major,
    // watched since the reload, is denied; the old one, still watched, no
    // longer has a driver.
    let seen_through = events_of_container(&through, name, 2);
    let majors_and_causes = |events: &[Value]| -> Vec<(u64, String)> {
        let mut pairs: Vec<(u64, String)> = events
            .iter()
            .map(|e| {
                (
                    e["major"].as_u64().unwrap_or_default(),
                    e["cause"].as_str().unwrap_or_default().to_string(),
                )
            })
            .collect();
        pairs.sort();
        pairs
    };
    assert_eq!(
        majors_and_causes(&seen_through),
        majors_and_causes(&events),
        "{seen_through:#?}"
    );
    through.stop_cleanly();
    let _ = fs::remove_dir_all(stale_dir);
}

#[test]
fn podman_and_systemd_denials_name_the_container_and_the_unit() {
    let (lab, _driver, uvm) = or_skip!(lab_with_nodes);
    let watcher = Watcher::start(&["--format", "json"]);

    let name = "gt-lab-podman";
    let container = Container::start(
        "podman",
        &lab,
        name,
        &[
            "--device",
            "/dev/nvidiactl",
            "-v",
            "/dev/nvidia-uvm:/dev/nvidia-uvm",
        ],
    );
    let event = &denied_event(&watcher, &container, "/dev/nvidia-uvm", uvm);
    assert_eq!(event["container"]["runtime"], "podman", "{event:#}");
    // crun 1.8 attaches at the scope's `container` child, not at the scope.
    let cgroup = container.cgroup();
    assert_eq!(
        cgroup,
        format!("/machine.slice/libpod-{}.scope/container", container.id)
    );
    assert_eq!(
        event["denied_by"]["attached_at"],
        cgroup.as_str(),
        "{event:#}"
    );
    assert_eq!(writer_of(event), "crun", "{event:#}");
    assert_eq!(event["denied_by"]["writer"]["comm"], "conmon", "{event:#}");

    // A systemd service with a device allow list of its own.
    let unit = "gt-lab-service";
    let service = service_denied(
        &watcher,
        unit,
        &["DevicePolicy=closed", "DeviceAllow=/dev/nvidiactl rw"],
        "/dev/nvidia-uvm",
        uvm,
    );
    assert_eq!(
        service["container"]["id"],
        format!("{unit}.service"),
        "{service:#}"
    );
    assert_eq!(service["denied_by"]["name"], "sd_devices", "{service:#}");
    assert_eq!(writer_of(&service), "systemd", "{service:#}");
    assert_eq!(
        service["denied_by"]["attached_at"],
        format!("/system.slice/{unit}.service"),
        "{service:#}"
    );
    watcher.stop_cleanly();
}

/// The first event watch wrote about a systemd unit and char major `major`.
pub(crate) fn event_of_unit(watcher: &Watcher, unit: &str, major: u32) -> Value {
    let deadline = Instant::now() + WAIT;
    loop {
        let found = watcher
            .lines()
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e["container"]["id"] == unit && e["major"] == major);
        match found {
            Some(event) => return event,
            None if Instant::now() < deadline => thread::sleep(Duration::from_millis(100)),
            None => panic!("no event of {unit}: {:#?}", watcher.lines()),
        }
    }
}

/// `systemd-run` of a short service that opens `node` (of char major
/// `major`) and lives on a little (watch reads its policy after the
/// denial); the open must fail. The first event watch wrote about it.
pub(crate) fn service_denied(
    watcher: &Watcher,
    unit: &str,
    properties: &[&str],
    node: &str,
    major: u32,
) -> Value {
    let _ = run("systemctl", &["reset-failed", &format!("{unit}.service")]);
    let mut args = vec!["--unit", unit, "--wait", "--collect"];
    for property in properties {
        args.extend_from_slice(&["-p", property]);
    }
    let script = format!("cat {node}; status=$?; sleep 3; exit $status");
    args.extend_from_slice(&["sh", "-c", &script]);
    let out = run("systemd-run", &args);
    assert!(!out.status.success(), "{unit}'s open of {node} was allowed");
    event_of_unit(watcher, &format!("{unit}.service"), major)
}

#[test]
fn a_device_allow_name_the_driver_no_longer_has_is_named() {
    let lab = or_skip!(lab_test);
    // Driver 550: major 195 is "nvidia", no longer "nvidia-frontend".
    let _driver = Driver::load(&lab, &["frontend=nvidia"]);
    make_nodes();
    assert_eq!(major_of("nvidia"), Some(FRONTEND));
    assert_eq!(major_of("nvidia-frontend"), None);
    let watcher = Watcher::start(&["--format", "json"]);
    let unit = "gt-lab-renamed";
    let event = service_denied(
        &watcher,
        unit,
        &["DevicePolicy=closed", "DeviceAllow=char-nvidia-frontend rw"],
        "/dev/nvidiactl",
        FRONTEND,
    );
    assert_eq!(event["minor"], 255, "{event:#}");
    assert_eq!(event["denied_by"]["name"], "sd_devices", "{event:#}");
    assert_eq!(writer_of(&event), "systemd", "{event:#}");
    assert_eq!(event["cause"], "device-allow-name-unresolved", "{event:#}");
    let fix = fix_text(&event);
    assert!(fix.contains("`DeviceAllow=char-nvidia rw`"), "{fix}");
    watcher.stop_cleanly();
}

#[test]
fn a_slices_device_policy_is_named_as_the_ancestor_that_denies() {
    let (_lab, _driver, uvm) = or_skip!(lab_with_nodes);
    // No dash: systemd nests "a-b.slice" under "a.slice".
    let slice = "gtlabgpu.slice";
    let unit_file = Path::new("/run/systemd/system").join(slice);
    fs::create_dir_all(unit_file.parent().expect("a folder")).expect("unit folder");
    fs::write(
        &unit_file,
        "[Slice]\nDevicePolicy=closed\nDeviceAllow=/dev/nvidiactl rw\n",
    )
    .expect("write the slice");
    succeeded("systemctl", &["daemon-reload"]);
    let watcher = Watcher::start(&["--format", "json"]);
    // The service itself restricts nothing: only its slice's program runs.
    let unit = "gt-lab-in-slice";
    let slice_property = format!("Slice={slice}");
    let event = service_denied(&watcher, unit, &[&slice_property], "/dev/nvidia-uvm", uvm);
    assert_eq!(
        event["container"]["cgroup"],
        format!("/{slice}/{unit}.service"),
        "{event:#}"
    );
    assert_eq!(
        event["denied_by"]["attached_at"],
        format!("/{slice}"),
        "{event:#}"
    );
    assert_eq!(writer_of(&event), "systemd", "{event:#}");
    assert_eq!(event["cause"], "ancestor-policy", "{event:#}");
    let fix = fix_text(&event);
    assert!(
        fix.contains(&format!(
            "`systemctl set-property {slice} DeviceAllow='char-nvidia-uvm rw'`"
        )),
        "{fix}"
    );
    watcher.stop_cleanly();
    let _ = fs::remove_file(&unit_file);
    let _ = run("systemctl", &["daemon-reload"]);
}

#[test]
fn podman_with_a_second_program_at_its_scope_is_stacked() {
    let (lab, _driver, uvm) = or_skip!(lab_with_nodes);
    let name = "gt-lab-stacked";
    let container = Container::start("podman", &lab, name, &UVM_MOUNTED);
    // crun's program at the scope's `container` child; a hook's that allows
    // everything at the scope itself, as a hook that patched only one does.
    let inner = container.cgroup();
    let scope = inner
        .strip_suffix("/container")
        .unwrap_or_else(|| panic!("crun's cgroup {inner}"))
        .to_string();
    assert!(programs_at(&scope).is_empty(), "{:?}", programs_at(&scope));
    let hook = load_device_program("gt_lab_hook", &denylist_program(&[])).expect("load");
    let dir = fs::File::open(cgroup_dir(&scope)).expect("open the scope");
    let _link = attach_device_program(&hook, &dir).expect("attach at the scope");
    let hook_id = programs_at(&scope)[0].0;

    let watcher = Watcher::start(&["--format", "json"]);
    let event = &denied_event(&watcher, &container, "/dev/nvidia-uvm", uvm);
    assert_eq!(
        event["denied_by"]["attached_at"],
        inner.as_str(),
        "{event:#}"
    );
    assert_eq!(writer_of(event), "crun", "{event:#}");
    assert_eq!(
        event["denied_by"]["allowed_by"][0]["id"], hook_id,
        "{event:#}"
    );
    assert_eq!(
        event["denied_by"]["allowed_by"][0]["attached_at"],
        scope.as_str(),
        "{event:#}"
    );
    assert_eq!(event["cause"], "stacked-programs", "{event:#}");
    watcher.stop_cleanly();
}

#[test]
fn a_runtime_config_with_no_cgroups_is_named() {
    let (lab, _driver, _) = or_skip!(lab_with_nodes);
    let config = Path::new("/etc/nvidia-container-runtime/config.toml");
    fs::create_dir_all(config.parent().expect("a folder")).expect("config folder");
    fs::write(
        config,
        "[nvidia-container-cli]\nldconfig = \"@/sbin/ldconfig\"\nno-cgroups = true\n",
    )
    .expect("write the config");
    let watcher = Watcher::start(&["--format", "json"]);
    let name = "gt-lab-no-cgroups";
    let container = Container::start(
        "docker",
        &lab,
        name,
        &["-v", "/dev/nvidiactl:/dev/nvidiactl"],
    );
    let event = &denied_event(&watcher, &container, "/dev/nvidiactl", FRONTEND);
    assert_eq!(event["cause"], "no-cgroups-hook", "{event:#}");
    assert!(
        fix_text(event).contains(&format!(
            "`no-cgroups = false` under [nvidia-container-cli] in {}",
            config.display()
        )),
        "{event:#}"
    );
    watcher.stop_cleanly();
    let _ = fs::remove_file(config);
}

#[test]
fn an_apparmor_profile_that_refuses_the_node_is_named() {
    let (lab, _driver, uvm) = or_skip!(lab_with_nodes);
    // Everything a container needs, less the uvm node.
    let profile = "gt-lab-no-uvm";
    let file = Path::new("/etc/apparmor.d").join(profile);
    fs::write(
        &file,
        format!(
            "profile {profile} flags=(attach_disconnected,mediate_deleted) {{\n  file,\n  capability,\n  network,\n  mount,\n  umount,\n  pivot_root,\n  signal,\n  ptrace,\n  unix,\n  deny /dev/nvidia-uvm rw,\n}}\n"
        ),
    )
    .expect("write the profile");
    succeeded(
        "apparmor_parser",
        &["-r", "-W", file.to_str().expect("UTF-8")],
    );

    let watcher = Watcher::start(&["--format", "json"]);
    let name = "gt-lab-apparmor";
    let security = format!("apparmor={profile}");
    let container = Container::start(
        "docker",
        &lab,
        name,
        &["--device", "/dev/nvidia-uvm", "--security-opt", &security],
    );
    // The shell opens it and stays: the diagnosis reads its profile.
    let out = container.exec(&["sh", "-c", "true </dev/nvidia-uvm; sleep 2"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("Permission denied"), "{stderr}");

    let event = &only_event_of_container(&watcher, name);
    assert_eq!(event["major"], uvm, "{event:#}");
    assert_eq!(event["errno"], "EACCES", "{event:#}");
    assert_eq!(event["verdict"], "denied", "{event:#}");
    assert_eq!(event["verdict_source"], "security-module", "{event:#}");
    assert_eq!(event["cause"], "lsm-denied", "{event:#}");
    assert_event_says(
        event,
        "explanation",
        &format!("profile {profile}, enforce mode"),
    );
    watcher.stop_cleanly();
    drop(container);
    let _ = run("apparmor_parser", &["-R", file.to_str().expect("UTF-8")]);
    let _ = fs::remove_file(&file);
}

#[test]
fn the_packaged_unit_logs_a_denial_under_systemd_and_stops_clean() {
    let lab = or_skip!(lab_test);
    let unit_source = std::env::var("GPU_TRACE_LAB_UNIT").expect("GPU_TRACE_LAB_UNIT");
    let _driver = Driver::load(&lab, &[]);
    let uvm = make_nodes();
    // Installed as the packages install it.
    fs::copy(crate::common::gpu_trace(), "/usr/bin/gpu-trace").expect("install the binary");
    fs::copy(&unit_source, "/etc/systemd/system/gpu-trace.service").expect("install the unit");
    succeeded("systemctl", &["daemon-reload"]);
    let log = Path::new("/var/log/gpu-trace/denied.jsonl");
    let _ = fs::remove_file(log);
    succeeded("systemctl", &["start", "gpu-trace.service"]);
    let deadline = Instant::now() + WAIT;
    let ready = || {
        stdout_of(&run(
            "journalctl",
            &["-u", "gpu-trace.service", "-o", "cat", "--no-pager"],
        ))
        .contains("gpu-trace: ready")
    };
    while !ready() {
        assert!(
            Instant::now() < deadline,
            "the unit never got ready: {}",
            stdout_of(&run(
                "journalctl",
                &["-u", "gpu-trace.service", "--no-pager"]
            ))
        );
        thread::sleep(Duration::from_millis(200));
    }

    let name = "gt-lab-unit";
    let container = Container::start("docker", &lab, name, &UVM_MOUNTED);
    assert_denied(container.open("/dev/nvidia-uvm"));
    let deadline = Instant::now() + WAIT;
    let event = loop {
        let found = fs::read_to_string(log)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .find(|e| e["container"]["name"] == name);
        match found {
            Some(event) => break event,
            None if Instant::now() < deadline => thread::sleep(Duration::from_millis(200)),
            None => panic!("no line for {name} in {}", log.display()),
        }
    };
    assert_eq!(event["major"], uvm, "{event:#}");
    assert_eq!(event["cause"], "dynamic-major-not-allowed", "{event:#}");
    let metrics = crate::common::scrape("127.0.0.1:9745");
    assert!(
        metrics.contains("gpu_trace_problems_total{cause=\"dynamic-major-not-allowed\"} 1"),
        "{metrics}"
    );

    succeeded("systemctl", &["stop", "gpu-trace.service"]);
    let show = stdout_of(&succeeded(
        "systemctl",
        &[
            "show",
            "gpu-trace.service",
            "-p",
            "ActiveState",
            "-p",
            "ExecMainStatus",
        ],
    ));
    assert!(show.contains("ActiveState=inactive"), "{show}");
    assert!(show.contains("ExecMainStatus=0"), "{show}");
    let _ = fs::remove_file("/etc/systemd/system/gpu-trace.service");
    let _ = run("systemctl", &["daemon-reload"]);
}

#[test]
fn an_lxc_config_written_before_a_driver_reload_denies_the_new_uvm_major() {
    let lab = or_skip!(lab_test);
    // The rules as a Proxmox or LXC config hard-codes them: 195 and the
    // uvm major of the day they were written.
    let driver = Driver::load(&lab, &[]);
    let old = major_of("nvidia-uvm").expect("nvidia-uvm");
    let old_rule = format!("c {old}:* rwm");
    let rules = crate::lxc::allowlist_rules(&["c 1:3 rwm", "c 195:* rwm", &old_rule]);
    drop(driver);
    let _driver = Driver::load(&lab, &["shift=1"]);
    let new = major_of("nvidia-uvm").expect("nvidia-uvm");
    assert_ne!(new, old, "the reload moved the uvm major");
    let nodes = gpu_trace::scenario::DeviceNodes::create(&[
        ("nvidia-uvm", new, 0),
        ("nvidiactl", FRONTEND, 255),
    ])
    .expect("mknod");

    let watcher = Watcher::start(&["--format", "json"]);
    let mut container = crate::lxc::LxcContainer::new(
        "lab-reload",
        &nodes,
        &["nvidia-uvm", "nvidiactl"],
        &rules,
        "cat /dev/nvidiactl; cat /dev/nvidia-uvm; sleep 3",
    );
    container.start();
    let event = &only_event_of_container(&watcher, &container.name);
    assert_eq!(event["container"]["runtime"], "lxc", "{event:#}");
    assert_eq!(event["major"], new, "{event:#}");
    assert_eq!(
        event["denied_by"]["attached_at"],
        format!("/lxc.payload.{}", container.name),
        "{event:#}"
    );
    assert_eq!(event["cause"], "dynamic-major-not-allowed", "{event:#}");
    let fix = fix_text(event);
    assert!(
        fix.contains(&format!("lxc.cgroup2.devices.allow: c {new}:* rwm")),
        "{fix}"
    );
    watcher.stop_cleanly();
}

#[test]
fn a_docker_container_denied_the_real_kfd_is_amds() {
    let (lab, _driver) = or_skip!(lab_with_driver, &["kfd=1"]);
    let kfd = major_of("kfd").expect("kfd in /proc/devices");
    mknod(Path::new("/dev/kfd"), kfd, 0);
    let watcher = Watcher::start(&["--format", "json"]);
    let name = "gt-lab-rocm";
    let container = Container::start("docker", &lab, name, &["-v", "/dev/kfd:/dev/kfd"]);
    let event = &denied_event(&watcher, &container, "/dev/kfd", kfd);
    assert_eq!(event["driver"], "kfd", "{event:#}");
    assert_eq!(event["vendor"], "amd", "{event:#}");
    assert_eq!(event["role"], "compute", "{event:#}");
    assert_eq!(event["cause"], "dynamic-major-not-allowed", "{event:#}");
    let fix = fix_text(event);
    assert!(fix.contains("`--device /dev/kfd`"), "{event:#}");
    assert!(fix.contains("`--device /dev/dri/renderD128`"), "{event:#}");
    assert!(!fix.contains("`--device /dev/dri`"), "every GPU: {event:#}");
    // Passed as a device, it opens: the stand-in's open succeeds.
    let _passed = opens_when_passed(&lab, "gt-lab-rocm-passed", "/dev/kfd");
    watcher.stop_cleanly();

    // check --vendor amd: ROCm needs kfd and a render node in the
    // container, both allowed.
    mknod(Path::new("/dev/dri/renderD128"), 226, 128);
    let rocm = Container::start(
        "docker",
        &lab,
        "gt-lab-rocm-full",
        &["--device", "/dev/kfd", "--device", "/dev/dri/renderD128"],
    );
    let (status, report) = check_json_with(&["--container", &rocm.id, "--vendor", "amd"], None);
    assert_eq!(status, Some(0), "{report:#}");
    assert_eq!(report["stacks"], serde_json::json!(["ROCm"]), "{report:#}");
    assert_eq!(report["vendors"][0]["usable"], true, "{report:#}");
    let (status, report) =
        check_json_with(&["--container", &container.id, "--vendor", "amd"], None);
    assert_eq!(status, Some(1), "{report:#}");
    let missing = report["vendors"][0]["missing"].to_string();
    assert!(
        missing.contains("a render node (/dev/dri/renderD*) is missing"),
        "{missing}"
    );
    assert!(missing.contains("/kfd: denied"), "{missing}");
    drop(rocm);
    let _ = fs::remove_file("/dev/kfd");
    let _ = fs::remove_dir_all("/dev/dri");
}
