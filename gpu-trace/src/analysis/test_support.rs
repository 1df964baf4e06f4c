//! Records as the enrich stage makes them, for the analysis tests.

use std::{rc::Rc, time::SystemTime};

use crate::{
    cgroup::identity::{identify, NameSources},
    host::proc_devices::CharMajors,
    model::{
        access::{DeviceAccess, OpenCall, Verdict, VerdictSource},
        node::NvidiaNode,
        record::{Record, RecordKind},
    },
};

pub const PROC_DEVICES: &str = "Character devices:\n195 nvidia-frontend\n509 nvidia-uvm\n";

pub fn record(
    cgroup: &str,
    path: &str,
    major: u32,
    minor: u32,
    verdict: Verdict,
    ret: i32,
) -> Record {
    let majors = CharMajors::parse(PROC_DEVICES);
    let driver = majors.driver(major).map(str::to_string);
    let node = driver
        .as_deref()
        .and_then(|d| NvidiaNode::from_device(d, minor))
        .or_else(|| NvidiaNode::from_path(path.as_bytes()));
    Record {
        access: DeviceAccess {
            boot_ns: 0,
            pid: 1,
            tid: 1,
            uid: 1000,
            comm: b"python3".to_vec(),
            cgroup_id: 7,
            device_seen: verdict != Verdict::FailedBeforeDeviceCheck,
            block_device: false,
            major,
            minor,
            access: 6,
            verdict,
            bpf_retval: if verdict == Verdict::DeniedByBpfPolicy {
                -1
            } else {
                0
            },
            verdict_from: VerdictSource::BpfRetval,
            open: Some(OpenCall {
                syscall: "openat",
                path: path.into(),
                path_truncated: false,
                ret: Some(ret),
            }),
        },
        time: SystemTime::UNIX_EPOCH,
        count: 1,
        first_seen: SystemTime::UNIX_EPOCH,
        last_seen: SystemTime::UNIX_EPOCH,
        cgroup: Some(cgroup.into()),
        container: Rc::new(crate::model::rendered::Rendered::new(identify(
            cgroup,
            &NameSources {
                pve_lxc_dir: "/none".into(),
                docker_containers_dir: "/none".into(),
                cgroup2_mount: None,
            },
        ))),
        driver,
        device: node.map(NvidiaNode::name),
        node,
        denied_by: None,
        diagnosis: None,
        kind: RecordKind::Event,
    }
}

/// A recorded device program as LXC attaches it: prog 920 (lxc_devices)
/// at /lxc/200, made of `insns`.
pub fn lxc_program(
    insns: Vec<gpu_trace_policy::Insn>,
) -> crate::kernel::programs_in_force::PolicyProgram {
    crate::kernel::programs_in_force::PolicyProgram {
        id: 920,
        name: "lxc_devices".into(),
        tag: "ab12".into(),
        attached_at: "/lxc/200".into(),
        attach_mode: "multi",
        insns,
    }
}

/// The words bash makes of each backticked command in `hint` that mentions
/// `marker`, pasted as an admin would (with every command replaced by a
/// printer: PATH leads nowhere and bash's not-found handler prints the
/// words). Panics if pasting one ran anything or wrote a file.
pub fn pasted_words(hint: &str, marker: &str) -> Vec<Vec<String>> {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut pasted = Vec::new();
    for command in hint.split('`').skip(1).step_by(2) {
        if !command.contains(marker) {
            continue;
        }
        let script = format!(
            "command_not_found_handle() {{ printf '%s\\0' \"$@\"; printf '\\n'; }}\nPATH=/nonexistent\n{command}\n"
        );
        let out = std::process::Command::new("bash")
            .arg("--norc")
            .arg("-c")
            .arg(script)
            .current_dir(dir.path())
            .output()
            .expect("bash runs");
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines() {
            let words: Vec<String> = line
                .split('\0')
                .filter(|w| !w.is_empty())
                .map(str::to_string)
                .collect();
            pasted.push(words);
        }
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .expect("read temp dir")
            .collect();
        assert!(left.is_empty(), "pasting `{command}` wrote files: {left:?}");
    }
    pasted
}

/// The word every hostile test name carries.
pub const MARKER: &str = "pwned";

/// Panics unless every command in `hint` that names `tenant` (marked by
/// `MARKER`) gets it as literal text when pasted into a shell. A name no
/// quoting can show (with a backtick) must be a placeholder instead.
pub fn assert_paste_safe(hint: &str, tenant: &str) {
    let pasted = pasted_words(hint, MARKER);
    if tenant.contains('`') {
        let placeholder = hint.contains("<container>") || hint.contains("<node path>");
        assert!(pasted.is_empty() && placeholder, "{hint}");
        return;
    }
    assert!(!pasted.is_empty(), "no command names {tenant:?}: {hint}");
    for words in &pasted {
        assert!(
            words.iter().any(|w| w.contains(tenant)),
            "pasting gave {words:?}, which lost {tenant:?} as literal text: {hint}"
        );
    }
}
