//! Policies written by runc itself: a cgroup_device program when it sees a
//! pure cgroup2 layout (given to it in a private mount namespace), and v1
//! devices.list rules on the hybrid layout as this host has it.

use std::os::unix::fs::symlink;

use gpu_trace::{
    cgroup::target::first_pid_in, host::proc_pid::devices_list_of, scenario::run_probe_in,
};
use gpu_trace_policy::V1Answer;
use serde_json::json;

use crate::{common::*, lxc::lxc_test, policy_grid::*};

/// A runc container (busybox `sleep 60`) with a device allow list.
struct RuncContainer {
    id: String,
    dir: tempfile::TempDir,
    cgroup: String,
    /// Started in a private mount namespace with cgroup2 at /sys/fs/cgroup.
    pure_v2: bool,
}

impl RuncContainer {
    fn start(test: &str, allowed_char_majors: &[u32], pure_v2: bool) -> Self {
        let id = format!("gt-{test}-{}", std::process::id());
        let dir = temp_dir_named("gpu-trace-runc-");
        let bundle = dir.path().join("bundle");
        let rootfs = bundle.join("rootfs/bin");
        fs::create_dir_all(&rootfs).expect("rootfs");
        fs::copy("/bin/busybox", rootfs.join("busybox")).expect("busybox");
        symlink("busybox", rootfs.join("sleep")).expect("applet");
        let spec = Command::new("runc")
            .arg("spec")
            .current_dir(&bundle)
            .status()
            .expect("runc spec");
        assert!(spec.success(), "runc spec");
        let config_path = bundle.join("config.json");
        let mut config: Value =
            serde_json::from_str(&fs::read_to_string(&config_path).expect("config")).expect("json");
        let cgroup = format!("/{id}");
        config["process"]["terminal"] = json!(false);
        config["process"]["args"] = json!(["sleep", "60"]);
        config["linux"]["cgroupsPath"] = json!(cgroup);
        config["linux"]["namespaces"] =
            json!([{"type": "pid"}, {"type": "mount"}, {"type": "ipc"}, {"type": "uts"}]);
        let mut rules = vec![json!({"allow": false, "access": "rwm"})];
        rules.extend(
            allowed_char_majors
                .iter()
                .map(|m| json!({"allow": true, "type": "c", "major": m, "access": "rwm"})),
        );
        config["linux"]["resources"]["devices"] = json!(rules);
        fs::write(&config_path, config.to_string()).expect("write config");
        let container = Self {
            id,
            dir,
            cgroup,
            pure_v2,
        };
        let run = format!(
            "runc --root {} run -d --bundle {} {} </dev/null >/dev/null 2>&1",
            container.state().display(),
            bundle.display(),
            container.id
        );
        assert!(container.shell(&run), "runc run");
        container
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// Runs `script` as runc must see the cgroup layout.
    fn shell(&self, script: &str) -> bool {
        let script = if self.pure_v2 {
            format!("mount --make-rprivate / && {PURE_CGROUP2} && {script}")
        } else {
            script.to_string()
        };
        let (program, args): (&str, Vec<&str>) = if self.pure_v2 {
            ("unshare", vec!["-m", "sh", "-c", &script])
        } else {
            ("sh", vec!["-c", &script])
        };
        Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for RuncContainer {
    fn drop(&mut self) {
        let state = self.state();
        self.shell(&format!(
            "runc --root {0} kill {1} KILL; sleep 0.2; runc --root {0} delete -f {1}",
            state.display(),
            self.id
        ));
    }
}

fn runc_test(name: &str) -> Option<gpu_trace::host::preflight::Host> {
    let host = lxc_test(name)?; // busybox-static, root, cgroup2
    if !Command::new("runc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        crate::skip::cannot_run(name, "runc not installed");
        return None;
    }
    Some(host)
}

/// A runc container on pure cgroup2 allowed 195 only, whose program the
/// evaluator judges as the kernel does (195, the uvm stand-in, 1); the
/// container and the policy in force at its cgroup.
fn runc_v2_matching_the_kernel(
    host: &gpu_trace::host::preflight::Host,
    test: &str,
) -> (
    RuncContainer,
    gpu_trace::kernel::programs_in_force::CgroupPolicy,
) {
    let major = uvm_standin();
    let container = RuncContainer::start(test, &[195], true);
    let dir = host
        .cgroup2_mount
        .join(container.cgroup.trim_start_matches('/'));
    let policy = assert_evaluator_matches_kernel(&host.cgroup2_mount, &dir, &[195, major, 1]);
    (container, policy)
}

#[test]
fn evaluator_matches_the_kernel_for_runcs_cgroup2_program() {
    let host = or_skip!(runc_test);
    let (container, policy) = runc_v2_matching_the_kernel(&host, "runc-v2");
    assert!(
        policy
            .programs
            .iter()
            .any(|p| p.attached_at == container.cgroup),
        "runc's program at its cgroup: {policy:#?}"
    );
}

#[test]
fn evaluator_matches_the_kernel_for_runcs_program_under_a_hardened_jit() {
    let host = or_skip!(runc_test);
    let _harden = JitHarden::set("2");
    let (_container, policy) = runc_v2_matching_the_kernel(&host, "runc-hardened");
    assert!(
        blinded(&policy),
        "the kernel blinded runc's program: {policy:#?}"
    );
}

#[test]
fn devices_list_matches_the_kernel_for_runcs_v1_rules() {
    let _host = or_skip!(runc_test);
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    let Some(v1_devices) =
        gpu_trace::host::mountinfo::v1_controller_mount_in(&mountinfo, "devices")
    else {
        eprintln!("skipping devices_list_matches_the_kernel_for_runcs_v1_rules: no cgroup v1 devices controller mounted");
        return;
    };
    let major = uvm_standin();
    let container = RuncContainer::start("runc-v1", &[195], false);
    let v1_dir = v1_devices.join(container.cgroup.trim_start_matches('/'));
    let pid = first_pid_in(&v1_dir).expect("runc's process in its v1 devices cgroup");
    let list = devices_list_of(pid)
        .expect("read devices.list")
        .expect("v1 devices cgroup");
    assert_eq!(list.cgroup, container.cgroup);
    assert!(
        list.lines.iter().any(|l| l == "c 195:* rwm"),
        "{:?}",
        list.lines
    );

    let majors = [195, major, 1, 136];
    let nodes = grid_nodes(&majors);
    let ops = grid(&nodes, &majors);
    let probe_ops: Vec<_> = ops.iter().map(|(op, _)| op.clone()).collect();
    let outcome = run_probe_in(Path::new(gpu_trace()), &[&v1_dir], &probe_ops)
        .expect("probe in the v1 devices cgroup");
    let (mut denied, mut allowed) = (0, 0);
    for ((op, query), errno) in ops.iter().zip(&outcome.results) {
        let kernel_denied = *errno == libc::EPERM;
        match list.answer(query) {
            V1Answer::Denied => {
                assert!(
                    kernel_denied,
                    "{op:?}: devices.list denies, kernel gave errno {errno}"
                );
                denied += 1;
            }
            V1Answer::Allowed(_) => {
                assert!(
                    !kernel_denied,
                    "{op:?}: devices.list allows, kernel gave EPERM"
                );
                allowed += 1;
            }
            V1Answer::AllowedByDefault => panic!("runc writes a default-deny list"),
        }
    }
    assert!(
        denied > 0 && allowed > 0,
        "both outcomes: {denied} denied, {allowed} allowed"
    );
}
