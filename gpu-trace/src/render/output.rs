//! Records written out: one human line or one JSON object per event.
//!
//! Paths, command names and cgroup names are chosen by other processes:
//! human lines go out through `TerminalLines` (escaped whole), JSON through
//! the terminal-safe formatter, so whatever they hold, an event stays on
//! its lines and cannot drive the terminal.

use std::{
    borrow::Cow,
    io::{self, Write},
};

use chrono::{DateTime, Local};

use crate::{
    model::{
        access::Verdict,
        record::{Record, RecordKind},
        vendor::{Role, Vendor},
    },
    render::timestamp::write_rfc3339_micros,
    text::{
        json, style,
        terminal::{printable, TerminalLines},
    },
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One aligned line per event.
    Human,
    /// One JSON object per line (JSON lines), field names documented in README.md.
    Json,
}

/// Appends the record's line(s) to `out`. `paint`: colour the human line's
/// verdict and fix (text/style.rs).
pub fn write_record(
    out: &mut Vec<u8>,
    format: Format,
    paint: bool,
    record: &Record,
) -> io::Result<()> {
    match format {
        Format::Human => write_human(out, record, "", paint),
        Format::Json => {
            write_json(out, record);
            out.push(b'\n');
            Ok(())
        }
    }
}

/// The JSON lines object of one record, as a value (for reports).
pub fn record_json(record: &Record) -> serde_json::Value {
    let mut line = Vec::new();
    write_json(&mut line, record);
    serde_json::from_slice(&line).expect("write_json writes valid JSON")
}

/// The event's line and, when diagnosed, its fix line, each after `indent`.
pub fn write_human(
    out: &mut impl Write,
    record: &Record,
    indent: &str,
    paint: bool,
) -> io::Result<()> {
    let mut lines = TerminalLines::painted(out, paint);
    let time: DateTime<Local> = record.time.into();
    let (verdict, style) = match (record.kind, record.access.verdict) {
        (RecordKind::Summary { .. }, _) => ("SUMMARY", style::SUMMARY),
        (_, Verdict::Allowed) => ("allowed", style::ALLOWED),
        (_, Verdict::FailedBeforeDeviceCheck) => ("FAILED ", style::FAILED),
        _ => ("DENIED ", style::DENIED),
    };
    let head = format!("{indent}{}  ", time.format("%H:%M:%S%.3f"));
    lines.parts(&[
        (None, &head),
        (Some(style), verdict),
        (None, &human_line(record)),
    ])?;
    if let Some(diagnosis) = &record.diagnosis {
        let label = format!("fix ({}):", diagnosis.cause.id());
        lines.parts(&[
            (None, &format!("{indent}        ")),
            (Some(style::FIX), &label),
            (None, " "),
            (None, &diagnosis.hint),
        ])?;
    }
    Ok(())
}

/// The event on one line after its time and verdict, before terminal escaping.
/// " [GPU-… 0000:18:00.0]", " [MIG gpu 3 gi 1 ci 0 of GPU-…]": which GPU
/// a node is, as the driver names it (its text checked when read), and
/// for a pod's denial whether the kubelet allocated it to the container;
/// " [NIC mlx5_0 on eth0]" for an RDMA node.
fn which_gpu(record: &Record) -> String {
    if let Some(nic) = record.nic.as_deref() {
        // Names checked plain when read from sysfs.
        return format!(" [NIC {}]", &**nic);
    }
    let gpu = record
        .gpu
        .as_deref()
        .map(|g| format!("{} {}", g.uuid, g.pci_bus_id));
    let Some(mig) = record.mig.as_deref() else {
        let allocation = match record.allocation.as_deref() {
            Some(a) if a.allocated => ", allocated to the container",
            Some(_) => ", not allocated to the container",
            None => "",
        };
        return gpu
            .map(|g| format!(" [{g}{allocation}]"))
            .unwrap_or_default();
    };
    let mut text = format!(" [MIG {}", mig.capability);
    for (name, number) in [("gpu", mig.gpu), ("gi", mig.gi), ("ci", mig.ci)] {
        if let Some(number) = number {
            text.push_str(&format!(" {name} {number}"));
        }
    }
    if let Some(gpu) = gpu {
        text.push_str(&format!(" of {gpu}"));
    }
    text + "]"
}

