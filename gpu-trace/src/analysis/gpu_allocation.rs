//! Which GPUs a Kubernetes container was given, from the kubelet's
//! PodResources API: a denied GPU that is not among them was probed (NVML
//! and DCGM open every GPU node they can see), not lost.
//!
//! The list is asked for and parsed on a thread of its own (its size is
//! the node's pods', which tenants choose); the event thread only looks up
//! the last answer. A container the answer lacks (a pod just made) makes
//! the event thread ask again and wait a little, at most every
//! WAITS_AT_MOST_EVERY, so its first denials are told apart too.

use std::{
    path::PathBuf,
    sync::{mpsc, Arc, Condvar, Mutex},
    thread,
    time::{Duration, Instant},
};

use crate::{
    host::pod_resources::{list, Allocations, ContainerAllocation, ContainerKey},
    model::{allocation::GpuAllocation, container::Container, gpu::GpuIdentity},
    text::terminal::printable,
};

/// Allocations change with pods, which the kubelet admits at its pace.
const REREAD_EVERY: Duration = Duration::from_secs(10);
/// How long the event thread waits for a list that may hold a new pod.
const WAIT_FOR_NEW_POD: Duration = Duration::from_millis(300);
/// At most one wait this often: a tenant that makes pods without end holds
/// the event thread a tenth of the time at most.
const WAITS_AT_MOST_EVERY: Duration = Duration::from_secs(3);

pub struct GpuAllocations {
    shared: Arc<Shared>,
    ask: mpsc::SyncSender<()>,
    waited_at: Option<Instant>,
}

#[derive(Default)]
struct Shared {
    latest: Mutex<Latest>,
    renewed: Condvar,
}

#[derive(Default)]
struct Latest {
    allocations: Arc<Allocations>,
    /// Readings of the list begun and ended, answered or not: a waiter
    /// waits for the end of one begun after it asked.
    begun: u64,
    ended: u64,
}

impl GpuAllocations {
    /// Starts reading the kubelet's list at `socket` in the background.
    pub fn start(socket: PathBuf) -> Self {
        let shared = Arc::new(Shared::default());
        let (ask, asked) = mpsc::sync_channel(1);
        let reader = Arc::clone(&shared);
        // Without the thread, no container is ever found: no allocation is said.
        let _ = thread::Builder::new()
            .name("pod-resources".into())
            .spawn(move || read_lists(&socket, &reader, &asked));
        Self {
            shared,
            ask,
            waited_at: None,
        }
    }

    /// Whether `gpu` is among the GPUs `container` was given; None when the
    /// container is not Kubernetes', the kubelet does not list it, or its
    /// GPUs are not named by UUID.
    pub fn of(&mut self, container: &Container, gpu: &GpuIdentity) -> Option<GpuAllocation> {
        let (Some(namespace), Some(pod), Some(name)) =
            (&container.namespace, &container.pod, &container.name)
        else {
            return None;
        };
        let key = ContainerKey {
            namespace: namespace.clone(),
            pod: pod.clone(),
            container: name.clone(),
        };
        let found = match self.lookup(&key) {
            Some(found) => Some(found),
            None if self.may_wait() => {
                self.wait_for_a_new_list();
                self.lookup(&key)
            }
            None => None,
        };
        allocation_of(&found?, gpu)
    }

    fn lookup(&self, key: &ContainerKey) -> Option<ContainerAllocation> {
        let latest = self.shared.latest.lock().unwrap_or_else(|e| e.into_inner());
        latest.allocations.by_container.get(key).cloned()
    }

    fn may_wait(&self) -> bool {
        self.waited_at
            .is_none_or(|at| at.elapsed() >= WAITS_AT_MOST_EVERY)
    }

    fn wait_for_a_new_list(&mut self) {
        self.waited_at = Some(Instant::now());
        let latest = self.shared.latest.lock().unwrap_or_else(|e| e.into_inner());
        // A reading under way may have begun before the pod was made: the
        // one to wait for is the next.
        let next = latest.begun + 1;
        // Full: a reading is already asked for, and will be the next.
        let _ = self.ask.try_send(());
        let _ = self
            .shared
            .renewed
            .wait_timeout_while(latest, WAIT_FOR_NEW_POD, |l| l.ended < next);
    }
}

