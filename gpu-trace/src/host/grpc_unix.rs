//! A gRPC channel to a local daemon's Unix socket (the kubelet's
//! PodResources API, containerd's CRI): tonic speaks HTTP/2 over whatever
//! stream the connector hands it.

use std::{path::PathBuf, time::Duration};

use anyhow::Context;
use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// Connects to `socket`; every call on the channel gives up after `timeout`.
pub async fn unix_channel(
    socket: impl Into<PathBuf>,
    timeout: Duration,
) -> anyhow::Result<Channel> {
    let socket = socket.into();
    let shown = socket.display().to_string();
    // The URI is unused: the connector below decides where to connect.
    Endpoint::from_static("http://localhost")
        .connect_timeout(timeout)
        .timeout(timeout)
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let socket = socket.clone();
            async move {
                let stream = tokio::net::UnixStream::connect(socket).await?;
                Ok::<_, std::io::Error>(TokioIo::new(stream))
            }
        }))
        .await
        .with_context(|| format!("connect to {shown}"))
}
