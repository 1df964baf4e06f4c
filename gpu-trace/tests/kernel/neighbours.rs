//! The devices next to the GPU: RDMA verbs, IMEX channels, GPUDirect and
//! VFIO nodes are watched by default where /proc/devices names their
//! drivers, and a denied one is reported with its role, what the job then
//! does (often: runs slowly, without an error), and a fix for that one node.

use gpu_trace::host::proc_devices::CharMajors;
use nix::sys::stat::{makedev, mknod, Mode, SFlag};

use crate::common::*;

/// `count` char majors no driver has here, from the top of the dynamic range.
fn free_majors(count: usize) -> Vec<u32> {
    let majors = CharMajors::read().expect("/proc/devices");
    (384..=511)
        .rev()
        .filter(|m| !majors.is_registered(*m))
        .take(count)
        .collect()
}

#[test]
fn each_device_next_to_the_gpu_is_watched_by_default_and_its_denial_says_what_the_job_sees() {
    let host = or_skip!(kernel_test);
    // Four majors no driver has here, named in a copy of /proc/devices as
    // the drivers name theirs: their real majors vary by host and load.
    let free = free_majors(4);
    let &[rdma, imex, gdr, vfio] = &free[..] else {
        panic!("four free majors: {free:?}")
    };
    let proc_devices = tempfile::NamedTempFile::new().expect("temp file");
    fs::write(
        proc_devices.path(),
        format!("Character devices:\n  1 mem\n195 nvidia\n{rdma} infiniband_verbs\n{imex} nvidia-caps-imex-channels\n{gdr} gdrdrv\n{vfio} vfio\n"),
    )
    .expect("write the /proc/devices copy");
    let nodes = DeviceNodes::create(&[
        ("uverbs1", rdma, 193),
        ("channel7", imex, 7),
        ("gdrdrv", gdr, 0),
        ("12", vfio, 12),
    ])
    .expect("mknod");
    let cgroup = scratch_cgroup(&host, "neighbours");
    let every_access = ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD;
    let _policy = ScratchPolicy::attach(
        &cgroup,
        &[rdma, imex, gdr, vfio].map(|major| (major, every_access)),
    )
    .expect("attach");
    // No --major: watched because /proc/devices names their drivers.
    let watcher = Watcher::with_proc_devices(&[], proc_devices.path());
    // And one that shows RDMA nodes alone.
    let rdma_only = Watcher::with_proc_devices(&["--role", "rdma"], proc_devices.path());

    let mut probes = Vec::new();
    for (node, major, minor, driver, vendor, role, symptom) in [
        (
            "uverbs1",
            rdma,
            193,
            "infiniband_verbs",
            Value::Null,
            "rdma",
            "fall back to TCP sockets without an error",
        ),
        (
            "channel7",
            imex,
            7,
            "nvidia-caps-imex-channels",
            Value::from("nvidia"),
            "imex",
            "CUDA_ERROR_NOT_PERMITTED",
        ),
        (
            "gdrdrv",
            gdr,
            0,
            "gdrdrv",
            Value::from("nvidia"),
            "gpudirect",
            "copies through host memory",
        ),
        (
            "12",
            vfio,
            12,
            "vfio",
            Value::Null,
            "vfio",
            "cannot be passed through",
        ),
    ] {
        let (pid, event) = denied_open(&watcher, &[&cgroup], nodes.path(node), OpenMode::ReadWrite);
        probes.push((role, pid));
        assert_eq!(event["driver"], driver, "{event:#}");
        assert_eq!(event["vendor"], vendor, "{event:#}");
        assert_eq!(event["role"], role, "{event:#}");
        assert_eq!(
            (event["major"].clone(), event["minor"].clone()),
            (major.into(), minor.into())
        );
        assert_eq!(event["verdict"], "denied", "{event:#}");
        assert_event_says(&event, "explanation", symptom);
        // That one node: its minor, never its whole major.
        assert_event_says(&event, "hint", &format!("c {major}:{minor}"));
        assert!(
            !event_text(&event, "hint").contains(&format!("{major}:*")),
            "{event:#}"
        );
    }
    watcher.stop_cleanly();
    // --role rdma: the verbs node's denial, and none of the others'.
    let (rdma_role, rdma_pid) = probes[0];
    assert_eq!(rdma_role, "rdma");
    rdma_only.wait_for_events(rdma_pid, 1);
    for &(role, pid) in &probes[1..] {
        assert_eq!(rdma_only.events_of(pid), Vec::<Value>::new(), "{role}");
    }
    rdma_only.stop_cleanly();
}