/// The reader's loop: a list now, then every REREAD_EVERY or when asked.
fn read_lists(socket: &std::path::Path, shared: &Shared, asked: &mpsc::Receiver<()>) {
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let mut failing = false;
    loop {
        shared
            .latest
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .begun += 1;
        match runtime.block_on(list(socket)) {
            Ok(allocations) => {
                if failing {
                    eprintln!("gpu-trace: the kubelet's PodResources API answers again");
                }
                failing = false;
                let mut latest = shared.latest.lock().unwrap_or_else(|e| e.into_inner());
                latest.allocations = Arc::new(allocations);
                latest.ended += 1;
            }
            Err(e) => {
                if !failing {
                    eprintln!(
                        "gpu-trace: the kubelet's PodResources API: {}; GPUs denied to pods are not told apart as allocated or probed until it answers",
                        printable(format!("{e:#}").as_bytes())
                    );
                }
                failing = true;
                shared
                    .latest
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .ended += 1;
            }
        }
        shared.renewed.notify_all();
        match asked.recv_timeout(REREAD_EVERY) {
            Ok(()) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// The answer for one GPU from the container's listed devices: only
/// NVIDIA's resources named by GPU UUID decide it (time-slicing's replicas
/// are `UUID::N`); MIG devices, index ids and DRA claims leave it open.
pub fn allocation_of(allocation: &ContainerAllocation, gpu: &GpuIdentity) -> Option<GpuAllocation> {
    if allocation.has_claims {
        return None;
    }
    let mut gpus: Vec<String> = Vec::new();
    for device in &allocation.devices {
        if !device.resource.starts_with("nvidia.com/") {
            continue;
        }
        let id = device.id.split("::").next().unwrap_or_default();
        if !id.starts_with("GPU-") {
            return None;
        }
        if !gpus.iter().any(|g| g == id) {
            gpus.push(id.to_string());
        }
    }
    Some(GpuAllocation {
        gpu: gpu.uuid.clone(),
        allocated: gpus.contains(&gpu.uuid),
        container_gpus: gpus,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::pod_resources::AllocatedDevice;

    fn gpu(uuid: &str) -> GpuIdentity {
        GpuIdentity {
            uuid: uuid.into(),
            pci_bus_id: "0000:18:00.0".into(),
            minor: 3,
        }
    }

    fn given(devices: &[(&str, &str)]) -> ContainerAllocation {
        ContainerAllocation {
            devices: devices
                .iter()
                .map(|(resource, id)| AllocatedDevice {
                    resource: resource.to_string(),
                    id: id.to_string(),
                })
                .collect(),
            has_claims: false,
        }
    }

    #[test]
    fn a_gpu_is_allocated_when_its_uuid_is_listed_replicas_included() {
        let listed = given(&[
            ("nvidia.com/gpu.shared", "GPU-a::0"),
            ("nvidia.com/gpu.shared", "GPU-a::1"),
            ("example.com/nic", "eth1"),
        ]);
        let a = allocation_of(&listed, &gpu("GPU-a")).expect("decided");
        assert!(a.allocated);
        assert_eq!(a.container_gpus, ["GPU-a"]);
        let b = allocation_of(&listed, &gpu("GPU-b")).expect("decided");
        assert!(!b.allocated);
        // A pod given no GPU at all probed every one it opened.
        let none = allocation_of(&given(&[]), &gpu("GPU-b")).expect("decided");
        assert!(!none.allocated && none.container_gpus.is_empty());
    }

    #[test]
    fn mig_devices_index_ids_and_claims_leave_it_open() {
        assert_eq!(
            allocation_of(&given(&[("nvidia.com/mig-1g.5gb", "MIG-x")]), &gpu("GPU-a")),
            None
        );
        assert_eq!(
            allocation_of(&given(&[("nvidia.com/gpu", "0")]), &gpu("GPU-a")),
            None
        );
        let mut claims = given(&[("nvidia.com/gpu", "GPU-a")]);
        claims.has_claims = true;
        assert_eq!(allocation_of(&claims, &gpu("GPU-a")), None);
    }
}
