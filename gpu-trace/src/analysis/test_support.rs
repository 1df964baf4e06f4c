//! Records as the enrich stage makes them, for the analysis tests.

use std::{rc::Rc, time::SystemTime};

use crate::{
    cgroup::identity::identify,
    host::proc_devices::CharMajors,
    model::{
        access::{DeviceAccess, OpenCall, Verdict, VerdictSource},
        node::NvidiaNode,
        record::{Record, RecordKind},
    },
    runtime::NameSources,
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
            v1_devices_cgroup: None,
            sighted_programs: [0; gpu_trace_common::SIGHTED_PROGRAMS],
            device_seen: verdict != Verdict::FailedBeforeDeviceCheck,
            path_digest: None,
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
                path_changed: false,
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
            &NameSources::nowhere(),
        ))),
        driver,
        device: node.map(NvidiaNode::name),
        node,
        nic: None,
        gpu: None,
        mig: None,
        allocation: None,
        vendor: None,
        role: None,
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
        writer: None,
        id: 920,
        name: "lxc_devices".into(),
        tag: "ab12".into(),
        attached_at: "/lxc/200".into(),
        attach_mode: "multi",
        loaded_at: "2026-11-30T06:00:00Z".into(),
        loaded_boot_ns: 1_000_000_000,
        insns: insns.into(),
    }
}
