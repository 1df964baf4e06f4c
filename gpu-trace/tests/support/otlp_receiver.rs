//! A stand-in for an OpenTelemetry Collector's OTLP/HTTP logs receiver:
//! decodes each POST /v1/logs with the protocol's own messages and keeps
//! the log records; stopped and started again on the same address.

use std::{
    convert::Infallible,
    sync::{Arc, Mutex},
    thread,
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{body::Incoming, server::conn::http1, service::service_fn, Request, Response};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::{
    collector::logs::v1::{ExportLogsServiceRequest, ExportLogsServiceResponse},
    logs::v1::LogRecord,
};
use prost::Message;

/// Serves on `addr` until stopped.
pub struct OtlpReceiver {
    pub addr: String,
    records: Arc<Mutex<Vec<LogRecord>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl OtlpReceiver {
    pub fn start(addr: &str) -> Self {
        let mut receiver = Self {
            addr: addr.to_string(),
            records: Arc::default(),
            stop: None,
            thread: None,
        };
        receiver.serve();
        receiver
    }

    /// Every record received so far.
    pub fn records(&self) -> Vec<LogRecord> {
        self.records.lock().unwrap().clone()
    }

    /// Closes the port: requests fail to connect until `serve`.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    pub fn serve(&mut self) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind(&self.addr))
            .expect("bind the receiver");
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let records = Arc::clone(&self.records);
        self.thread = Some(thread::spawn(move || {
            runtime.block_on(async move {
                loop {
                    let (stream, _) = tokio::select! {
                        _ = &mut stopped => return,
                        accepted = listener.accept() => accepted.expect("accept"),
                    };
                    let records = Arc::clone(&records);
                    tokio::spawn(async move {
                        let service =
                            service_fn(move |request| receive(request, Arc::clone(&records)));
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            })
        }));
        self.stop = Some(stop);
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn receive(
    request: Request<Incoming>,
    records: Arc<Mutex<Vec<LogRecord>>>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let right = request.method() == hyper::Method::POST
        && request.uri().path() == "/v1/logs"
        && request
            .headers()
            .get("content-type")
            .is_some_and(|t| t == "application/x-protobuf");
    let body = request.into_body().collect().await.map(|b| b.to_bytes());
    let decoded = body
        .ok()
        .and_then(|b| ExportLogsServiceRequest::decode(b).ok());
    let (Some(decoded), true) = (decoded, right) else {
        return Ok(Response::builder()
            .status(400)
            .body(Full::default())
            .unwrap());
    };
    let mut kept = records.lock().unwrap();
    for resource in decoded.resource_logs {
        for scope in resource.scope_logs {
            kept.extend(scope.log_records);
        }
    }
    let answer = ExportLogsServiceResponse::default().encode_to_vec();
    Ok(Response::builder()
        .header("content-type", "application/x-protobuf")
        .body(Full::new(Bytes::from(answer)))
        .unwrap())
}
