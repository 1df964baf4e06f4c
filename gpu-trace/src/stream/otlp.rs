//! `watch --otlp ENDPOINT`: every record written is also sent to an
//! OpenTelemetry Collector as a log record (OTLP over HTTP/protobuf, POST
//! ENDPOINT/v1/logs). The event thread only renders the record's two
//! lines and hands them over, never waiting: a queue bounded in bytes sits
//! between it and an exporter thread that batches, sends, and retries with
//! backoff. What the queue cannot take, or a batch the collector refused
//! for good, is counted as dropped: every record is sent or counted.

use std::{
    path::Path,
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        mpsc, Arc,
    },
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{bail, Context};
use opentelemetry_proto::tonic::{
    collector::logs::v1::ExportLogsServiceRequest,
    common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue},
    logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber},
    resource::v1::Resource,
};
use prost::Message;
use serde_json::Value;

use crate::{
    model::record::Record,
    render::output::{write_record, Format},
};

/// The queue between the event thread and the exporter, in bytes of the
/// records' text: a collector down for minutes costs this much, no more.
pub const QUEUE_LIMIT_BYTES: usize = 8 << 20;
/// Records per request, and how long a first record waits for others.
const BATCH_RECORDS: usize = 512;
const BATCH_WAIT: Duration = Duration::from_millis(500);
/// Tries per batch, the waits between them doubling from the first.
const TRIES: u32 = 5;
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
/// Each request gives up after this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// At the end, what is still queued gets this long to go out.
const FINISH_WITHIN: Duration = Duration::from_secs(5);

/// One record as the event thread hands it over.
struct Queued {
    time_ns: u64,
    severity: SeverityNumber,
    /// The human line (body) and the JSON line (attributes).
    human: String,
    json: String,
}

impl Queued {
    fn bytes(&self) -> usize {
        self.human.len() + self.json.len() + 64
    }
}

/// Counts shared by the event thread, the exporter and the closing line.
#[derive(Default)]
pub struct OtlpCounts {
    pub sent: AtomicU64,
    pub dropped: AtomicU64,
    queued_bytes: AtomicUsize,
}

pub struct OtlpExporter {
    queue: Option<mpsc::Sender<Queued>>,
    counts: Arc<OtlpCounts>,
    thread: Option<thread::JoinHandle<()>>,
}

/// Where to send, and with which headers (a bearer token, a tenant id).
#[derive(Debug, Clone)]
pub struct OtlpTarget {
    pub url: String,
    pub headers: Vec<(String, String)>,
}

impl OtlpTarget {
    /// `endpoint` is the collector's base URL (`http://HOST:4318`) or its
    /// full logs URL; `headers_file` holds `Name: value` lines.
    pub fn new(endpoint: &str, headers_file: Option<&Path>) -> anyhow::Result<Self> {
        let Some(rest) = endpoint.strip_prefix("http://") else {
            bail!("--otlp takes an http:// URL ({endpoint:?}); for a collector outside the node, send to a node-local collector that forwards over TLS");
        };
        if rest.is_empty() || rest.starts_with('/') {
            bail!("--otlp {endpoint:?} names no host");
        }
        let url = if endpoint.ends_with("/v1/logs") {
            endpoint.to_string()
        } else {
            format!("{}/v1/logs", endpoint.trim_end_matches('/'))
        };
        let headers = match headers_file {
            Some(file) => read_headers(file)?,
            None => Vec::new(),
        };
        Ok(Self { url, headers })
    }
}

/// `Name: value` lines; blank lines and `#` comments are skipped.
fn read_headers(file: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading --otlp-headers {}", file.display()))?;
    let mut headers = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            bail!("{}: {line:?} is not `Name: value`", file.display());
        };
        let name = name.trim();
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
        if !valid || value.bytes().any(|b| b.is_ascii_control()) {
            bail!(
                "{}: {name:?} is not a header name and value",
                file.display()
            );
        }
        headers.push((name.to_string(), value.trim().to_string()));
    }
    Ok(headers)
}

impl OtlpExporter {
    pub fn start(target: OtlpTarget) -> anyhow::Result<Self> {
        let counts = Arc::new(OtlpCounts::default());
        let (queue, queued) = mpsc::channel();
        let shared = Arc::clone(&counts);
        let thread = thread::Builder::new()
            .name("otlp".into())
            .spawn(move || export(&target, &queued, &shared))
            .context("starting the OTLP exporter")?;
        Ok(Self {
            queue: Some(queue),
            counts,
            thread: Some(thread),
        })
    }

