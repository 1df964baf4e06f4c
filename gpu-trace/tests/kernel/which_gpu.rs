//! Which GPU a denied node is: the NVIDIA driver's own /proc/driver files
//! (a copy in the real files' format here, through GPU_TRACE_PROC_DRIVER:
//! this machine has no GPU) name a GPU node's UUID and PCI bus id, and a
//! MIG capability node's instance and GPU.

use gpu_trace::model::node::NVIDIA_FRONTEND_MAJOR;
use gpu_trace_common::{ACCESS_MKNOD, ACCESS_READ, ACCESS_WRITE};

use crate::common::*;

/// /proc/driver as the driver writes it for one GPU, minor 3, with a
/// compute instance on capability minor 31.
fn proc_driver() -> tempfile::TempDir {
    let root = temp_dir_named("gpu-trace-proc-driver-");
    let gpu = root.path().join("nvidia/gpus/0000:18:00.0");
    fs::create_dir_all(&gpu).expect("gpu dir");
    fs::write(
        gpu.join("information"),
        "Model: \t\t NVIDIA A100-SXM4-40GB\nIRQ:   \t\t 42\nGPU UUID: \t\t GPU-6f1b2c3d-aaaa-bbbb-cccc-0123456789ab\nVideo BIOS: \t\t 92.00.45.00.03\nBus Type: \t\t PCIe\nDMA Size: \t\t 47 bits\nDMA Mask: \t\t 0x7fffffffffff\nBus Location: \t\t 0000:18:00.0\nDevice Minor: \t\t 3\nGPU Excluded:\t\t No\n",
    )
    .expect("information");
    let caps = root.path().join("nvidia-caps");
    fs::create_dir_all(&caps).expect("caps dir");
    fs::write(
        caps.join("mig-minors"),
        "config 1\nmonitor 2\ngpu3/gi1/access 30\ngpu3/gi1/ci0/access 31\n",
    )
    .expect("mig-minors");
    root
}

#[test]
fn a_denied_gpu_and_mig_node_name_their_gpu_by_uuid_and_bus_id() {
    let host = or_skip!(kernel_test);
    let caps_major = uvm_standin();
    let cgroup = scratch_cgroup(&host, "which-gpu");
    let denied = ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD;
    let _policy = ScratchPolicy::attach(
        &cgroup,
        &[(NVIDIA_FRONTEND_MAJOR, denied), (caps_major, denied)],
    )
    .expect("attach");
    let nodes = DeviceNodes::create(&[
        ("nvidia3", NVIDIA_FRONTEND_MAJOR, 3),
        ("nvidia-cap31", caps_major, 31),
    ])
    .expect("mknod");
    let proc_devices = temp_dir_named("gpu-trace-proc-devices-");
    let proc_devices = proc_devices.path().join("devices");
    fs::write(
        &proc_devices,
        format!("Character devices:\n  1 mem\n195 nvidia-frontend\n{caps_major} nvidia-caps\n\nBlock devices:\n  8 sd\n"),
    )
    .expect("write /proc/devices copy");
    let proc_driver = proc_driver();
    let mut command = Command::new(gpu_trace());
    command
        .args([
            "watch",
            "--format",
            "json",
            "--major",
            &caps_major.to_string(),
        ])
        .env("GPU_TRACE_PROC_DEVICES", &proc_devices)
        .env("GPU_TRACE_PROC_DRIVER", proc_driver.path());
    let watcher = Watcher::spawn(command);

    let (_, gpu_event) = denied_open(
        &watcher,
        &[&cgroup],
        nodes.path("nvidia3"),
        OpenMode::ReadWrite,
    );
    assert_eq!(gpu_event["device"], "nvidia3", "{gpu_event:#}");
    assert_eq!(
        gpu_event["gpu"],
        serde_json::json!({"uuid": "GPU-6f1b2c3d-aaaa-bbbb-cccc-0123456789ab", "pci_bus_id": "0000:18:00.0", "minor": 3}),
        "{gpu_event:#}"
    );
    assert!(gpu_event["mig"].is_null(), "{gpu_event:#}");

    let (_, cap_event) = denied_open(
        &watcher,
        &[&cgroup],
        nodes.path("nvidia-cap31"),
        OpenMode::ReadWrite,
    );
    assert_eq!(
        cap_event["mig"],
        serde_json::json!({"capability": "compute-instance", "gpu": 3, "gi": 1, "ci": 0}),
        "{cap_event:#}"
    );
    assert_eq!(cap_event["gpu"], gpu_event["gpu"], "{cap_event:#}");
    watcher.stop_cleanly();
}
