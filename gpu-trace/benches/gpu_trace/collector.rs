//! The bench's OpenTelemetry Collector: an OTLP/HTTP logs receiver that
//! decodes every request with the protocol's own messages and only counts
//! what arrives (a run of a million records must not be held), noting for
//! the liveness probe's records how long after their sighting they came.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc, Mutex,
    },
    thread,
    time::{SystemTime, UNIX_EPOCH},
};

use opentelemetry_proto::tonic::{
    collector::logs::v1::ExportLogsServiceRequest, common::v1::any_value::Value as Any,
    logs::v1::LogRecord,
};
use prost::Message;

#[derive(Default)]
struct Received {
    records: AtomicU64,
    /// Seconds from sighting to arrival, of the probe's records.
    probe_latencies: Mutex<Vec<f64>>,
}

pub struct Collector {
    pub url: String,
    received: Arc<Received>,
}

impl Collector {
    /// Listening on a free local port, on threads of its own for as long
    /// as the bench runs.
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the collector");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let received = Arc::new(Received::default());
        let shared = Arc::clone(&received);
        thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let shared = Arc::clone(&shared);
                thread::spawn(move || serve(stream, &shared));
            }
        });
        Self { url, received }
    }

    /// Records received so far.
    pub fn records(&self) -> u64 {
        self.received.records.load(Ordering::Relaxed)
    }

    /// Once no record has arrived for a second (a batch waits at most half
    /// of one), or after 30 s.
    pub fn wait_until_quiet(&self) {
        let give_up = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut seen = self.records();
        while std::time::Instant::now() < give_up {
            thread::sleep(std::time::Duration::from_secs(1));
            let now = self.records();
            if now == seen {
                return;
            }
            seen = now;
        }
    }

    /// The probe's latencies noted so far, emptied.
    pub fn take_probe_latencies(&self) -> Vec<f64> {
        std::mem::take(&mut *self.received.probe_latencies.lock().expect("lock"))
    }
}

/// Requests on one connection (the exporter keeps it alive), each answered
/// 200 once counted.
fn serve(stream: TcpStream, received: &Received) {
    let mut reader = BufReader::new(stream);
    loop {
        let mut length = 0usize;
        let mut line = String::new();
        loop {
            line.clear();
            match reader.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) if line == "\r\n" => break,
                Ok(_) => {
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let arrived = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let Ok(request) = ExportLogsServiceRequest::decode(&body[..]) else {
            let _ = reader
                .get_mut()
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
            return;
        };
        let records = request
            .resource_logs
            .iter()
            .flat_map(|r| &r.scope_logs)
            .flat_map(|s| &s.log_records);
        let mut count = 0;
        let mut latencies = Vec::new();
        for record in records {
            count += 1;
            if is_probe(record) {
                latencies.push(arrived.saturating_sub(record.time_unix_nano) as f64 / 1e9);
            }
        }
        received.records.fetch_add(count, Ordering::Relaxed);
        received
            .probe_latencies
            .lock()
            .expect("lock")
            .extend(latencies);
        if reader
            .get_mut()
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n")
            .is_err()
        {
            return;
        }
    }
}

fn is_probe(record: &LogRecord) -> bool {
    record.attributes.iter().any(|kv| {
        kv.key == "process.command"
            && matches!(
                kv.value.as_ref().and_then(|v| v.value.as_ref()),
                Some(Any::StringValue(comm)) if super::liveness::is_probe_comm(comm)
            )
    })
}
