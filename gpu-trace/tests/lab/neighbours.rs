//! The devices next to the GPU in the lab: the stand-in's nodes under their
//! drivers' real names, and real drivers where Debian's kernel has one that
//! needs no hardware: Soft-RoCE (rdma_rxe) for RDMA verbs, and vfio-pci
//! for the guest's network card behind its emulated IOMMU.

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
    let events = events_of_id(watcher, unit);
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

/// A device next to the GPU as the stand-in registers it: driver, node,
/// minor, vendor, role, what the job sees, and the cause named.
type Family = (
    &'static str,
    &'static str,
    u32,
    Option<&'static str>,
    &'static str,
    &'static str,
    &'static str,
);

const FAMILIES: [Family; 5] = [
    // (driver, node, minor, vendor, role, what the job sees, cause)
    (
        "infiniband_verbs",
        "/dev/infiniband/uverbs0",
        192,
        None,
        "rdma",
        "fall back to TCP sockets without an error",
        "device-denied",
    ),
    (
        "nvidia-caps-imex-channels",
        "/dev/nvidia-caps-imex-channels/channel0",
        0,
        Some("nvidia"),
        "imex",
        "CUDA_ERROR_NOT_PERMITTED",
        "device-denied",
    ),
    (
        "gdrdrv",
        "/dev/gdrdrv",
        0,
        Some("nvidia"),
        "gpudirect",
        "copies through host memory",
        "device-denied",
    ),
    (
        "nvidia-fs",
        "/dev/nvidia-fs0",
        0,
        Some("nvidia"),
        "gpudirect",
        "copies through host memory",
        "device-denied",
    ),
    (
        "nvidia-nvswitch",
        "/dev/nvidia-nvswitch0",
        0,
        Some("nvidia"),
        "nvswitch",
        "CUDA_ERROR_SYSTEM_NOT_READY",
        // An NVIDIA node on a dynamic major, as nvidia-uvm's.
        "dynamic-major-not-allowed",
    ),
];