#[test]
fn check_lists_the_devices_next_to_the_gpu_with_the_targets_verdicts_without_judging_them() {
    let host = or_skip!(kernel_test);
    if Path::new("/dev/gdrdrv").exists()
        || Path::new("/dev/infiniband").exists()
        || Path::new("/dev/nvidia-nvswitch0").exists()
    {
        crate::skip::cannot_run(
            "check_lists_the_devices_next_to_the_gpu_with_the_targets_verdicts_without_judging_them",
            "this host has a real /dev/gdrdrv, /dev/infiniband or NVSwitch",
        );
        return;
    }
    let free = free_majors(3);
    let &[gdr, verbs, nvswitch] = &free[..] else {
        panic!("three free majors: {free:?}")
    };
    let proc_devices = tempfile::NamedTempFile::new().expect("temp file");
    fs::write(
        proc_devices.path(),
        format!("Character devices:\n  1 mem\n{gdr} gdrdrv\n{verbs} infiniband_verbs\n{nvswitch} nvidia-nvswitch\n"),
    )
    .expect("write the /proc/devices copy");
    // check looks at the target's /dev: here, the host's.
    let node = |path: &str, major: u32, minor: u32| {
        mknod(
            path,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            makedev(major.into(), minor.into()),
        )
        .unwrap_or_else(|e| panic!("mknod {path}: {e}"))
    };
    fs::create_dir("/dev/infiniband").expect("mkdir /dev/infiniband");
    node("/dev/gdrdrv", gdr, 0);
    node("/dev/infiniband/uverbs0", verbs, 192);
    node("/dev/nvidia-nvswitch0", nvswitch, 0);
    let cgroup = scratch_cgroup(&host, "neighbours-check");
    let _policy =
        ScratchPolicy::attach(&cgroup, &[(gdr, ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD)])
            .expect("attach");
    let relative = cgroup.relative_path().to_str().expect("UTF-8").to_string();
    let (status, report) = check_json_with(&["--cgroup", &relative], Some(proc_devices.path()));
    let _ = fs::remove_file("/dev/gdrdrv");
    let _ = fs::remove_file("/dev/nvidia-nvswitch0");
    let _ = fs::remove_dir_all("/dev/infiniband");

    // CUDA is judged (no GPU here: exit 1), the neighbours are not: the
    // denied gdrdrv is listed, and no problem names it.
    assert_eq!(status, Some(1), "{report:#}");
    assert_eq!(report["stacks"], serde_json::json!(["CUDA"]), "{report:#}");
    let listed: Vec<(String, String, String)> = report["neighbours"]
        .as_array()
        .expect("neighbours")
        .iter()
        .map(|n| {
            let text = |f: &str| n[f].as_str().unwrap_or_default().to_string();
            (text("path"), text("role"), text("verdict"))
        })
        .collect();
    assert_eq!(
        listed,
        [
            ("/dev/gdrdrv".into(), "gpudirect".into(), "denied".into()),
            (
                "/dev/infiniband/uverbs0".into(),
                "rdma".into(),
                "allowed".into()
            ),
            (
                "/dev/nvidia-nvswitch0".into(),
                "nvswitch".into(),
                "allowed".into()
            ),
        ],
        "{report:#}"
    );
    let gdrdrv = &report["neighbours"][0];
    assert_eq!(gdrdrv["vendor"], "nvidia", "{report:#}");
    assert_eq!(
        (gdrdrv["major"].as_u64(), gdrdrv["minor"].as_u64()),
        (Some(gdr.into()), Some(0))
    );
    assert!(
        gdrdrv["decided_by"]
            .as_str()
            .is_some_and(|d| d.starts_with("prog ")),
        "{report:#}"
    );
    let problems = report["problems"].to_string();
    assert!(
        !problems.contains("gdrdrv") && !problems.contains("uverbs"),
        "{problems}"
    );
}

/// Nodes made in the host's /dev for one test (the prefixes gpu-trace
/// follows failed opens under are /dev's), removed when dropped with the
/// folders made for them.
struct HostNodes {
    files: Vec<&'static str>,
    folders: Vec<&'static str>,
}