fn human_line(record: &Record) -> String {
    let a = &record.access;
    let device = if a.device_seen {
        format!(
            "{} {} {}:{} {}",
            record.device.as_deref().unwrap_or("(no driver)"),
            a.type_letter(),
            a.major,
            a.minor,
            a.access_letters()
        )
    } else {
        record
            .device
            .clone()
            .unwrap_or_else(|| "(no device)".into())
    };
    let device = device + &which_gpu(record);
    let (path, result) = match &a.open {
        Some(open) => (
            open.shown_path(),
            match (open.ret, open.errno()) {
                (None, _) => "(result not traced)".to_string(),
                (_, Some(errno)) => errno_name(errno),
                (_, None) => "ok".to_string(),
            },
        ),
        None => ("(not an open call)".to_string(), "-".to_string()),
    };
    // A plain cgroup's label would only repeat its path.
    let container = if crate::runtime::of(record.container.runtime).is_container() {
        format!("{}  ", crate::runtime::label(&record.container))
    } else {
        String::new()
    };
    let mut line = format!(
        "  {container}pid {pid} tid {tid} {comm} uid {uid}  cgroup {cgroup}  {device}  {path}  {result}",
        pid = a.pid,
        tid = a.tid,
        comm = printable(&a.comm),
        uid = a.uid,
        cgroup = cgroup_text(record),
    );
    if record.count > 1 {
        let seen = |t: std::time::SystemTime| {
            DateTime::<Local>::from(t)
                .format("%H:%M:%S%.3f")
                .to_string()
        };
        line.push_str(&format!(
            "  x{} from {} to {}",
            record.count,
            seen(record.first_seen),
            seen(record.last_seen)
        ));
    }
    if let RecordKind::Summary { cgroups } = record.kind {
        let whose = match cgroups {
            1 => "this cgroup's problems".to_string(),
            n => format!("the problems of {n} cgroups"),
        };
        line.push_str(&format!(
            "  ({whose} past this window's record budget, the last shown)"
        ));
    }
    match &record.denied_by {
        Some(culprit) => {
            line.push_str("  by ");
            line.push_str(&culprit.describe());
        }
        None if a.verdict.is_denied() => {
            line.push_str("  ");
            line.push_str(a.verdict.describe());
        }
        None => {}
    }
    line
}

fn cgroup_text(record: &Record) -> String {
    match &record.cgroup {
        Some(path) => printable(path.as_os_str().as_encoded_bytes()),
        None => format!("(gone, id {})", record.access.cgroup_id),
    }
}

/// "EPERM", "ENXIO", ...
pub fn errno_name(errno: i32) -> String {
    ErrnoName(errno).to_string()
}

/// An errno's name, written where it goes (a JSON line needs no String).
struct ErrnoName(i32);

impl std::fmt::Display for ErrnoName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match nix::errno::Errno::from_raw(self.0) {
            nix::errno::Errno::UnknownErrno => write!(f, "errno {}", self.0),
            known => write!(f, "{known:?}"),
        }
    }
}

/// A byte string as JSON: the text itself when it is valid UTF-8 (serde_json
/// escapes quotes, newlines and control characters); otherwise a readable
/// form with \xNN for the invalid bytes plus the exact bytes in hex.
fn json_text(bytes: &[u8]) -> (Cow<'_, str>, Option<String>) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (Cow::Borrowed(text), None),
        Err(_) => {
            let mut readable = String::new();
            for chunk in bytes.utf8_chunks() {
                readable.push_str(chunk.valid());
                for b in chunk.invalid() {
                    readable.push_str(&format!("\\x{b:02x}"));
                }
            }
            let hex = bytes.iter().map(|b| format!("{b:02x}")).collect();
            (Cow::Owned(readable), Some(hex))
        }
    }
}

