//! Serving /metrics: on a thread of its own, so that a slow or hostile
//! scraper never delays events, with a cap on open connections (beyond it
//! a new one is closed at once) and time limits on reading a request's
//! headers and on a whole connection, so idle ones cannot pile up.

use std::{
    convert::Infallible,
    net::{SocketAddr, TcpListener as StdListener},
    sync::Arc,
    thread,
    time::Duration,
};

use anyhow::Context;
use bytes::Bytes;
use http_body_util::Full;
use hyper::{
    body::Incoming, header, server::conn::http1, service::service_fn, Method, Request, Response,
    StatusCode,
};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::{encoding::text::encode, registry::Registry};
use tokio::sync::Semaphore;

use crate::stream::metrics_format;

/// Open connections served at once; a Prometheus server needs one.
pub const MAX_CONNECTIONS: usize = 32;
/// From accepting a connection to having read a request's headers.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a connection may stay open, whatever it does.
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(30);

/// Binds `addr` now (an error if it cannot), then serves the registry on
/// a thread of its own until the process ends.
pub fn serve(registry: Arc<Registry>, addr: SocketAddr) -> anyhow::Result<()> {
    let listener =
        StdListener::bind(addr).with_context(|| format!("listening for metrics on {addr}"))?;
    listener.set_nonblocking(true)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the metrics server")?;
    thread::Builder::new()
        .name("metrics".into())
        .spawn(move || runtime.block_on(accept_loop(listener, registry)))
        .context("starting the metrics thread")?;
    Ok(())
}

async fn accept_loop(listener: StdListener, registry: Arc<Registry>) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors, say: let some close before trying again.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        // Over the cap: closed at once (dropped), never queued.
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            continue;
        };
        let registry = Arc::clone(&registry);
        tokio::spawn(async move {
            let service = service_fn(move |request| respond(request, Arc::clone(&registry)));
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await;
            drop(slot);
        });
    }
}

async fn respond(
    request: Request<Incoming>,
    registry: Arc<Registry>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let response = if request.method() == Method::GET && request.uri().path() == "/metrics" {
        let mut body = String::new();
        let _ = encode(&mut body, &registry);
        let accept = request
            .headers()
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok());
        let (content_type, body) = if metrics_format::wants_openmetrics(accept) {
            (metrics_format::OPENMETRICS, body)
        } else {
            (
                metrics_format::CLASSIC_TEXT,
                metrics_format::classic_text(&body),
            )
        };
        Response::builder()
            .header(header::CONTENT_TYPE, content_type)
            .body(Full::from(body))
    } else {
        Response::builder()
            .status(StatusCode::NOT_FOUND)
            .body(Full::from("only /metrics is served\n"))
    };
    Ok(response.expect("a well-formed response"))
}
