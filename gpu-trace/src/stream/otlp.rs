//! `watch --otlp ENDPOINT`: every record written is also sent to an
//! OpenTelemetry Collector as a log record (OTLP over HTTP/protobuf, POST
//! ENDPOINT/v1/logs, over TLS for an https:// ENDPOINT). The event thread
//! only renders the record's two lines and hands them over, never waiting:
//! a queue bounded in bytes sits between it and an exporter thread that
//! batches, sends, and retries with backoff. What the queue cannot take, or a batch the collector refused
//! for good, is counted as dropped: every record is sent or counted.

use std::{
    fmt,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicU64, AtomicUsize, Ordering},
        mpsc, Arc, OnceLock,
    },
    thread,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{bail, Context};
use opentelemetry_proto::tonic::{
    collector::logs::v1::{ExportLogsServiceRequest, ExportLogsServiceResponse},
    common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue},
    logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber},
    resource::v1::Resource,
};
use prost::Message;
use serde_json::Value;
use ureq::tls::{parse_pem, Certificate, PemItem, RootCerts, TlsConfig};

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
/// A collector's answer is read up to this much (it is a few bytes).
const ANSWER_LIMIT_BYTES: u64 = 64 << 10;
/// Each request gives up after this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// At the end, what is still queued gets this long to go out.
const FINISH_WITHIN: Duration = Duration::from_secs(5);
/// The roots an https:// collector's certificate is checked against when
/// --otlp-ca names none: Debian's bundle of the system's CAs.
pub const SYSTEM_ROOTS: &str = "/etc/ssl/certs/ca-certificates.crt";

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
    /// Set by `finish`: when what is still queued stops being tried.
    ending: OnceLock<Instant>,
}

pub struct OtlpExporter {
    queue: Option<mpsc::Sender<Queued>>,
    counts: Arc<OtlpCounts>,
    thread: Option<thread::JoinHandle<()>>,
}

/// Where to send, with which headers (a bearer token, a tenant id), and
/// for https:// which CAs to trust.
#[derive(Clone)]
pub struct OtlpTarget {
    pub url: String,
    pub headers: Vec<(String, String)>,
    /// None for http://.
    pub roots: Option<TrustedRoots>,
}

/// The headers' names only: their values are secrets.
impl fmt::Debug for OtlpTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<&str> = self.headers.iter().map(|(n, _)| n.as_str()).collect();
        f.debug_struct("OtlpTarget")
            .field("url", &self.url)
            .field("header_names", &names)
            .field("roots", &self.roots)
            .finish()
    }
}

/// The CA certificates a collector's certificate must chain to, read once
/// at start-up.
#[derive(Debug, Clone)]
pub struct TrustedRoots {
    file: PathBuf,
    /// Named by --otlp-ca, not the system's bundle.
    given: bool,
    certificates: RootCerts,
}

impl fmt::Display for TrustedRoots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.given {
            write!(f, "--otlp-ca {}", self.file.display())
        } else {
            write!(
                f,
                "the system's, {} (a private CA needs --otlp-ca FILE)",
                self.file.display()
            )
        }
    }
}

impl OtlpTarget {
    /// `endpoint` is the collector's base URL (`http://HOST:4318`,
    /// `https://HOST:4318`) or its full logs URL; `headers_file` holds
    /// `Name: value` lines; `ca_file` (https:// only) the CA certificates
    /// to trust instead of the system's.
    pub fn new(
        endpoint: &str,
        headers_file: Option<&Path>,
        ca_file: Option<&Path>,
    ) -> anyhow::Result<Self> {
        let (rest, https) = match (
            endpoint.strip_prefix("http://"),
            endpoint.strip_prefix("https://"),
        ) {
            (Some(rest), _) => (rest, false),
            (_, Some(rest)) => (rest, true),
            _ => bail!("--otlp takes an http:// or https:// URL ({endpoint:?})"),
        };
        if rest.is_empty() || rest.starts_with('/') {
            bail!("--otlp {endpoint:?} names no host");
        }
        let roots = match (https, ca_file) {
            (false, None) => None,
            (false, Some(file)) => bail!(
                "--otlp-ca {} is for an https:// collector, and --otlp {endpoint:?} is plain http://",
                file.display()
            ),
            (true, Some(file)) => Some(TrustedRoots::read(file, true)?),
            (true, None) => Some(TrustedRoots::read(Path::new(SYSTEM_ROOTS), false).with_context(
                || format!("--otlp {endpoint:?} needs the system's CA certificates, or --otlp-ca FILE"),
            )?),
        };
        let url = if endpoint.ends_with("/v1/logs") {
            endpoint.to_string()
        } else {
            format!("{}/v1/logs", endpoint.trim_end_matches('/'))
        };
        let headers = match headers_file {
            Some(file) => read_headers(file)?,
            None => Vec::new(),
        };
        Ok(Self {
            url,
            headers,
            roots,
        })
    }
}

