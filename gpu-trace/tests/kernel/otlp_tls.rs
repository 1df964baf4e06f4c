//! `watch --otlp https://...`: records reach a collector over TLS when its
//! CA is given with --otlp-ca; a collector whose certificate no trusted CA
//! signed gets nothing, and every record is counted as dropped.

use gpu_trace::stream::otlp::SYSTEM_ROOTS;
use opentelemetry_proto::tonic::{common::v1::any_value::Value as Any, logs::v1::SeverityNumber};

use crate::{
    common::*,
    otlp::{attribute, otlp_counts, wait_for_records},
    otlp_receiver::OtlpReceiver,
};

/// What watch says, once, when the TLS handshake fails.
const TLS_FAILURE: &str = "gpu-trace: cannot send to the OTLP collector";

#[test]
fn a_denial_reaches_a_collector_over_tls_with_its_ca_given() {
    let incident = or_skip!(incident_test, "otlp-tls");
    let addr = free_local_addr();
    let (receiver, ca) = OtlpReceiver::start_tls(&addr);
    let dir = tempfile::tempdir().expect("a scratch directory");
    let ca_file = dir.path().join("ca.pem");
    fs::write(&ca_file, ca).expect("write the CA");
    let url = format!("https://{addr}");
    let ca_arg = ca_file.to_str().expect("a UTF-8 path");
    let watcher = incident.watch(&["--format", "json", "--otlp", &url, "--otlp-ca", ca_arg]);
    let pid = incident.deny_once();
    let event = watcher.wait_for_events(pid, 1).remove(0);
    let records = wait_for_records(&receiver, 1);
    let (status, stderr) = watcher.stop();
    assert!(status.success(), "{stderr:#?}");
    assert!(
        !stderr.iter().any(|l| l.starts_with(TLS_FAILURE)),
        "{stderr:#?}"
    );

    let record = records
        .iter()
        .find(|r| attribute(r, "process.pid") == Some(&Any::IntValue(pid.into())))
        .unwrap_or_else(|| panic!("no record of pid {pid}: {records:#?}"));
    assert_eq!(record.severity_number, SeverityNumber::Warn as i32);
    assert_eq!(record.severity_text, "WARN");
    let Some(Any::StringValue(body)) = record.body.as_ref().and_then(|b| b.value.as_ref()) else {
        panic!("no body: {record:#?}");
    };
    assert!(body.contains("DENIED"), "{body}");
    assert!(record.time_unix_nano > 0);
    let text = |v: &Value| Any::StringValue(v.as_str().expect("text").to_string());
    assert_eq!(
        attribute(record, "process.command"),
        Some(&text(&event["comm"]))
    );
    assert_eq!(
        attribute(record, "gpu_trace.verdict"),
        Some(&Any::StringValue("denied".into()))
    );
    assert_eq!(
        attribute(record, "gpu_trace.major"),
        Some(&Any::IntValue(incident.uvm_major.into()))
    );
    assert_eq!(
        attribute(record, "gpu_trace.cause"),
        Some(&text(&event["cause"]))
    );
    assert_eq!(
        attribute(record, "container.id"),
        Some(&text(&event["container"]["id"]))
    );
    let (sent, dropped) = otlp_counts(&stderr);
    assert_eq!((sent, dropped), (records.len() as u64, 0), "{stderr:#?}");
}

#[test]
fn a_collector_whose_ca_is_not_trusted_gets_nothing_and_every_record_is_dropped() {
    let incident = or_skip!(incident_test, "otlp-tls-untrusted");
    let addr = free_local_addr();
    let (receiver, _ca) = OtlpReceiver::start_tls(&addr);
    let url = format!("https://{addr}");
    if !Path::new(SYSTEM_ROOTS).exists() {
        // No system roots to fall back on (the test VMs' busybox): watch
        // refuses to start, and says which file and flag.
        let out = Command::new(gpu_trace())
            .args(["watch", "--otlp", &url])
            .output()
            .expect("run gpu-trace watch");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(SYSTEM_ROOTS), "{stderr}");
        assert!(stderr.contains("--otlp-ca"), "{stderr}");
        return;
    }
    // The system's roots, which do not know the receiver's CA.
    let mut watcher = incident.watch(&["--format", "json", "--fold", "0", "--otlp", &url]);
    let pid = incident.deny_once();
    watcher.wait_for_events(pid, 1);
    watcher.wait_for_stderr(TLS_FAILURE);
    let (status, stderr, lines) = watcher.stop_with_lines();
    assert!(status.success(), "{stderr:#?}");

    let said: Vec<&String> = stderr
        .iter()
        .filter(|l| l.starts_with(TLS_FAILURE))
        .collect();
    assert_eq!(said.len(), 1, "said once, for every try: {stderr:#?}");
    assert!(said[0].contains("certificate"), "{}", said[0]);
    assert!(said[0].contains(SYSTEM_ROOTS), "{}", said[0]);
    assert!(receiver.records().is_empty());
    let written = lines.len() as u64;
    assert!(written >= 1);
    assert_eq!(otlp_counts(&stderr), (0, written), "{stderr:#?}");
}
