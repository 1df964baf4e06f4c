//! Other vendors' node sets in `check`: ROCm needs /dev/kfd and a render
//! node, each of which the target may open.

use nix::sys::stat::{makedev, mknod, Mode, SFlag};

use crate::common::*;

#[test]
fn check_vendor_amd_names_the_denied_kfd_and_the_missing_render_node() {
    let host = or_skip!(kernel_test);
    if Path::new("/dev/kfd").exists() || Path::new("/dev/dri").exists() {
        crate::skip::cannot_run(
            "check_vendor_amd_names_the_denied_kfd_and_the_missing_render_node",
            "this host has a real /dev/kfd or /dev/dri",
        );
        return;
    }
    let kfd = uvm_standin();
    let proc_devices = tempfile::NamedTempFile::new().expect("temp file");
    fs::write(
        proc_devices.path(),
        format!("Character devices:\n  1 mem\n226 drm\n{kfd} kfd\n"),
    )
    .expect("write /proc/devices copy");
    // check looks at the target's /dev: here, the host's.
    mknod(
        "/dev/kfd",
        SFlag::S_IFCHR,
        Mode::from_bits_truncate(0o666),
        makedev(kfd.into(), 0),
    )
    .expect("mknod /dev/kfd");
    let cgroup = scratch_cgroup(&host, "rocm");
    let _policy =
        ScratchPolicy::attach(&cgroup, &[(kfd, ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD)])
            .expect("attach");
    let relative = cgroup.relative_path().to_str().expect("UTF-8").to_string();
    let (status, report) = check_json_with(
        &["--cgroup", &relative, "--vendor", "amd"],
        Some(proc_devices.path()),
    );
    let _ = fs::remove_file("/dev/kfd");
    assert_eq!(status, Some(1), "{report:#}");
    assert_eq!(report["stacks"], serde_json::json!(["ROCm"]), "{report:#}");
    let amd = &report["vendors"][0];
    assert_eq!(amd["vendor"], "amd", "{report:#}");
    assert_eq!(amd["usable"], false, "{report:#}");
    let missing: Vec<&str> = amd["missing"]
        .as_array()
        .expect("missing")
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    assert_eq!(missing.len(), 2, "{missing:?}");
    assert!(
        missing[0].starts_with("/dev/kfd: denied (prog "),
        "{missing:?}"
    );
    assert_eq!(missing[1], "a render node (/dev/dri/renderD*) is missing");
    let problems = report["problems"].to_string();
    assert!(
        problems.contains("amd (ROCm): /dev/kfd: denied"),
        "{problems}"
    );
    // CUDA is not judged when only amd is asked for.
    assert!(!problems.contains("nvidia"), "{problems}");
}