impl Drop for HostNodes {
    fn drop(&mut self) {
        for file in &self.files {
            let _ = fs::remove_file(file);
        }
        for folder in &self.folders {
            let _ = fs::remove_dir(folder);
        }
    }
}

#[test]
fn a_node_next_to_the_gpu_whose_driver_is_not_loaded_names_the_module() {
    let host = or_skip!(kernel_test);
    let test = "a_node_next_to_the_gpu_whose_driver_is_not_loaded_names_the_module";
    let majors = CharMajors::read().expect("/proc/devices");
    let folders = [
        "/dev/infiniband",
        "/dev/vfio",
        "/dev/nvidia-caps-imex-channels",
    ];
    if majors.is_registered(231) || folders.iter().any(|f| Path::new(f).exists()) {
        crate::skip::cannot_run(test, "this host has RDMA, VFIO or IMEX nodes of its own");
        return;
    }
    let free = free_majors(4);
    let &[gdr, vfio, fs, imex] = &free[..] else {
        panic!("four free majors: {free:?}")
    };
    let mut made = HostNodes {
        files: Vec::new(),
        folders: Vec::new(),
    };
    let nodes = [
        // (path, major, module named, how to load it, what the job sees)
        (
            "/dev/infiniband/uverbs0",
            231,
            "ib_uverbs is not loaded",
            "`modprobe ib_uverbs`",
            "fall back to TCP sockets",
        ),
        (
            "/dev/gdrdrv",
            gdr,
            "gdrdrv (gdrcopy's module) is not loaded",
            "`modprobe gdrdrv`",
            "through host memory",
        ),
        (
            "/dev/vfio/7",
            vfio,
            "vfio is not loaded",
            "`modprobe vfio-pci`",
            "cannot be passed through",
        ),
        (
            "/dev/nvidia-fs0",
            fs,
            "nvidia-fs (GPUDirect Storage's module) is not loaded",
            "`modprobe nvidia-fs`",
            "through host memory",
        ),
        (
            "/dev/nvidia-caps-imex-channels/channel0",
            imex,
            "the nvidia module (it registers the IMEX channels) is not loaded",
            "`modprobe nvidia`",
            "CUDA_ERROR_NOT_PERMITTED",
        ),
    ];
    for (path, major, ..) in nodes {
        let folder = Path::new(path).parent().expect("a folder");
        if !folder.exists() {
            fs::create_dir(folder).expect("mkdir");
            made.folders.push(
                folders
                    .into_iter()
                    .find(|f| Path::new(f) == folder)
                    .unwrap(),
            );
        }
        mknod(
            path,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            makedev(major.into(), 0),
        )
        .unwrap_or_else(|e| panic!("mknod {path}: {e}"));
        made.files.push(path);
    }
    // No policy: the device check lets each by, and no driver answers.
    // Open results are traced (by default only where fexit is, or a v1
    // devices cgroup could refuse): no major here is watched, each is
    // reported by its path.
    let cgroup = scratch_cgroup(&host, "neighbours-no-driver");
    let watcher = Watcher::start(&["--format", "json", "--opens", "full"]);
    for (path, major, module, load, sees) in nodes {
        let probe = gpu_trace::scenario::run_probe(
            Path::new(gpu_trace()),
            &[&cgroup],
            &[ProbeOp::Open {
                path: path.into(),
                mode: OpenMode::ReadWrite,
            }],
        )
        .expect("probe");
        assert_eq!(probe.results, [libc::ENXIO], "{path}");
        let events = watcher.wait_for_events(probe.pid, 1);
        let [event] = &events[..] else {
            panic!("one event for {path}: {events:#?}")
        };
        assert_eq!(event["path"], path, "{event:#}");
        assert_eq!(event["major"], major, "{event:#}");
        assert_eq!(event["driver"], Value::Null, "{event:#}");
        assert_eq!(event["verdict"], "allowed", "{event:#}");
        assert_eq!(event["cause"], "driver-not-loaded", "{event:#}");
        assert_event_says(event, "explanation", module);
        assert_event_says(event, "explanation", sees);
        assert_event_starts(event, "hint", &format!("load it on the host: {load}"));
    }
    watcher.stop_cleanly();
}