    pub fn counts(&self) -> &OtlpCounts {
        &self.counts
    }

    /// Hands a written record over; never waits. Past the queue's bound it
    /// is counted as dropped.
    pub fn send(&self, record: &Record) {
        let mut human = Vec::new();
        let mut json = Vec::new();
        let _ = write_record(&mut human, Format::Human, false, record);
        let _ = write_record(&mut json, Format::Json, false, record);
        let queued = Queued {
            time_ns: record
                .time
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            severity: if record.access.verdict.is_problem() || record.diagnosis.is_some() {
                SeverityNumber::Warn
            } else {
                SeverityNumber::Info
            },
            human: String::from_utf8_lossy(human.trim_ascii_end()).into_owned(),
            json: String::from_utf8_lossy(json.trim_ascii_end()).into_owned(),
        };
        let bytes = queued.bytes();
        let held = self.counts.queued_bytes.fetch_add(bytes, Ordering::AcqRel);
        let taken = held + bytes <= QUEUE_LIMIT_BYTES
            && self.queue.as_ref().is_some_and(|q| q.send(queued).is_ok());
        if !taken {
            self.counts.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Lets what is queued go out (for at most FINISH_WITHIN; the rest
    /// counted as dropped); returns the counts.
    pub fn finish(mut self) -> (u64, u64) {
        self.queue = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        (
            self.counts.sent.load(Ordering::Relaxed),
            self.counts.dropped.load(Ordering::Relaxed),
        )
    }
}

/// The exporter thread: batches, requests, retries; ends when the queue's
/// sender is gone and the queue is empty, or FINISH_WITHIN after that.
fn export(target: &OtlpTarget, queued: &mpsc::Receiver<Queued>, counts: &OtlpCounts) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(REQUEST_TIMEOUT))
        .http_status_as_error(false)
        .build()
        .into();
    let resource = resource();
    let mut ending: Option<Instant> = None;
    loop {
        let mut batch = Vec::new();
        match queued.recv_timeout(BATCH_WAIT) {
            Ok(first) => batch.push(first),
            Err(mpsc::RecvTimeoutError::Timeout) => continue,
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        let deadline = Instant::now() + BATCH_WAIT;
        while batch.len() < BATCH_RECORDS {
            match queued.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(next) => batch.push(next),
                Err(mpsc::RecvTimeoutError::Timeout) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    ending.get_or_insert_with(|| Instant::now() + FINISH_WITHIN);
                    break;
                }
            }
        }
        let bytes: usize = batch.iter().map(Queued::bytes).sum();
        counts.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
        let records = batch.len() as u64;
        let body = request(&resource, batch).encode_to_vec();
        let sent = send_with_retries(&agent, target, &body, ending);
        let counter = if sent { &counts.sent } else { &counts.dropped };
        counter.fetch_add(records, Ordering::Relaxed);
        if ending.is_some_and(|end| Instant::now() >= end) {
            // Out of time at the end: what is left is dropped, and said.
            let left = queued.try_iter().count() as u64;
            counts.dropped.fetch_add(left, Ordering::Relaxed);
            return;
        }
    }
}

/// POSTs `body`, retrying a failed try (no answer, 429, 5xx) with backoff;
/// whether the collector took it. At the end, no try starts past `ending`.
fn send_with_retries(
    agent: &ureq::Agent,
    target: &OtlpTarget,
    body: &[u8],
    ending: Option<Instant>,
) -> bool {
    let mut backoff = FIRST_BACKOFF;
    for attempt in 1..=TRIES {
        let mut post = agent
            .post(&target.url)
            .header("Content-Type", "application/x-protobuf");
        for (name, value) in &target.headers {
            post = post.header(name, value);
        }
        let retry = match post.send(body) {
            Ok(response) if response.status().is_success() => return true,
            Ok(response) => {
                let status = response.status().as_u16();
                status == 429 || status >= 500
            }
            Err(_) => true,
        };
        let out_of_time = ending.is_some_and(|end| Instant::now() + backoff >= end);
        if !retry || attempt == TRIES || out_of_time {
            return false;
        }
        thread::sleep(backoff);
        backoff *= 2;
    }
    false
}

