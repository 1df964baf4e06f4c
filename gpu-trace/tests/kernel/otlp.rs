//! `watch --otlp`: records reach a collector as OTLP log records (a
//! receiver in the test decodes the protocol's own messages), and none is
//! lost silently while the collector is down.

use opentelemetry_proto::tonic::{
    common::v1::any_value::Value as Any,
    logs::v1::{LogRecord, SeverityNumber},
};

use crate::{common::*, otlp_receiver::OtlpReceiver};

pub(crate) fn attribute<'a>(record: &'a LogRecord, key: &str) -> Option<&'a Any> {
    record
        .attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
}

/// The receiver's records once it holds at least `count`.
pub(crate) fn wait_for_records(receiver: &OtlpReceiver, count: usize) -> Vec<LogRecord> {
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
pub(crate) fn otlp_counts(stderr: &[String]) -> (u64, u64) {
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

/// The record of `pid`'s denial among `records`, checked field by field
/// against the JSON line watch wrote for it (`event`).
pub(crate) fn assert_is_the_record_of(
    records: &[LogRecord],
    pid: u32,
    event: &Value,
    incident: &Incident,
) {
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

    assert_is_the_record_of(&records, pid, &event, &incident);
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

/// watch's peak RSS over a stream of `denials` (one record each, at 4 000
/// per second) with `extra` arguments, how long it took to stop, its
/// closing lines and the JSON lines it wrote.
fn peak_over_a_stream(
    incident: &Incident,
    open_paced: &Path,
    denials: u64,
    extra: &[&str],
) -> (u64, Duration, Vec<String>, Vec<String>) {
    let watcher = incident.watch(&[&["--format", "json", "--fold", "0"][..], extra].concat());
    let mut stream = Command::new(open_paced);
    stream
        .arg(incident.nodes.path("nvidia-uvm"))
        .args([&denials.to_string(), "4000"]);
    let stream = start_in_cgroup(incident.cgroup.path(), stream);
    assert_eq!(printed_count(stream), denials);
    thread::sleep(Duration::from_millis(500)); // let watch drain
    let peak = crate::bounds::peak_rss_kib(watcher.child.id());
    let stopping = Instant::now();
    let (status, stderr, lines) = watcher.stop_with_lines();
    assert!(status.success(), "{stderr:#?}");
    (peak, stopping.elapsed(), stderr, lines)
}

#[test]
fn a_flood_towards_a_collector_that_is_down_holds_watchs_memory_to_the_queues_bound() {
    let (host, programs) = or_skip!(kernel_test_with_programs, &["open_paced"]);
    let incident = Incident::new(&host, "otlp-flood");
    let denials = 20_000;
    // Nothing listens there: every batch fails and is retried while the
    // stream goes on, so the queue fills to its bound and sheds the rest.
    let down = format!("http://{}", free_local_addr());
    let (without, _, _, _) = peak_over_a_stream(&incident, &programs[0], denials, &[]);
    let (with, stopped_in, stderr, lines) =
        peak_over_a_stream(&incident, &programs[0], denials, &["--otlp", &down]);
    let written = lines.len() as u64;
    let text_bytes: usize = lines.iter().map(String::len).sum();
    let (sent, dropped) = otlp_counts(&stderr);
    let bound_kib = (gpu_trace::stream::otlp::QUEUE_LIMIT_BYTES / 1024) as u64;
    eprintln!(
        "otlp flood: {written} records ({} KiB of JSON alone) towards a collector that is down; watch's peak RSS {with} KiB with --otlp, {without} KiB without",
        text_bytes / 1024
    );
    // The test could fail: the records' text alone is several times the bound.
    assert!(
        text_bytes as u64 / 1024 > 3 * bound_kib,
        "{written} records, {text_bytes} bytes: not enough to overflow the queue"
    );
    assert_eq!((sent, sent + dropped), (0, written), "{stderr:#?}");
    // The queue's bound, the batch in flight with its encoding, and the
    // allocator's slack: well under what an unbounded queue would hold.
    assert!(
        with.saturating_sub(without) < bound_kib * 2,
        "--otlp added {} KiB to watch's peak; the queue's bound is {bound_kib} KiB",
        with.saturating_sub(without)
    );
    // A full queue and a collector still down: watch gives what is left 5 s
    // to go out, then counts it as dropped; it does not wait out every
    // batch's retries.
    assert!(
        stopped_in < Duration::from_secs(10),
        "stopped in {stopped_in:?}"
    );
}

#[test]
fn a_collector_that_accepts_and_never_answers_does_not_hold_watchs_stop() {
    let incident = or_skip!(incident_test, "otlp-hang");
    // Connections accepted and held open, never read nor answered.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    thread::spawn(move || {
        let held: Vec<_> = listener.incoming().map_while(Result::ok).collect();
        drop(held);
    });
    let watcher = incident.watch(&["--format", "json", "--fold", "0", "--otlp", &url]);
    for _ in 0..3 {
        let pid = incident.deny_once();
        watcher.wait_for_events(pid, 1);
    }
    // The first batch is under way, its request hanging.
    thread::sleep(Duration::from_secs(1));
    let stopping = Instant::now();
    let (status, stderr, lines) = watcher.stop_with_lines();
    let stopped_in = stopping.elapsed();
    assert!(status.success(), "{stderr:#?}");
    let (sent, dropped) = otlp_counts(&stderr);
    assert_eq!((sent, dropped), (0, lines.len() as u64), "{stderr:#?}");
    // The request under way times out (5 s); nothing starts past the end's 5 s.
    assert!(
        stopped_in < Duration::from_secs(8),
        "stopped in {stopped_in:?}"
    );
}