impl TrustedRoots {
    /// Every certificate in the PEM `file`, each checked to be one a TLS
    /// handshake can use: a bad one is said now, not as a refused
    /// collector later.
    fn read(file: &Path, given: bool) -> anyhow::Result<Self> {
        let name = if given {
            format!("--otlp-ca {}", file.display())
        } else {
            file.display().to_string()
        };
        let pem = std::fs::read(file).with_context(|| format!("reading {name}"))?;
        let mut certificates: Vec<Certificate<'static>> = Vec::new();
        for item in parse_pem(&pem) {
            match item {
                Ok(PemItem::Certificate(certificate)) => certificates.push(certificate),
                Ok(PemItem::PrivateKey(_)) => {
                    bail!("{name} holds a private key: only CA certificates belong there")
                }
                Ok(_) => {}
                Err(e) => bail!("{name} is not valid PEM: {}", pem_error(&e)),
            }
        }
        if certificates.is_empty() {
            bail!("{name} holds no certificate (-----BEGIN CERTIFICATE-----)");
        }
        let mut store = rustls::RootCertStore::empty();
        for (index, certificate) in certificates.iter().enumerate() {
            if store.add(certificate.der().into()).is_err() {
                bail!(
                    "{name}: certificate {} of {} is not a well-formed X.509 certificate",
                    index + 1,
                    certificates.len()
                );
            }
        }
        Ok(Self {
            file: file.to_path_buf(),
            given,
            certificates: RootCerts::new_with_certs(&certificates),
        })
    }
}

/// What is wrong with a PEM file, in words (the parser's own messages
/// show the offending line as a list of bytes).
fn pem_error(error: &ureq::Error) -> String {
    use rustls::pki_types::pem::Error as Pem;
    match error {
        ureq::Error::Pem(Pem::MissingSectionEnd { .. }) => {
            "a -----BEGIN----- line has no -----END----- line".into()
        }
        ureq::Error::Pem(Pem::IllegalSectionStart { .. }) => {
            "a -----BEGIN----- line is malformed".into()
        }
        ureq::Error::Pem(Pem::Base64Decode(_)) => "a section is not base64".into(),
        other => other.to_string(),
    }
}

/// `Name: value` lines; blank lines and `#` comments are skipped.
fn read_headers(file: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(file)
        .with_context(|| format!("reading --otlp-headers {}", file.display()))?;
    let mut headers = Vec::new();
    // Errors name the line by number only: it may hold a secret.
    for (number, line) in text.lines().map(str::trim).enumerate() {
        let number = number + 1;
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            bail!("{} line {number} is not `Name: value`", file.display());
        };
        let name = name.trim();
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_".contains(&b));
        if !valid || value.bytes().any(|b| b.is_ascii_control()) {
            bail!(
                "{} line {number} is not a header name and value",
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
        // A full queue: dropped before the cost of rendering it.
        if self.counts.queued_bytes.load(Ordering::Acquire) >= QUEUE_LIMIT_BYTES {
            self.counts.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
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
        // Said before the queue closes: the exporter may be in a batch's
        // backoff with the queue still full, and must not wait out every
        // batch's retries before it sees the end.
        let _ = self.counts.ending.set(Instant::now() + FINISH_WITHIN);
        self.queue = None;
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
        (
            self.counts.sent.load(Ordering::Relaxed),
            self.counts.dropped.load(Ordering::Relaxed),
        )
    }
}

/// The exporter thread: batches, requests, retries; ends when the queue's
/// sender is gone and the queue is empty, or at the end's deadline.
fn export(target: &OtlpTarget, queued: &mpsc::Receiver<Queued>, counts: &OtlpCounts) {
    // No redirect (it would turn the POST into a GET that could count as
    // sent, and carry the headers elsewhere), no proxy from the environment
    // (the headers are secrets): the collector named, or nothing.
    let mut config = ureq::Agent::config_builder()
        .timeout_global(Some(REQUEST_TIMEOUT))
        .http_status_as_error(false)
        .max_redirects(0)
        .proxy(None)
        .https_only(target.roots.is_some());
    if let Some(roots) = &target.roots {
        config = config.tls_config(
            TlsConfig::builder()
                .root_certs(roots.certificates.clone())
                .build(),
        );
    }
    let agent: ureq::Agent = config.build().into();
    let resource = resource();
    let mut tls_failure_said = false;
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
                    counts.ending.get_or_init(|| Instant::now() + FINISH_WITHIN);
                    break;
                }
            }
        }
        let bytes: usize = batch.iter().map(Queued::bytes).sum();
        counts.queued_bytes.fetch_sub(bytes, Ordering::AcqRel);
        let records = batch.len() as u64;
        let body = request(&resource, batch).encode_to_vec();
        match send_with_retries(&agent, target, &body, &counts.ending, &mut tls_failure_said) {
            Some(rejected) => {
                // A partial success: the records it refused are dropped.
                let rejected = rejected.min(records);
                counts.sent.fetch_add(records - rejected, Ordering::Relaxed);
                counts.dropped.fetch_add(rejected, Ordering::Relaxed);
            }
            None => {
                counts.dropped.fetch_add(records, Ordering::Relaxed);
            }
        }
        if counts
            .ending
            .get()
            .is_some_and(|end| Instant::now() >= *end)
        {
            // Out of time at the end: what is left is dropped, and said.
            let left = queued.try_iter().count() as u64;
            counts.dropped.fetch_add(left, Ordering::Relaxed);
            return;
        }
    }
}

