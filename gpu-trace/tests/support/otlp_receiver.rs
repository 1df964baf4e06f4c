//! A stand-in for an OpenTelemetry Collector's OTLP/HTTP logs receiver:
//! decodes each POST /v1/logs with the protocol's own messages and keeps
//! the log records; stopped and started again on the same address. Over
//! plain HTTP, or over TLS with a certificate from a CA made for the test.

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
use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
use rustls::pki_types::PrivatePkcs8KeyDer;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;

/// Serves on `addr` until stopped.
pub struct OtlpReceiver {
    pub addr: String,
    records: Arc<Mutex<Vec<LogRecord>>>,
    /// Set for https://.
    tls: Option<TlsAcceptor>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl OtlpReceiver {
    /// Serves plain HTTP.
    pub fn start(addr: &str) -> Self {
        Self::start_with(addr, None)
    }

    /// Serves HTTPS, with a certificate for 127.0.0.1 and localhost signed
    /// by a CA made here and thrown away with it; returns, besides, that
    /// CA's certificate (PEM), which no system trusts.
    pub fn start_tls(addr: &str) -> (Self, String) {
        let ca = throwaway_ca();
        let server_key = KeyPair::generate().expect("server key");
        let server = CertificateParams::new(["127.0.0.1".to_string(), "localhost".to_string()])
            .expect("server parameters")
            .signed_by(&server_key, &ca)
            .expect("server certificate");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("TLS versions")
            .with_no_client_auth()
            .with_single_cert(
                vec![server.der().clone()],
                PrivatePkcs8KeyDer::from(server_key.serialize_der()).into(),
            )
            .expect("server TLS config");
        let receiver = Self::start_with(addr, Some(TlsAcceptor::from(Arc::new(config))));
        (receiver, ca.pem())
    }

    /// A CA of the test's own that signed nothing this receiver serves.
    pub fn unrelated_ca_pem() -> String {
        throwaway_ca().pem()
    }

    fn start_with(addr: &str, tls: Option<TlsAcceptor>) -> Self {
        let mut receiver = Self {
            addr: addr.to_string(),
            records: Arc::default(),
            tls,
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
        let tls = self.tls.clone();
        self.thread = Some(thread::spawn(move || {
            runtime.block_on(async move {
                loop {
                    let (stream, _) = tokio::select! {
                        _ = &mut stopped => return,
                        accepted = listener.accept() => accepted.expect("accept"),
                    };
                    let records = Arc::clone(&records);
                    let tls = tls.clone();
                    tokio::spawn(async move {
                        match tls {
                            None => serve_http(stream, records).await,
                            // A client that refuses the certificate ends the
                            // handshake: nothing to serve.
                            Some(tls) => {
                                if let Ok(stream) = tls.accept(stream).await {
                                    serve_http(stream, records).await;
                                }
                            }
                        }
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

async fn serve_http(
    stream: impl AsyncRead + AsyncWrite + Unpin + Send + 'static,
    records: Arc<Mutex<Vec<LogRecord>>>,
) {
    let service = service_fn(move |request| receive(request, Arc::clone(&records)));
    let _ = http1::Builder::new()
        .serve_connection(TokioIo::new(stream), service)
        .await;
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

/// A CA made now, trusted by nothing but what the test gives it to.
fn throwaway_ca() -> CertifiedIssuer<'static, KeyPair> {
    let key = KeyPair::generate().expect("CA key");
    let mut ca = CertificateParams::new(Vec::new()).expect("CA parameters");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "gpu-trace test CA");
    CertifiedIssuer::self_signed(ca, key).expect("CA certificate")
}
