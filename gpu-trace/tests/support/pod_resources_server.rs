//! A stand-in for the kubelet's PodResources API: the real protocol (gRPC
//! on a Unix socket, the kubelet's messages as gpu-trace declares them),
//! answering `List` with what the test sets, and counting the calls.

use std::{
    convert::Infallible,
    path::{Path, PathBuf},
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc, Mutex,
    },
    task::{Context, Poll},
    thread,
};

use gpu_trace::host::pod_resources::{
    ContainerDevices, ContainerResources, ListPodResourcesRequest, ListPodResourcesResponse,
    PodResources, LIST_METHOD,
};
use tonic::{
    body::Body,
    codec::ProstCodec,
    codegen::{http, BoxFuture},
    server::{Grpc, NamedService, UnaryService},
    Request, Response, Status,
};

/// Serves until dropped.
pub struct PodResourcesServer {
    pub socket: PathBuf,
    answer: Arc<Mutex<ListPodResourcesResponse>>,
    calls: Arc<AtomicUsize>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<thread::JoinHandle<()>>,
}

impl PodResourcesServer {
    pub fn start(socket: &Path) -> Self {
        let _ = std::fs::remove_file(socket);
        let answer = Arc::new(Mutex::new(ListPodResourcesResponse::default()));
        let calls = Arc::new(AtomicUsize::new(0));
        let lister = Lister {
            answer: Arc::clone(&answer),
            calls: Arc::clone(&calls),
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        // Bound here, so that the socket exists once start returns.
        let listener = runtime
            .block_on(async { tokio::net::UnixListener::bind(socket) })
            .expect("bind the PodResources socket");
        let thread = thread::spawn(move || {
            runtime.block_on(async move {
                tonic::transport::Server::builder()
                    .add_service(lister)
                    .serve_with_incoming_shutdown(
                        tokio_stream::wrappers::UnixListenerStream::new(listener),
                        async {
                            let _ = stopped.await;
                        },
                    )
                    .await
                    .expect("serve PodResources");
            })
        });
        Self {
            socket: socket.to_path_buf(),
            answer,
            calls,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// From now on `List` says that `namespace/pod`'s `container` was
    /// given these GPUs (by UUID, under nvidia.com/gpu).
    pub fn allocate(&self, namespace: &str, pod: &str, container: &str, gpus: &[&str]) {
        let mut answer = self.answer.lock().unwrap();
        answer.pod_resources.push(PodResources {
            name: pod.into(),
            namespace: namespace.into(),
            containers: vec![ContainerResources {
                name: container.into(),
                devices: vec![ContainerDevices {
                    resource_name: "nvidia.com/gpu".into(),
                    device_ids: gpus.iter().map(|g| g.to_string()).collect(),
                }],
                dynamic_resources: vec![],
            }],
        });
    }

    /// How many `List` calls it answered.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Drop for PodResourcesServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// The service: `List` only, as the kubelet's `v1.PodResourcesLister`.
#[derive(Clone)]
struct Lister {
    answer: Arc<Mutex<ListPodResourcesResponse>>,
    calls: Arc<AtomicUsize>,
}

impl NamedService for Lister {
    const NAME: &'static str = "v1.PodResourcesLister";
}

impl UnaryService<ListPodResourcesRequest> for Lister {
    type Response = ListPodResourcesResponse;
    type Future = std::future::Ready<Result<Response<Self::Response>, Status>>;

    fn call(&mut self, _: Request<ListPodResourcesRequest>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let answer = self.answer.lock().unwrap().clone();
        std::future::ready(Ok(Response::new(answer)))
    }
}

impl tower::Service<http::Request<Body>> for Lister {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Body>) -> Self::Future {
        let lister = self.clone();
        Box::pin(async move {
            if request.uri().path() != LIST_METHOD {
                return Ok(Status::unimplemented("only List").into_http());
            }
            let mut grpc = Grpc::new(ProstCodec::default());
            Ok(grpc.unary(lister, request).await)
        })
    }
}
