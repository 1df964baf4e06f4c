//! The kubelet's PodResources API (`v1.PodResourcesLister`, GA since
//! Kubernetes 1.28): which devices each container of each pod on the node
//! was allocated. NVIDIA's device plugin names a GPU by its UUID (a MIG
//! device by its own UUID), so a denied GPU can be told apart as the
//! container's own or one it merely probed.
//!
//! The messages are declared here with the API's field numbers, only the
//! fields read; prost skips the rest.

use std::{
    collections::HashMap,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::Context;
use tonic::codegen::http::uri::PathAndQuery;

/// Where the kubelet serves it.
pub const DEFAULT_SOCKET: &str = "/var/lib/kubelet/pod-resources/kubelet.sock";
/// The largest answer taken: 110 pods (the kubelet's default limit) with
/// a few containers and devices each is some tens of KiB.
pub const ANSWER_LIMIT_BYTES: usize = 4 << 20;
/// A kubelet that does not answer in this long is taken as not there.
const CALL_TIMEOUT: Duration = Duration::from_secs(2);

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesRequest {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ListPodResourcesResponse {
    #[prost(message, repeated, tag = "1")]
    pub pod_resources: Vec<PodResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct PodResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub namespace: String,
    #[prost(message, repeated, tag = "3")]
    pub containers: Vec<ContainerResources>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerResources {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(message, repeated, tag = "2")]
    pub devices: Vec<ContainerDevices>,
    /// Dynamic Resource Allocation's claims: devices named by CDI, not by
    /// the plugin's ids.
    #[prost(message, repeated, tag = "5")]
    pub dynamic_resources: Vec<DynamicResource>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct DynamicResource {
    #[prost(string, tag = "2")]
    pub claim_name: String,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct ContainerDevices {
    #[prost(string, tag = "1")]
    pub resource_name: String,
    #[prost(string, repeated, tag = "2")]
    pub device_ids: Vec<String>,
}

/// The gRPC method's path.
pub const LIST_METHOD: &str = "/v1.PodResourcesLister/List";

/// One container, as Kubernetes names it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ContainerKey {
    pub namespace: String,
    pub pod: String,
    pub container: String,
}

/// A device a container was allocated: its resource and the plugin's id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AllocatedDevice {
    pub resource: String,
    pub id: String,
}

/// What the kubelet lists for one container.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerAllocation {
    pub devices: Vec<AllocatedDevice>,
    /// It holds claims of Dynamic Resource Allocation too.
    pub has_claims: bool,
}

/// What the kubelet said, by container.
#[derive(Debug, Default)]
pub struct Allocations {
    pub by_container: HashMap<ContainerKey, ContainerAllocation>,
}

impl Allocations {
    pub fn from_answer(answer: ListPodResourcesResponse) -> Self {
        let mut by_container = HashMap::new();
        for pod in answer.pod_resources {
            for container in pod.containers {
                let devices = container
                    .devices
                    .into_iter()
                    .flat_map(|d| {
                        let resource = d.resource_name;
                        d.device_ids.into_iter().map(move |id| AllocatedDevice {
                            resource: resource.clone(),
                            id,
                        })
                    })
                    .collect();
                let allocation = ContainerAllocation {
                    devices,
                    has_claims: !container.dynamic_resources.is_empty(),
                };
                let key = ContainerKey {
                    namespace: pod.namespace.clone(),
                    pod: pod.name.clone(),
                    container: container.name,
                };
                by_container.insert(key, allocation);
            }
        }
        Self { by_container }
    }
}

/// Asks the kubelet at `socket` for every pod's allocations.
pub async fn list(socket: &Path) -> anyhow::Result<Allocations> {
    let channel = super::grpc_unix::unix_channel(PathBuf::from(socket), CALL_TIMEOUT).await?;
    let mut grpc = tonic::client::Grpc::new(channel).max_decoding_message_size(ANSWER_LIMIT_BYTES);
    grpc.ready().await.context("the PodResources service")?;
    let answer = grpc
        .unary(
            tonic::Request::new(ListPodResourcesRequest {}),
            PathAndQuery::from_static(LIST_METHOD),
            tonic::codec::ProstCodec::default(),
        )
        .await
        .with_context(|| format!("{LIST_METHOD} on {}", socket.display()))?;
    Ok(Allocations::from_answer(answer.into_inner()))
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;

    #[test]
    fn an_answer_is_read_by_container_with_each_device_and_its_resource() {
        let answer = ListPodResourcesResponse {
            pod_resources: vec![PodResources {
                name: "trainer-0".into(),
                namespace: "ml".into(),
                containers: vec![ContainerResources {
                    name: "cuda".into(),
                    devices: vec![ContainerDevices {
                        resource_name: "nvidia.com/gpu".into(),
                        device_ids: vec!["GPU-a".into(), "GPU-b".into()],
                    }],
                    dynamic_resources: vec![],
                }],
            }],
        };
        // Through the wire format, as it arrives.
        let decoded = ListPodResourcesResponse::decode(&*answer.encode_to_vec()).expect("decode");
        let allocations = Allocations::from_answer(decoded);
        let key = ContainerKey {
            namespace: "ml".into(),
            pod: "trainer-0".into(),
            container: "cuda".into(),
        };
        let ids: Vec<&str> = allocations.by_container[&key]
            .devices
            .iter()
            .map(|d| d.id.as_str())
            .collect();
        assert_eq!(ids, ["GPU-a", "GPU-b"]);
        let devices = &allocations.by_container[&key].devices;
        assert_eq!(devices[0].resource, "nvidia.com/gpu");
        assert!(!allocations.by_container[&key].has_claims);
    }
}