/// Who sends: this host, gpu-trace. In a pod, the node's name comes from
/// NODE_NAME (the DaemonSet sets it from spec.nodeName): the pod's own
/// hostname is its name.
fn resource() -> Resource {
    let host = std::env::var("NODE_NAME").ok().unwrap_or_else(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_default()
    });
    Resource {
        attributes: vec![text("service.name", "gpu-trace"), text("host.name", &host)],
        ..Default::default()
    }
}

/// The batch as one request: records grouped by pod, each pod's under a
/// resource naming it (`k8s.pod.uid`), so that a Collector's
/// k8sattributes processor finds the pod; the rest under the host's alone.
fn request(resource: &Resource, batch: Vec<Queued>) -> ExportLogsServiceRequest {
    let observed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut by_pod: Vec<(Option<String>, Vec<LogRecord>)> = Vec::new();
    for q in batch {
        let attributes = attributes(&q.json);
        let pod = attributes
            .iter()
            .find(|kv| kv.key == "k8s.pod.uid")
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                any_value::Value::StringValue(uid) => Some(uid.clone()),
                _ => None,
            });
        let record = LogRecord {
            time_unix_nano: q.time_ns,
            observed_time_unix_nano: observed,
            severity_number: q.severity as i32,
            severity_text: q
                .severity
                .as_str_name()
                .trim_start_matches("SEVERITY_NUMBER_")
                .into(),
            body: Some(AnyValue {
                value: Some(any_value::Value::StringValue(q.human)),
            }),
            attributes,
            ..Default::default()
        };
        match by_pod.iter_mut().find(|(p, _)| *p == pod) {
            Some((_, records)) => records.push(record),
            None => by_pod.push((pod, vec![record])),
        }
    }
    let resource_logs = by_pod
        .into_iter()
        .map(|(pod, log_records)| {
            let mut resource = resource.clone();
            resource
                .attributes
                .extend(pod.map(|uid| text("k8s.pod.uid", &uid)));
            ResourceLogs {
                resource: Some(resource),
                scope_logs: vec![ScopeLogs {
                    scope: Some(InstrumentationScope {
                        name: "gpu-trace".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..Default::default()
                    }),
                    log_records,
                    ..Default::default()
                }],
                ..Default::default()
            }
        })
        .collect();
    ExportLogsServiceRequest { resource_logs }
}

/// The JSON line's fields as attributes: OpenTelemetry's semantic
/// conventions where one exists, `gpu_trace.FIELD` (nested objects by
/// dotted path) for the rest.
fn attributes(json: &str) -> Vec<KeyValue> {
    let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(json) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (key, value) in &fields {
        flatten(&format!("gpu_trace.{key}"), value, &mut out);
    }
    let container = &fields.get("container").cloned().unwrap_or(Value::Null);
    let conventions = [
        ("k8s.namespace.name", &container["namespace"]),
        ("k8s.pod.name", &container["pod"]),
        ("k8s.pod.uid", &container["pod_uid"]),
        ("container.id", &container["id"]),
        (
            "process.pid",
            &fields.get("pid").cloned().unwrap_or(Value::Null),
        ),
        (
            "process.command",
            &fields.get("comm").cloned().unwrap_or(Value::Null),
        ),
    ];
    for (key, value) in conventions {
        if !value.is_null() {
            flatten(key, value, &mut out);
        }
    }
    // A Kubernetes container's name is the container's, elsewhere a runtime's label.
    if !container["pod"].is_null() {
        flatten("k8s.container.name", &container["name"], &mut out);
    }
    out
}

