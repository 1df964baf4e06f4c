//! `watch --otlp`: records reach a collector as OTLP log records (a
//! receiver in the test decodes the protocol's own messages), and none is
//! lost silently while the collector is down.

use opentelemetry_proto::tonic::{
    common::v1::any_value::Value as Any,
    logs::v1::{LogRecord, SeverityNumber},
};

use crate::{common::*, otlp_receiver::OtlpReceiver};

fn attribute<'a>(record: &'a LogRecord, key: &str) -> Option<&'a Any> {
    record
        .attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

/// The receiver's records once it holds at least `count`.
fn wait_for_records(receiver: &OtlpReceiver, count: usize) -> Vec<LogRecord> {
    let deadline = Instant::now() + WAIT;
    loop {
        let records = receiver.records();
        if records.len() >= count {
            return records;
        }
        assert!(
            Instant::now() < deadline,
            "{} of {count} records arrived",
            records.len()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// "otlp sent N, otlp dropped M" from watch's closing line.
fn otlp_counts(stderr: &[String]) -> (u64, u64) {
    let line = stderr
        .iter()
        .find(|l| l.starts_with("gpu-trace: detached;"))
        .unwrap_or_else(|| panic!("no closing line: {stderr:#?}"));
    let number = |label: &str| -> u64 {
        let at = line
            .find(label)
            .unwrap_or_else(|| panic!("no {label:?} in {line}"));
        line[at + label.len()..]
            .split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{label:?} in {line}"))
    };
    (number("otlp sent "), number("otlp dropped "))
}

#[test]
fn a_denial_reaches_the_collector_as_a_warning_with_its_fields() {
    let incident = or_skip!(incident_test, "otlp");
    let addr = free_local_addr();
    let receiver = OtlpReceiver::start(&addr);
    let metrics = free_local_addr();
    let url = format!("http://{addr}");
    let watcher = incident.watch(&["--format", "json", "--otlp", &url, "--metrics", &metrics]);
    let pid = incident.deny_once();
    let event = watcher.wait_for_events(pid, 1).remove(0);
    let records = wait_for_records(&receiver, 1);
    // The metrics catch up within a tick.
    let sent = format!(
        "gpu_trace_otlp_records_total{{result=\"sent\"}} {}",
        records.len()
    );
    let deadline = Instant::now() + WAIT;
    while !scrape(&metrics).lines().any(|l| l == sent) {
        assert!(
            Instant::now() < deadline,
            "no {sent:?} in {}",
            scrape(&metrics)
        );
        thread::sleep(Duration::from_millis(100));
    }
    assert!(scrape(&metrics).contains("gpu_trace_otlp_records_total{result=\"dropped\"} 0"));
    let (status, stderr) = watcher.stop();
    assert!(status.success(), "{stderr:#?}");

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
        attribute(record, "gpu_trace.hint"),
        Some(&text(&event["hint"]))
    );
    assert_eq!(
        attribute(record, "container.id"),
        Some(&text(&event["container"]["id"]))
    );
    let (sent, dropped) = otlp_counts(&stderr);
    assert_eq!((sent, dropped), (records.len() as u64, 0), "{stderr:#?}");
}

#[test]
fn records_written_while_the_collector_is_down_arrive_or_are_counted_as_dropped() {
    let incident = or_skip!(incident_test, "otlp-gap");
    let addr = free_local_addr();
    let mut receiver = OtlpReceiver::start(&addr);
    // Every denial a record of its own.
    let args = ["--format", "json", "--fold", "0", "--otlp"];
    let url = format!("http://{addr}");
    let watcher = incident.watch(&[&args[..], &[url.as_str()]].concat());
    let first = incident.deny_once();
    watcher.wait_for_events(first, 1);
    wait_for_records(&receiver, 1);

    // Down for 10 s, with five denials in the gap.
    receiver.stop();
    for _ in 0..5 {
        let pid = incident.deny_once();
        watcher.wait_for_events(pid, 1);
    }
    thread::sleep(Duration::from_secs(10));
    receiver.serve();
    let last = incident.deny_once();
    watcher.wait_for_events(last, 1);
    let (status, stderr, lines) = watcher.stop_with_lines();
    assert!(status.success(), "{stderr:#?}");

    // Each JSON line watch wrote is a record sent or counted as dropped.
    let written = lines.len() as u64;
    let (sent, dropped) = otlp_counts(&stderr);
    let received = receiver.records().len() as u64;
    assert_eq!(sent, received, "every record counted as sent arrived");
    assert_eq!(
        sent + dropped,
        written,
        "sent {sent}, dropped {dropped} of {written}"
    );
    // The first went before the gap, the last after it.
    assert!(sent >= 2, "sent {sent}");
}