/// POSTs `body`, retrying a failed try (no answer, 429, 5xx) with backoff;
/// once the collector took it, how many records it said it rejected. Once `ending` is set, no try starts past
/// it, and a backoff under way is cut short by `finish`'s unpark.
/// A failed TLS handshake is said on stderr, the first one only: unlike a
/// collector that is down, it rarely mends by itself.
fn send_with_retries(
    agent: &ureq::Agent,
    target: &OtlpTarget,
    body: &[u8],
    ending: &OnceLock<Instant>,
    tls_failure_said: &mut bool,
) -> Option<u64> {
    let mut backoff = FIRST_BACKOFF;
    for attempt in 1..=TRIES {
        // At the end, a try gets what is left of the time, no more.
        let timeout = match ending.get() {
            Some(end) => match end.checked_duration_since(Instant::now()) {
                Some(left) if !left.is_zero() => left.min(REQUEST_TIMEOUT),
                _ => return None,
            },
            None => REQUEST_TIMEOUT,
        };
        let mut post = agent
            .post(&target.url)
            .config()
            .timeout_global(Some(timeout))
            .build()
            .header("Content-Type", "application/x-protobuf");
        for (name, value) in &target.headers {
            post = post.header(name, value);
        }
        let retry = match post.send(body) {
            Ok(mut response) if response.status().is_success() => {
                let answer = response
                    .body_mut()
                    .with_config()
                    .limit(ANSWER_LIMIT_BYTES)
                    .read_to_vec();
                return Some(answer.map_or(0, |body| rejected_in(&body)));
            }
            Ok(response) => {
                let status = response.status().as_u16();
                status == 429 || status >= 500
            }
            Err(error) => {
                if !*tls_failure_said {
                    *tls_failure_said = say_tls_failure(target, &error);
                }
                true
            }
        };
        let out_of_time = |wait| {
            ending
                .get()
                .is_some_and(|end| Instant::now() + wait >= *end)
        };
        if !retry || attempt == TRIES || out_of_time(backoff) {
            return None;
        }
        // A backoff begun before the end was set may run past it: the
        // end's unpark cuts it short, and the next try sees the deadline.
        let wake = Instant::now() + backoff;
        let cut_short_by_the_end = ending.get().is_none();
        while Instant::now() < wake && !(cut_short_by_the_end && ending.get().is_some()) {
            thread::park_timeout(wake.saturating_duration_since(Instant::now()));
        }
        if out_of_time(Duration::ZERO) {
            return None;
        }
        backoff *= 2;
    }
    None
}

/// The records a collector's answer says it rejected (OTLP's partial
/// success); 0 for an empty or unreadable answer.
fn rejected_in(answer: &[u8]) -> u64 {
    ExportLogsServiceResponse::decode(answer)
        .ok()
        .and_then(|r| r.partial_success)
        .map_or(0, |p| p.rejected_log_records.max(0) as u64)
}

/// Says on stderr why a request failed if TLS is why; whether it did.
fn say_tls_failure(target: &OtlpTarget, error: &ureq::Error) -> bool {
    let Some(failure) = tls_failure(error) else {
        return false;
    };
    let trusted = target
        .roots
        .as_ref()
        .map_or_else(String::new, |roots| format!("; trusted CAs: {roots}"));
    eprintln!(
        "gpu-trace: cannot send to the OTLP collector {}: TLS: {failure}{trusted}; records not sent are counted as dropped",
        target.url
    );
    true
}