fn flatten(key: &str, value: &Value, out: &mut Vec<KeyValue>) {
    let value = match value {
        Value::Null => return,
        Value::Bool(b) => any_value::Value::BoolValue(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => any_value::Value::IntValue(i),
            None => any_value::Value::DoubleValue(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => any_value::Value::StringValue(s.clone()),
        Value::Array(items) => {
            for (index, item) in items.iter().enumerate() {
                flatten(&format!("{key}.{index}"), item, out);
            }
            return;
        }
        Value::Object(fields) => {
            for (name, item) in fields {
                flatten(&format!("{key}.{name}"), item, out);
            }
            return;
        }
    };
    out.push(KeyValue {
        key: key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
    });
}

fn text(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attribute<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
        attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.as_ref()?.value.as_ref())
    }

    #[test]
    fn a_pods_fields_take_the_semantic_conventions_and_the_rest_gpu_trace_names() {
        let json = r#"{"pid": 4242, "comm": "python3", "major": 195, "cause": "not-allocated",
            "container": {"runtime": "containerd", "id": "3f2a", "name": "cuda",
                          "namespace": "ml", "pod": "trainer-0", "pod_uid": "0b1c"},
            "allocation": {"allocated": false, "container_gpus": ["GPU-a"]}}"#;
        let a = attributes(json);
        let text = |v: &str| any_value::Value::StringValue(v.into());
        assert_eq!(attribute(&a, "k8s.namespace.name"), Some(&text("ml")));
        assert_eq!(attribute(&a, "k8s.pod.name"), Some(&text("trainer-0")));
        assert_eq!(attribute(&a, "k8s.pod.uid"), Some(&text("0b1c")));
        assert_eq!(attribute(&a, "k8s.container.name"), Some(&text("cuda")));
        assert_eq!(attribute(&a, "container.id"), Some(&text("3f2a")));
        assert_eq!(
            attribute(&a, "process.pid"),
            Some(&any_value::Value::IntValue(4242))
        );
        assert_eq!(attribute(&a, "process.command"), Some(&text("python3")));
        assert_eq!(
            attribute(&a, "gpu_trace.cause"),
            Some(&text("not-allocated"))
        );
        assert_eq!(
            attribute(&a, "gpu_trace.allocation.allocated"),
            Some(&any_value::Value::BoolValue(false))
        );
        assert_eq!(
            attribute(&a, "gpu_trace.allocation.container_gpus.0"),
            Some(&text("GPU-a"))
        );
    }

    #[test]
    fn an_endpoint_gets_the_logs_path_and_headers_are_checked() {
        let t = OtlpTarget::new("http://collector:4318/", None).unwrap();
        assert_eq!(t.url, "http://collector:4318/v1/logs");
        let t = OtlpTarget::new("http://collector:4318/v1/logs", None).unwrap();
        assert_eq!(t.url, "http://collector:4318/v1/logs");
        assert!(OtlpTarget::new("https://collector:4318", None).is_err());
        assert!(OtlpTarget::new("http://", None).is_err());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("headers");
        std::fs::write(
            &file,
            "# token\nAuthorization: Bearer abc\n\nX-Scope-OrgID: gpu\n",
        )
        .unwrap();
        let t = OtlpTarget::new("http://c:4318", Some(&file)).unwrap();
        assert_eq!(
            t.headers,
            [
                ("Authorization".to_string(), "Bearer abc".to_string()),
                ("X-Scope-OrgID".to_string(), "gpu".to_string())
            ]
        );
        std::fs::write(&file, "Bad Name: x\n").unwrap();
        assert!(OtlpTarget::new("http://c:4318", Some(&file)).is_err());
    }

    #[test]
    fn a_pods_records_come_under_a_resource_that_names_the_pod() {
        let queued = |json: &str| Queued {
            time_ns: 1,
            severity: SeverityNumber::Warn,
            human: "DENIED".into(),
            json: json.into(),
        };
        let host = Resource {
            attributes: vec![text("host.name", "gpu1")],
            ..Default::default()
        };
        let request = request(
            &host,
            vec![
                queued(r#"{"pid": 1, "container": {"id": "a", "pod": "p", "pod_uid": "u1"}}"#),
                queued(r#"{"pid": 2, "container": {"id": "/lxc/200"}}"#),
                queued(r#"{"pid": 3, "container": {"id": "b", "pod": "p", "pod_uid": "u1"}}"#),
            ],
        );
        let groups: Vec<(Vec<String>, usize)> = request
            .resource_logs
            .iter()
            .map(|r| {
                let keys = r.resource.as_ref().unwrap().attributes.iter();
                (
                    keys.map(|kv| kv.key.clone()).collect(),
                    r.scope_logs[0].log_records.len(),
                )
            })
            .collect();
        assert_eq!(
            groups,
            [
                (vec!["host.name".to_string(), "k8s.pod.uid".to_string()], 2),
                (vec!["host.name".to_string()], 1),
            ]
        );
    }
}