/// One record as a JSON object (no newline), in the order and with the
/// fields docs/json-schema.md documents: a stable interface, so add fields,
/// never rename them. Written field by field (text/json.rs): this is the
/// line every event of a flood costs.
fn write_json(out: &mut Vec<u8>, record: &Record) {
    let a = &record.access;
    let seen = a.device_seen;
    let open = a.open.as_ref();
    let mut o = json::ObjectWriter::begin(out);
    o.str_with("time", |out| write_rfc3339_micros(out, record.time));
    o.str("kind", record.kind.name());
    if let RecordKind::Summary { cgroups } = record.kind {
        o.num("summary_cgroups", cgroups);
    }
    o.num("count", record.count);
    o.str_with("first_seen", |out| {
        write_rfc3339_micros(out, record.first_seen)
    });
    o.str_with("last_seen", |out| {
        write_rfc3339_micros(out, record.last_seen)
    });
    o.str("verdict", a.verdict.name());
    o.str("verdict_source", a.verdict.source());
    o.num("pid", a.pid);
    o.num("tid", a.tid);
    o.num("uid", a.uid);
    let (comm, comm_hex) = json_text(&a.comm);
    o.str("comm", &comm);
    if let Some(hex) = &comm_hex {
        o.str("comm_hex", hex);
    }
    o.num("cgroup_id", a.cgroup_id);
    let cgroup = record
        .cgroup
        .as_ref()
        .map(|p| json_text(p.as_os_str().as_encoded_bytes()).0);
    o.opt_str("cgroup", cgroup.as_deref());
    o.raw("container", record.container.json());
    o.opt_str("device", record.device.as_deref());
    o.opt_str("driver", record.driver.as_deref());
    o.opt_str("vendor", record.vendor.map(Vendor::name));
    o.opt_str("role", record.role.map(Role::name));
    // Only where the driver names them: most nodes are no GPU.
    if let Some(gpu) = record.gpu.as_deref() {
        o.raw("gpu", gpu.json());
    }
    if let Some(nic) = record.nic.as_deref() {
        o.raw("nic", nic.json());
    }
    if let Some(mig) = record.mig.as_deref() {
        o.raw("mig", mig.json());
    }
    if let Some(allocation) = record.allocation.as_deref() {
        o.raw("allocation", allocation.json());
    }
    o.opt_str("type", seen.then_some(a.type_letter()));
    o.opt_num("major", seen.then_some(a.major));
    o.opt_num("minor", seen.then_some(a.minor));
    o.opt_str("access", seen.then(|| a.access_letters()).as_deref());
    o.num("bpf_retval", a.bpf_retval);
    o.str("verdict_from", a.verdict_from.name());
    o.opt_str("syscall", open.map(|o| o.syscall));
    let (path, path_hex) = match open {
        Some(open) if !open.path_changed => {
            let (text, hex) = json_text(&open.path);
            (Some(text), hex)
        }
        _ => (None, None),
    };
    o.opt_str("path", path.as_deref());
    if open.is_some_and(|o| o.path_changed) {
        o.bool("path_changed", true);
    }
    if let Some(hex) = &path_hex {
        o.str("path_hex", hex);
    }
    o.bool("path_truncated", open.is_some_and(|o| o.path_truncated));
    o.opt_num("ret", open.and_then(|o| o.ret));
    match open.and_then(|o| o.errno()) {
        Some(errno) => o.str_with("errno", |out| {
            let _ = write!(out, "{}", ErrnoName(errno));
        }),
        None => o.opt_str("errno", None),
    }
    o.opt_raw("denied_by", record.denied_by.as_deref().map(|d| d.json()));
    let diagnosis = record.diagnosis.as_deref();
    o.opt_str("cause", diagnosis.map(|d| d.cause.id()));
    o.opt_raw("explanation", diagnosis.map(|d| &*d.json_explanation));
    o.opt_raw("hint", diagnosis.map(|d| &*d.json_hint));
    o.end();
}

#[cfg(test)]
mod tests {
    use std::{path::PathBuf, time::SystemTime};

    use super::*;
    use crate::model::{
        access::{DeviceAccess, OpenCall, Verdict, VerdictSource},
        rendered::Rendered,
    };