/// The TLS error within a failed request, if that is why it failed: rustls
/// reports a refused certificate inside an I/O error.
fn tls_failure(error: &ureq::Error) -> Option<String> {
    match error {
        ureq::Error::Io(io) => io
            .get_ref()?
            .downcast_ref::<rustls::Error>()
            .map(ToString::to_string),
        ureq::Error::Rustls(tls) => Some(tls.to_string()),
        ureq::Error::Tls(tls) => Some(tls.to_string()),
        _ => None,
    }
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

    #[test]
    fn a_partial_success_says_how_many_were_rejected() {
        use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsPartialSuccess;
        let answer = |rejected| {
            ExportLogsServiceResponse {
                partial_success: Some(ExportLogsPartialSuccess {
                    rejected_log_records: rejected,
                    error_message: "too old".into(),
                }),
            }
            .encode_to_vec()
        };
        assert_eq!(rejected_in(&answer(3)), 3);
        assert_eq!(rejected_in(&answer(-1)), 0);
        assert_eq!(rejected_in(b""), 0, "an empty answer: every record taken");
        assert_eq!(rejected_in(b"{\"partialSuccess\":{}}"), 0, "not protobuf");
    }

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
        let t = OtlpTarget::new("http://collector:4318/", None, None).unwrap();
        assert_eq!(t.url, "http://collector:4318/v1/logs");
        assert!(t.roots.is_none());
        let t = OtlpTarget::new("http://collector:4318/v1/logs", None, None).unwrap();
        assert_eq!(t.url, "http://collector:4318/v1/logs");
        assert!(OtlpTarget::new("ftp://collector:4318", None, None).is_err());
        assert!(OtlpTarget::new("http://", None, None).is_err());
        assert!(OtlpTarget::new("https://", None, None).is_err());
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("headers");
        std::fs::write(
            &file,
            "# token\nAuthorization: Bearer abc\n\nX-Scope-OrgID: gpu\n",
        )
        .unwrap();
        let t = OtlpTarget::new("http://c:4318", Some(&file), None).unwrap();
        assert_eq!(
            t.headers,
            [
                ("Authorization".to_string(), "Bearer abc".to_string()),
                ("X-Scope-OrgID".to_string(), "gpu".to_string())
            ]
        );
        std::fs::write(&file, "Bad Name: x\n").unwrap();
        assert!(OtlpTarget::new("http://c:4318", Some(&file), None).is_err());
    }

    /// A CA certificate in PEM, made for the test.
    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn an_https_endpoint_trusts_otlp_ca_or_else_the_systems_roots() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, ca_pem() + &ca_pem()).unwrap();
        let t = OtlpTarget::new("https://collector:4318", None, Some(&ca)).unwrap();
        assert_eq!(t.url, "https://collector:4318/v1/logs");
        let roots = t.roots.unwrap();
        assert_eq!((roots.file, roots.given), (ca.clone(), true));
        let RootCerts::Specific(certificates) = roots.certificates else {
            panic!("not the file's certificates");
        };
        assert_eq!(certificates.len(), 2);

        // Without --otlp-ca: the system's bundle, or an error naming it.
        match OtlpTarget::new("https://collector:4318", None, None) {
            Ok(t) => {
                let roots = t.roots.unwrap();
                assert_eq!(
                    (roots.file.to_str(), roots.given),
                    (Some(SYSTEM_ROOTS), false)
                );
            }
            Err(e) => {
                assert!(!Path::new(SYSTEM_ROOTS).exists(), "{e:#}");
                assert!(format!("{e:#}").contains(SYSTEM_ROOTS), "{e:#}");
            }
        }
    }

    #[test]
    fn otlp_ca_is_refused_for_plain_http() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, ca_pem()).unwrap();
        let e = OtlpTarget::new("http://collector:4318", None, Some(&ca)).unwrap_err();
        assert!(format!("{e:#}").contains("https://"), "{e:#}");
    }

    #[test]
    fn a_bad_ca_file_is_refused_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("private-ca.pem");
        let refused = |why: &str| {
            let e = OtlpTarget::new("https://collector:4318", None, Some(&ca)).unwrap_err();
            let said = format!("{e:#}");
            assert!(said.contains(&ca.display().to_string()), "{said}");
            assert!(said.contains(why), "{said}");
        };
        refused("No such file");
        std::fs::write(&ca, "not a certificate\n").unwrap();
        refused("holds no certificate");
        let pem = ca_pem();
        std::fs::write(&ca, &pem[..pem.len() / 2]).unwrap();
        refused("has no -----END----- line");
        std::fs::write(
            &ca,
            "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        refused("certificate 1 of 1 is not a well-formed X.509 certificate");
        let key = rcgen::KeyPair::generate().unwrap().serialize_pem();
        std::fs::write(&ca, pem + &key).unwrap();
        refused("holds a private key");
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
