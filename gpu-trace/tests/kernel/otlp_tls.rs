//! `watch --otlp https://...`: records reach a collector over TLS when its
//! CA is given with --otlp-ca; a collector whose certificate no trusted CA
//! signed gets nothing, and every record is counted as dropped.

use gpu_trace::stream::otlp::SYSTEM_ROOTS;

use crate::{
    common::*,
    otlp::{assert_is_the_record_of, otlp_counts, wait_for_records},
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

    assert_is_the_record_of(&records, pid, &event, &incident);
    let (sent, dropped) = otlp_counts(&stderr);
    assert_eq!((sent, dropped), (records.len() as u64, 0), "{stderr:#?}");
}

#[test]
fn a_collector_whose_ca_is_not_trusted_gets_nothing_and_every_record_is_dropped() {
    let incident = or_skip!(incident_test, "otlp-tls-untrusted");
    let addr = free_local_addr();
    let (receiver, _ca) = OtlpReceiver::start_tls(&addr);
    let url = format!("https://{addr}");
    let args = ["--format", "json", "--fold", "0", "--otlp", &url];
    let unrelated = tempfile::tempdir().expect("temp dir");
    let unrelated_ca = unrelated.path().join("unrelated-ca.pem");
    let trusted = if Path::new(SYSTEM_ROOTS).exists() {
        // The system's roots, which do not know the receiver's CA.
        SYSTEM_ROOTS.to_string()
    } else {
        // No system roots to fall back on (the test VMs' busybox): watch
        // refuses to start, and says which file and flag ...
        let out = Command::new(gpu_trace())
            .args(["watch", "--otlp", &url])
            .output()
            .expect("run gpu-trace watch");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(SYSTEM_ROOTS), "{stderr}");
        assert!(stderr.contains("--otlp-ca"), "{stderr}");
        // ... and the refusal is tested with a CA that signed nothing here.
        fs::write(&unrelated_ca, OtlpReceiver::unrelated_ca_pem()).expect("write the CA");
        unrelated_ca.display().to_string()
    };
    let mut watcher = if trusted == SYSTEM_ROOTS {
        incident.watch(&args)
    } else {
        incident.watch(&[&args[..], &["--otlp-ca", &trusted]].concat())
    };
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
    assert!(said[0].contains(&trusted), "{}", said[0]);
    assert!(receiver.records().is_empty());
    let written = lines.len() as u64;
    assert!(written >= 1);
    assert_eq!(otlp_counts(&stderr), (0, written), "{stderr:#?}");
}