    fn record(comm: &[u8], path: &[u8]) -> Record {
        Record {
            access: DeviceAccess {
                boot_ns: 0,
                pid: 7,
                tid: 8,
                uid: 0,
                comm: comm.to_vec(),
                cgroup_id: 44,
                v1_devices_cgroup: None,
                sighted_programs: [0; gpu_trace_common::SIGHTED_PROGRAMS],
                device_seen: true,
                path_digest: None,
                block_device: false,
                major: 511,
                minor: 0,
                access: gpu_trace_common::ACCESS_READ | gpu_trace_common::ACCESS_WRITE,
                verdict: Verdict::DeniedByBpfPolicy,
                bpf_retval: -1,
                verdict_from: VerdictSource::BpfRetval,
                open: Some(OpenCall {
                    syscall: "openat",
                    path: path.to_vec(),
                    path_truncated: false,
                    path_changed: false,
                    ret: Some(-libc::EPERM),
                }),
            },
            time: SystemTime::UNIX_EPOCH,
            count: 1,
            first_seen: SystemTime::UNIX_EPOCH,
            last_seen: SystemTime::UNIX_EPOCH,
            cgroup: Some(PathBuf::from("/lxc/200")),
            container: std::rc::Rc::new(Rendered::new(crate::cgroup::identity::identify(
                "/lxc/200",
                &Default::default(),
            ))),
            driver: Some("nvidia-uvm".into()),
            device: Some("nvidia-uvm".into()),
            node: Some(crate::model::node::NvidiaNode::Uvm),
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

    fn json_of(record: &Record) -> (String, serde_json::Value) {
        let mut out = Vec::new();
        write_record(&mut out, Format::Json, false, record).expect("write");
        let text = String::from_utf8(out).expect("JSON output is UTF-8");
        let value = serde_json::from_str(text.trim_end()).expect("parses as JSON");
        (text, value)
    }

    #[test]
    fn json_has_the_documented_fields() {
        let (_, v) = json_of(&record(b"python3", b"/dev/nvidia-uvm"));
        assert_eq!(v["verdict"], "denied");
        assert_eq!(v["verdict_source"], "cgroup-bpf");
        assert_eq!(v["cgroup"], "/lxc/200");
        assert_eq!(v["device"], "nvidia-uvm");
        assert_eq!(v["type"], "c");
        assert_eq!(
            (v["major"].as_u64(), v["minor"].as_u64()),
            (Some(511), Some(0))
        );
        assert_eq!(v["access"], "rw");
        assert_eq!(v["errno"], "EPERM");
        assert_eq!(v["path"], "/dev/nvidia-uvm");
        assert_eq!(v["time"], "1970-01-01T00:00:00.000000Z");
        assert!(v.get("path_hex").is_none(), "no hex for clean UTF-8");
        assert_eq!(v["container"]["runtime"], "lxc");
        assert_eq!(v["container"]["id"], "200");
        assert_eq!(v["cause"], serde_json::Value::Null);
    }

    #[test]
    fn a_json_line_is_written_byte_for_byte_as_documented() {
        // The line serde's serializer wrote for this record before watch
        // wrote its lines field by field: order, escapes and all.
        use std::time::Duration;
        let at = |secs, nanos| SystemTime::UNIX_EPOCH + Duration::new(secs, nanos);
        let mut r = record(
            b"evil\nname\x80\x7f\xc2\x9b",
            b"/tmp/a\"b\nc\\d\xff\xfe\x1b[31m\xe2\x80\xae",
        );
        r.time = at(1_764_686_041, 210_256_999);
        r.first_seen = at(1_764_686_040, 5_000);
        r.last_seen = at(1_764_686_042, 999_999_999);
        r.count = 12_345_678_901;
        r.kind = RecordKind::Summary { cgroups: 7 };
        r.vendor = Some(Vendor::Nvidia);
        r.role = Some(Role::Uvm);
        r.cgroup = None;
        r.diagnosis = Some(std::rc::Rc::new(crate::model::diagnosis::Diagnosis::new(
            crate::model::diagnosis::Cause::DeviceDenied,
            "denied in \u{202e} x".into(),
            vec!["fix a".into(), "fix `b`".into()],
        )));
        let (line, _) = json_of(&r);
        let expected = r#"{"time":"2025-12-02T14:34:01.210256Z","kind":"summary","summary_cgroups":7,"count":12345678901,"first_seen":"2025-12-02T14:34:00.000005Z","last_seen":"2025-12-02T14:34:02.999999Z","verdict":"denied","verdict_source":"cgroup-bpf","pid":7,"tid":8,"uid":0,"comm":"evil\nname\\x80\u007f\u009b","comm_hex":"6576696c0a6e616d65807fc29b","cgroup_id":44,"cgroup":null,"container":{"runtime":"lxc","id":"200","name":null,"cgroup":"/lxc/200"},"device":"nvidia-uvm","driver":"nvidia-uvm","vendor":"nvidia","role":"uvm","type":"c","major":511,"minor":0,"access":"rw","bpf_retval":-1,"verdict_from":"bpf_get_retval","syscall":"openat","path":"/tmp/a\"b\nc\\d\\xff\\xfe\u001b[31m\u202e","path_hex":"2f746d702f6122620a635c64fffe1b5b33316de280ae","path_truncated":false,"ret":-1,"errno":"EPERM","denied_by":null,"cause":"device-denied","explanation":"denied in \u202e x","hint":"fix a; fix `b`"}"#;
        assert_eq!(line, format!("{expected}\n"));
    }

    #[test]
    fn hostile_bytes_never_break_a_json_line() {
        let path = b"/tmp/a\"b\nc\\d\xff\xfe\x1b[31m";
        let comm = b"evil\nname\x80";
        let (text, v) = json_of(&record(comm, path));
        assert_eq!(text.matches('\n').count(), 1, "exactly one line: {text:?}");
        assert_eq!(v["path"], "/tmp/a\"b\nc\\d\\xff\\xfe\u{1b}[31m");
        assert_eq!(
            v["path_hex"],
            path.iter().map(|b| format!("{b:02x}")).collect::<String>()
        );
        assert_eq!(v["comm"], "evil\nname\\x80");
        assert_eq!(v["comm_hex"], "6576696c0a6e616d6580");
    }

    #[test]
    fn a_gpu_node_says_which_gpu_and_a_mig_node_which_instance_of_it() {
        use crate::model::gpu::{GpuIdentity, MigCapability};
        let mut r = record(b"python3", b"/dev/nvidia-caps/nvidia-cap31");
        r.gpu = Some(std::rc::Rc::new(Rendered::new(GpuIdentity {
            uuid: "GPU-6f1b".into(),
            pci_bus_id: "0000:18:00.0".into(),
            minor: 3,
        })));
        assert!(human_line(&r).contains(" [GPU-6f1b 0000:18:00.0]  "));
        r.mig = Some(std::rc::Rc::new(Rendered::new(MigCapability {
            capability: "compute-instance",
            gpu: Some(3),
            gi: Some(1),
            ci: Some(0),
        })));
        let line = human_line(&r);
        assert!(
            line.contains(" [MIG compute-instance gpu 3 gi 1 ci 0 of GPU-6f1b 0000:18:00.0]  "),
            "{line}"
        );
        let (json, _) = json_of(&r);
        assert!(json.contains(r#""role":null,"gpu":{"uuid":"GPU-6f1b","pci_bus_id":"0000:18:00.0","minor":3},"mig":{"capability":"compute-instance","gpu":3,"gi":1,"ci":0},"type""#), "{json}");
    }

    #[test]
    fn an_rdma_node_says_which_nic() {
        use crate::model::nic::RdmaNic;
        let mut r = record(b"all_reduce_perf", b"/dev/infiniband/uverbs0");
        r.role = Some(Role::Rdma);
        r.nic = Some(std::rc::Rc::new(Rendered::new(RdmaNic {
            rdma_device: "rxe0".into(),
            netdev: Some("eth0".into()),
        })));
        let line = human_line(&r);
        assert!(line.contains(" [NIC rxe0 on eth0]  "), "{line}");
        let (json, _) = json_of(&r);
        assert!(
            json.contains(r#""role":"rdma","nic":{"rdma_device":"rxe0","netdev":"eth0"},"type""#),
            "{json}"
        );
    }

    #[test]
    fn human_line_escapes_control_and_invalid_bytes() {
        let mut out = Vec::new();
        write_human(&mut out, &record(b"a\nb", b"/x\ty\xff"), "", false).expect("write");
        let line = String::from_utf8(out).expect("UTF-8");
        let line = line.strip_suffix('\n').expect("one line");
        assert!(
            !line.contains('\n') && !line.contains('\t'),
            "no diagnosis, one line: {line}"
        );
        assert!(
            line.contains("a\\nb") && line.contains("/x\\ty\\xff"),
            "{line}"
        );
        assert!(
            line.contains("DENIED") && line.contains("nvidia-uvm c 511:0 rw"),
            "{line}"
        );
        assert!(
            line.contains("EPERM") && line.contains("cgroup /lxc/200"),
            "{line}"
        );
    }

    #[test]
    fn hostile_cgroup_names_never_reach_the_terminal_raw() {
        let cgroup = "/lxc/a\u{1b}]0;pwned\u{7}\u{202e}b\u{9b}c\u{7f}";
        let mut r = record("x\u{2066}".as_bytes(), b"/dev/nvidia-uvm\xc2\x9b");
        r.cgroup = Some(PathBuf::from(cgroup));
        r.container = std::rc::Rc::new(Rendered::new(crate::cgroup::identity::identify(
            cgroup,
            &Default::default(),
        )));
        r.diagnosis = Some(std::rc::Rc::new(crate::model::diagnosis::Diagnosis::new(
            crate::model::diagnosis::Cause::DeviceDenied,
            format!("denied in {cgroup}"),
            vec![format!("fix {cgroup}")],
        )));
        let mut out = Vec::new();
        write_record(&mut out, Format::Human, false, &r).expect("write");
        let text = String::from_utf8(out).expect("UTF-8");
        assert_eq!(text.lines().count(), 2, "event and fix: {text:?}");
        assert!(
            !text
                .replace('\n', "")
                .chars()
                .any(crate::text::terminal::needs_escape),
            "{text:?}"
        );
        assert!(text.contains("lxc a\\u{1b}]0;pwned"), "{text:?}");
        let (line, v) = json_of(&r);
        assert!(
            !line
                .trim_end()
                .chars()
                .any(|c| c.is_control() || c == '\u{202e}'),
            "{line:?}"
        );
        assert_eq!(v["cgroup"], cgroup, "JSON keeps the name exactly");
        assert_eq!(v["hint"], format!("fix {cgroup}"));
    }
}