/// Makes each family's node on the major /proc/devices gives its driver,
/// waits for watch to say it follows each new one (`new_majors`: as many
/// as watch has not met before), and has a `DevicePolicy=closed` service
/// open each: the event names the driver, role, symptom, systemd and one
/// node's `DeviceAllow=`. The majors, in FAMILIES' order.
fn deny_each_family(watcher: &mut Watcher, round: &str, new_majors: &[u32]) -> Vec<u32> {
    let mut majors = Vec::new();
    for (driver, node, minor, ..) in FAMILIES {
        let major = major_of(driver).unwrap_or_else(|| panic!("{driver} in /proc/devices"));
        mknod(Path::new(node), major, minor);
        majors.push(major);
    }
    assert_eq!(majors[0], 231, "the verbs nodes' fixed major");
    // Said in the order of the majors.
    let mut said: Vec<(u32, &str)> = majors
        .iter()
        .zip(FAMILIES)
        .map(|(m, f)| (*m, f.0))
        .filter(|(m, _)| new_majors.is_empty() || new_majors.contains(m))
        .collect();
    said.sort_unstable();
    for (major, driver) in said {
        watcher.wait_for_stderr(&format!(
            "gpu-trace: now also watching char major {major} ({driver}), registered after start"
        ));
    }

    for (&major, (driver, node, minor, vendor, role, sees, cause)) in majors.iter().zip(FAMILIES) {
        // A service whose policy systemd writes: no device allowed.
        let unit = format!("gt-lab-{role}-{major}-{round}");
        let event = service_denied(watcher, &unit, &["DevicePolicy=closed"], node, major);
        assert_eq!(event["driver"], driver, "{event:#}");
        assert_eq!(event["vendor"], Value::from(vendor), "{event:#}");
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
    majors
}

#[test]
fn the_devices_next_to_the_gpu_are_watched_from_their_drivers_load_and_say_what_the_job_sees() {
    let lab = or_skip!(lab_test);
    // The real verbs driver would hold 231, which the stand-in takes.
    unload(SOFT_ROCE_MODULES);
    // watch runs first, as an audit logger does: the drivers load after it.
    let _ = Command::new("rmmod").arg("gpu_standin").output();
    let mut watcher = Watcher::start(&["--format", "json"]);
    let driver = Driver::load(&lab, &["neighbours=1"]);
    let before = deny_each_family(&mut watcher, "loaded", &[]);

    // A reload moves every dynamic major (shift=1 holds one while the
    // others register, as a reboot may): watch follows each driver to its
    // new major, and names it there.
    drop(driver);
    let _driver = Driver::load(&lab, &["neighbours=1", "shift=1"]);
    let after: Vec<u32> = FAMILIES
        .iter()
        .map(|f| major_of(f.0).unwrap_or_else(|| panic!("{} in /proc/devices", f.0)))
        .collect();
    for ((family, old), new) in FAMILIES.iter().zip(&before).zip(&after).skip(1) {
        assert_ne!(old, new, "{}'s major did not move", family.0);
    }
    let unmet: Vec<u32> = after
        .iter()
        .copied()
        .filter(|m| !before.contains(m))
        .collect();
    assert!(!unmet.is_empty(), "no major is new: {before:?} {after:?}");
    let reloaded = deny_each_family(&mut watcher, "reloaded", &unmet);
    assert_eq!(reloaded, after);
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

/// VFIO and its PCI driver: unloaded before and after its scene.
const VFIO_MODULES: &[&str] = &["vfio_pci", "vfio_pci_core", "vfio_iommu_type1", "vfio"];

/// A PCI device bound to vfio-pci, which makes its IOMMU group's node
/// `/dev/vfio/N` (the lab's guest has an emulated IOMMU). The device is the
/// guest's network card, which has no driver here. Unbound, modules and
/// all, when dropped.
struct VfioGroup {
    pci: String,
}

impl VfioGroup {
    fn bind() -> Self {
        let pci = fs::read_dir("/sys/bus/pci/devices")
            .expect("PCI devices")
            .filter_map(|e| e.ok())
            .map(|e| e.path())
            .find(|dev| {
                !dev.join("driver").exists()
                    && fs::read_to_string(dev.join("class")).is_ok_and(|c| c.starts_with("0x02"))
            })
            .expect("a network card without a driver");
        let pci = pci.file_name().unwrap().to_string_lossy().into_owned();
        succeeded("modprobe", &["vfio-pci"]);
        let device = Path::new("/sys/bus/pci/devices").join(&pci);
        fs::write(device.join("driver_override"), "vfio-pci").expect("driver_override");
        fs::write("/sys/bus/pci/drivers_probe", &pci).expect("drivers_probe");
        VfioGroup { pci }
    }

    /// The group's node in /dev/vfio.
    fn node(&self) -> PathBuf {
        let deadline = Instant::now() + WAIT;
        loop {
            let found = fs::read_dir("/dev/vfio")
                .into_iter()
                .flatten()
                .filter_map(|e| e.ok())
                .map(|e| e.path())
                .find(|p| p.file_name().is_some_and(|n| n != "vfio"));
            match found {
                Some(node) => return node,
                None if Instant::now() < deadline => thread::sleep(Duration::from_millis(50)),
                None => {
                    let device = Path::new("/sys/bus/pci/devices").join(&self.pci);
                    let kernel_said = run("dmesg", &[]);
                    let kernel_said = String::from_utf8_lossy(&kernel_said.stdout);
                    let tail: Vec<&str> = kernel_said.lines().rev().take(15).collect();
                    panic!(
                        "no VFIO group for {} in /dev/vfio; its driver: {:?}, its IOMMU group: {:?}; the kernel's last words: {tail:#?}",
                        self.pci,
                        fs::read_link(device.join("driver")),
                        fs::read_link(device.join("iommu_group")),
                    )
                }
            }
        }
    }
}

impl Drop for VfioGroup {
    fn drop(&mut self) {
        let _ = fs::write("/sys/bus/pci/drivers/vfio-pci/unbind", &self.pci);
        let device = Path::new("/sys/bus/pci/devices").join(&self.pci);
        let _ = fs::write(device.join("driver_override"), "\n");
        unload(VFIO_MODULES);
    }
}

#[test]
fn a_vfio_group_denied_says_passthrough_fails_and_grants_that_group_alone() {
    let _lab = or_skip!(lab_test);
    unload(VFIO_MODULES);
    let mut watcher = Watcher::start(&["--format", "json"]);
    let group = VfioGroup::bind();
    let major = major_of("vfio").expect("vfio in /proc/devices");
    watcher.wait_for_stderr(&format!(
        "gpu-trace: now also watching char major {major} (vfio), registered after start"
    ));
    let node = group.node();
    let (node_major, minor) = numbers_of(&wait_for_node(&node));
    assert_eq!(node_major, major, "{}", node.display());
    let node = node.to_str().expect("a UTF-8 path");

    let unit = "gt-lab-vfio";
    let event = service_denied(&watcher, unit, &["DevicePolicy=closed"], node, major);
    assert_eq!(event["driver"], "vfio", "{event:#}");
    assert_eq!(event["role"], "vfio", "{event:#}");
    assert_eq!(event["minor"], minor, "{event:#}");
    assert_eq!(writer_of(&event), "systemd", "{event:#}");
    assert_eq!(event["cause"], "device-denied", "{event:#}");
    let explanation = event["explanation"].as_str().unwrap_or_default();
    assert!(
        explanation.contains("cannot be passed through"),
        "{explanation}"
    );
    // A group's number is not its minor: that one node by udev's link.
    let fix = fix_text(&event);
    let allow = device_allow_in(&fix);
    assert_eq!(
        allow,
        format!("DeviceAllow=/dev/char/{major}:{minor} rw"),
        "{fix}"
    );

    // The fix, applied: the group opens, and nothing is said.
    let fixed = "gt-lab-vfio-fixed";
    let open = format!("dd if={node} of=/dev/null count=0 status=none");
    let (ok, said) = service_output(fixed, &["DevicePolicy=closed", &allow], &open);
    assert!(ok, "the group with the fix: {said}");
    assert_no_event_of(&watcher, &format!("{fixed}.service"));
    watcher.stop_cleanly();
}
