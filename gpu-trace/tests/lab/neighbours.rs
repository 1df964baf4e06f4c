//! The devices next to the GPU in the lab: the stand-in's nodes under their
//! drivers' real names, and real drivers where Debian's kernel has one that
//! needs no hardware: Soft-RoCE (rdma_rxe) for RDMA verbs. (VFIO has none
//! here: Debian's kernels leave out its no-IOMMU mode, and the guest has no
//! IOMMU.)

use std::os::unix::fs::MetadataExt;

use crate::{common::*, lab::*};

/// A service's stdout and whether it succeeded: `script` under `sh -c`,
/// run by systemd with `properties`, its output piped back.
fn service_output(unit: &str, properties: &[&str], script: &str) -> (bool, String) {
    let _ = run("systemctl", &["reset-failed", &format!("{unit}.service")]);
    let mut args = vec!["--unit", unit, "--wait", "--collect", "--pipe", "--quiet"];
    for property in properties {
        args.extend_from_slice(&["-p", property]);
    }
    args.extend_from_slice(&["sh", "-c", script]);
    let out = run("systemd-run", &args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

/// The `DeviceAllow=` property a systemd fix names, as systemd-run takes it.
fn device_allow_in(fix: &str) -> String {
    let start = fix
        .find("`DeviceAllow=")
        .unwrap_or_else(|| panic!("no DeviceAllow= in {fix}"));
    let rest = &fix[start + 1..];
    rest[..rest.find('`').expect("closing backtick")].to_string()
}

/// No event about `unit` among watch's lines, a second after it ran.
fn assert_no_event_of(watcher: &Watcher, unit: &str) {
    thread::sleep(Duration::from_secs(1));
    let events: Vec<Value> = watcher
        .lines()
        .iter()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["container"]["id"] == unit)
        .collect();
    assert!(events.is_empty(), "{unit} was reported: {events:#?}");
}

fn wait_for_node(path: &Path) -> fs::Metadata {
    let deadline = Instant::now() + WAIT;
    loop {
        match fs::metadata(path) {
            Ok(meta) => return meta,
            Err(_) if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
            Err(e) => panic!("{} never appeared: {e}", path.display()),
        }
    }
}

/// A char node's (major, minor), as the kernel splits `st_rdev`.
fn numbers_of(meta: &fs::Metadata) -> (u32, u32) {
    let dev = meta.rdev();
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    (major as u32, minor as u32)
}

/// Unloads `modules` (ignoring any not loaded), so that watch, started
/// next, meets their majors as a driver load.
fn unload(modules: &[&str]) {
    let _ = Command::new("modprobe").arg("-r").args(modules).output();
}

#[test]
fn the_devices_next_to_the_gpu_are_watched_from_their_drivers_load_and_say_what_the_job_sees() {
    let lab = or_skip!(lab_test);
    // The real verbs driver would hold 231, which the stand-in takes.
    unload(SOFT_ROCE_MODULES);
    // watch runs first, as an audit logger does: the drivers load after it.
    let _ = Command::new("rmmod").arg("gpu_standin").output();
    let mut watcher = Watcher::start(&["--format", "json"]);
    let _driver = Driver::load(&lab, &["neighbours=1"]);
    let families = [
        // (driver, node, minor, vendor, role, what the job sees, cause)
        (
            "infiniband_verbs",
            "/dev/infiniband/uverbs0",
            192,
            Value::Null,
            "rdma",
            "fall back to TCP sockets without an error",
            "device-denied",
        ),
        (
            "nvidia-caps-imex-channels",
            "/dev/nvidia-caps-imex-channels/channel0",
            0,
            Value::from("nvidia"),
            "imex",
            "CUDA_ERROR_NOT_PERMITTED",
            "device-denied",
        ),
        (
            "gdrdrv",
            "/dev/gdrdrv",
            0,
            Value::from("nvidia"),
            "gpudirect",
            "copies through host memory",
            "device-denied",
        ),
        (
            "nvidia-fs",
            "/dev/nvidia-fs0",
            0,
            Value::from("nvidia"),
            "gpudirect",
            "copies through host memory",
            "device-denied",
        ),
        (
            "nvidia-nvswitch",
            "/dev/nvidia-nvswitch0",
            0,
            Value::from("nvidia"),
            "nvswitch",
            "CUDA_ERROR_SYSTEM_NOT_READY",
            // An NVIDIA node on a dynamic major, as nvidia-uvm's.
            "dynamic-major-not-allowed",
        ),
    ];
    let mut majors = Vec::new();
    for (driver, node, minor, ..) in &families {
        let major = major_of(driver).unwrap_or_else(|| panic!("{driver} in /proc/devices"));
        mknod(Path::new(node), major, *minor);
        majors.push(major);
    }
    assert_eq!(majors[0], 231, "the verbs nodes' fixed major");
    // Said in the order of the majors.
    let mut said: Vec<(u32, &str)> = majors
        .iter()
        .zip(&families)
        .map(|(m, f)| (*m, f.0))
        .collect();
    said.sort_unstable();
    for (major, driver) in said {
        watcher.wait_for_stderr(&format!(
            "gpu-trace: now also watching char major {major} ({driver}), registered after start"
        ));
    }

    for (major, (driver, node, minor, vendor, role, sees, cause)) in
        majors.into_iter().zip(families)
    {
        // A service whose policy systemd writes: no device allowed.
        let unit = format!("gt-lab-{role}-{major}");
        let event = service_denied(&watcher, &unit, &["DevicePolicy=closed"], node, major);
        assert_eq!(event["driver"], driver, "{event:#}");
        assert_eq!(event["vendor"], vendor, "{event:#}");
        assert_eq!(event["role"], role, "{event:#}");
        assert_eq!(event["minor"], minor, "{event:#}");
        assert_eq!(writer_of(&event), "systemd", "{event:#}");
        assert_eq!(event["cause"], cause, "{event:#}");
        let explanation = event["explanation"].as_str().unwrap_or_default();
        assert!(explanation.contains(sees), "{explanation}");
        // That one node, by the path the host has it at.
        let fix = fix_text(&event);
        assert!(fix.contains(&format!("`DeviceAllow={node} rw`")), "{fix}");
        let _ = fs::remove_file(node);
    }
    let _ = fs::remove_dir("/dev/infiniband");
    let _ = fs::remove_dir("/dev/nvidia-caps-imex-channels");
    watcher.stop_cleanly();
}

/// Soft-RoCE's modules: unloaded before and after its scene.
const SOFT_ROCE_MODULES: &[&str] = &["rdma_rxe", "ib_uverbs"];
/// The RDMA device and the interface it runs on.
const RXE: &str = "gtrxe0";
const RXE_NIC: &str = "gt-rxe-nic";

/// A Soft-RoCE RDMA device on a dummy interface: rdma_rxe makes a real
/// `/dev/infiniband/uverbs0` for it. Removed, modules and all, when dropped.
struct SoftRoce;

impl SoftRoce {
    fn add() -> Self {
        succeeded("modprobe", &["rdma_rxe"]);
        let _ = run("ip", &["link", "del", RXE_NIC]);
        succeeded("ip", &["link", "add", RXE_NIC, "type", "dummy"]);
        succeeded("ip", &["link", "set", RXE_NIC, "up"]);
        succeeded(
            "rdma",
            &["link", "add", RXE, "type", "rxe", "netdev", RXE_NIC],
        );
        SoftRoce
    }
}

impl Drop for SoftRoce {
    fn drop(&mut self) {
        let _ = run("rdma", &["link", "delete", RXE]);
        let _ = run("ip", &["link", "del", RXE_NIC]);
        unload(SOFT_ROCE_MODULES);
    }
}

#[test]
fn soft_roce_verbs_denied_say_which_nic_and_that_the_job_falls_back_silently() {
    let _lab = or_skip!(lab_test);
    // The stand-in's neighbours=1 would hold 231.
    let _ = Command::new("rmmod").arg("gpu_standin").output();
    unload(SOFT_ROCE_MODULES);
    let mut watcher = Watcher::start(&["--format", "json"]);
    let _rxe = SoftRoce::add();
    watcher.wait_for_stderr(
        "gpu-trace: now also watching char major 231 (infiniband_verbs), registered after start",
    );
    let node = Path::new("/dev/infiniband/uverbs0");
    assert_eq!(numbers_of(&wait_for_node(node)), (231, 192));

    // A verbs client in a service whose policy systemd writes: no device.
    let unit = "gt-lab-rxe";
    let script = "ibv_devinfo; status=$?; sleep 3; exit $status";
    let (ok, said) = service_output(unit, &["DevicePolicy=closed"], script);
    assert!(!ok, "ibv_devinfo succeeded without its node: {said}");
    assert!(!said.contains("hca_id"), "a device was listed: {said}");
    let event = event_of_unit(&watcher, &format!("{unit}.service"), 231);
    assert_eq!(event["driver"], "infiniband_verbs", "{event:#}");
    assert_eq!(event["role"], "rdma", "{event:#}");
    assert_eq!(event["minor"], 192, "{event:#}");
    // Soft-RoCE has no PCI device, hence no vendor.
    assert_eq!(event["vendor"], Value::Null, "{event:#}");
    assert_eq!(event["comm"], "ibv_devinfo", "{event:#}");
    assert_eq!(
        event["nic"],
        serde_json::json!({"rdma_device": RXE, "netdev": RXE_NIC}),
        "{event:#}"
    );
    assert_eq!(writer_of(&event), "systemd", "{event:#}");
    assert_eq!(event["cause"], "device-denied", "{event:#}");
    let explanation = event["explanation"].as_str().unwrap_or_default();
    assert!(
        explanation.contains("fall back to TCP sockets without an error"),
        "{explanation}"
    );
    let fix = fix_text(&event);
    let allow = device_allow_in(&fix);
    assert_eq!(allow, "DeviceAllow=/dev/infiniband/uverbs0 rw", "{fix}");

    // The fix, applied: the same client finds the NIC, and nothing is said.
    let fixed = "gt-lab-rxe-fixed";
    let (ok, said) = service_output(fixed, &["DevicePolicy=closed", &allow], "ibv_devinfo");
    assert!(ok, "ibv_devinfo with the fix: {said}");
    assert!(said.contains(&format!("hca_id:\t{RXE}")), "{said}");
    assert_no_event_of(&watcher, &format!("{fixed}.service"));
    watcher.stop_cleanly();
}
