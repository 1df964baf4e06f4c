//! One room per container runtime: how it names its cgroups and its
//! containers, how prose labels them, and how to allow a device in its own
//! words. Everything else asks the room (`of`) instead of matching on the
//! runtime; adding a runtime is a file here plus its lines in `of` and
//! `ROOMS` (and the variant in model/container.rs).

mod containerd;
mod crio;
mod docker;
mod kubernetes_names;
mod lxc;
mod name_sources;
mod oci_engine;
mod plain_cgroup;
mod podman;
mod systemd;

pub use kubernetes_names::PodNames;
pub use name_sources::NameSources;
pub use oci_engine::{is_full_container_id, Engine};

use crate::model::container::{Container, Runtime};

/// Shown in commands instead of an observed name no quoting can show:
/// bare words, which a shell pasted into passes as they are (`<name>`
/// would be a redirection).
pub const CONTAINER: &str = "CONTAINER";
pub const NODE_PATH: &str = "NODE_PATH";

impl DeviceToAllow<'_> {
    pub fn rule(&self) -> String {
        char_rule(self.major, self.minor)
    }
}

/// "c 195:1", or "c 509:*" for a whole major.
pub fn char_rule(major: u32, minor: Option<u32>) -> String {
    match minor {
        Some(minor) => format!("c {major}:{minor}"),
        None => format!("c {major}:*"),
    }
}

/// One component of a cgroup path (relative to the cgroup2 mount), with
/// what lies above it.
pub struct PathStep<'a> {
    pub component: &'a str,
    /// The components above it, outermost first.
    pub ancestors: &'a [&'a str],
}

impl PathStep<'_> {
    pub fn parent(&self) -> Option<&str> {
        self.ancestors.last().copied()
    }

    /// The id of a `PREFIX<ID>.scope` component in the format engines use.
    fn scope_id(&self, prefix: &str) -> Option<&str> {
        self.component
            .strip_prefix(prefix)
            .and_then(|rest| rest.strip_suffix(".scope"))
            .filter(|id| is_full_container_id(id))
    }
}

/// A device a fix allows.
pub struct DeviceToAllow<'a> {
    /// The node's path, to pass or bind-mount.
    pub path: &'a str,
    pub major: u32,
    /// The one minor to allow, where the node is one of many on its major
    /// (a GPU, a render node); None allows the whole major (uvm's).
    pub minor: Option<u32>,
    /// The driver's name in /proc/devices today, for rules by name
    /// (NVIDIA's frontend is "nvidia" since driver 550, "nvidia-frontend" before).
    pub driver: &'a str,
    /// A GPU's own node, which NVIDIA's toolkit and device plugin hand
    /// out; false for the devices next to it (RDMA, IMEX, GPUDirect, VFIO).
    pub gpu_node: bool,
    /// For a pod: the GPU's UUID where the kubelet allocated it to the
    /// container, whose rules should then have had it.
    pub allocated_gpu: Option<&'a str>,
}

/// What gpu-trace knows of one runtime.
pub trait ContainerRuntime: Sync {
    fn runtime(&self) -> Runtime;

    /// The container id that this cgroup path component names, when this
    /// runtime makes cgroups so named there.
    fn recognise(&self, step: &PathStep) -> Option<String>;

    /// A unit of the host's service manager rather than a container: it
    /// counts only where no container encloses the cgroup.
    fn is_host_unit(&self) -> bool {
        false
    }

    /// The container's own name, from where the runtime keeps it.
    fn name(&self, _id: &str, _sources: &NameSources) -> Option<String> {
        None
    }

    /// A Kubernetes container's namespace, pod and name, from the
    /// runtime's own record of it; None outside Kubernetes.
    fn pod_names(&self, _id: &str, _sources: &NameSources) -> Option<PodNames> {
        None
    }

    /// The engine that drives an OCI runtime (runc, crun) to write its
    /// device policies, with NVIDIA's hook adding the GPUs; None for the
    /// runtimes that write their own.
    fn engine(&self) -> Option<Engine> {
        None
    }

    /// "ct 200", "docker 3f2a9c1b0d4e": how prose names it (its name, when
    /// it has another, is added after).
    fn label(&self, id: &str) -> String {
        match self.engine() {
            Some(_) => oci_engine::label(self.runtime(), id),
            None => format!("{} {id}", self.runtime().label()),
        }
    }

    /// Whether it is a container at all (a plain cgroup is not).
    fn is_container(&self) -> bool {
        true
    }

    /// How to allow `device` (and see its node) in this runtime.
    fn allow_device(&self, container: &Container, device: &DeviceToAllow) -> Vec<String>;

    /// What keeps the rules of a running container from being rewritten
    /// (systemd's reload, runc after an update).
    fn keep_rules(&self, container: &Container, device: &DeviceToAllow) -> Vec<String> {
        match self.engine() {
            Some(engine) => oci_engine::keep_rules(engine),
            None => self.allow_device(container, device),
        }
    }

    /// How to allow ROCm: its compute node `kfd` and the render nodes.
    fn allow_rocm(&self, container: &Container, kfd: &DeviceToAllow) -> Vec<String> {
        match self.engine() {
            Some(engine) => vec![engine.rocm().to_string()],
            None => self.allow_device(container, kfd),
        }
    }
}

/// Every runtime, in the order a cgroup path component is tried against
/// them: the first that recognises it names the container there.
pub const ROOMS: [&dyn ContainerRuntime; 7] = [
    &lxc::Lxc,
    &docker::Docker,
    &containerd::Containerd,
    &crio::Crio,
    &podman::Podman,
    &systemd::Systemd,
    &plain_cgroup::PlainCgroup,
];

/// The room of `runtime`.
pub fn of(runtime: Runtime) -> &'static dyn ContainerRuntime {
    match runtime {
        Runtime::Lxc => &lxc::Lxc,
        Runtime::Docker => &docker::Docker,
        Runtime::Containerd => &containerd::Containerd,
        Runtime::Crio => &crio::Crio,
        Runtime::Podman => &podman::Podman,
        Runtime::Systemd => &systemd::Systemd,
        Runtime::Cgroup => &plain_cgroup::PlainCgroup,
    }
}

/// "ct 200 (cuda-box)", "docker 3f2a9c1b0d4e (web)", "cgroup /user.slice".
pub fn label(container: &Container) -> String {
    if let (Some(namespace), Some(pod)) = (&container.namespace, &container.pod) {
        let name = container.name.as_deref().unwrap_or("?");
        return format!("pod {namespace}/{pod} (container {name})");
    }
    let id = of(container.runtime).label(&container.id);
    match &container.name {
        Some(name) if *name != container.id => format!("{id} ({name})"),
        _ => id,
    }
}

/// How to allow `device` in the container's runtime.
pub fn allow_device(container: &Container, device: &DeviceToAllow) -> Vec<String> {
    of(container.runtime).allow_device(container, device)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{cgroup::identity::identify, scenario::pasted::assert_paste_safe};

    const UVM: DeviceToAllow = DeviceToAllow {
        path: "/dev/nvidia-uvm",
        major: 509,
        minor: None,
        driver: "nvidia-uvm",
        gpu_node: true,
        allocated_gpu: None,
    };

    fn fix(cgroup: &str) -> String {
        allow_device(&identify(cgroup, &NameSources::default()), &UVM).join(" ")
    }

    #[test]
    fn fixes_speak_each_runtime() {
        assert!(fix("/system.slice/ollama.service").contains("DeviceAllow=char-nvidia-uvm rw"));
        assert!(
            fix("/docker/3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8")
                .contains("--device /dev/nvidia-uvm")
        );
        assert!(fix("/kubepods/besteffort/pod6b1e2a3c-4d5e-6f70-8192-a3b4c5d6e7f8/3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8").contains("nvidia.com/gpu"));
        assert!(fix("/machine.slice/libpod-3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8.scope").contains("--device /dev/nvidia-uvm"));
        assert!(fix("/user.slice").contains("bpftool cgroup tree"));
    }

    /// Every runtime's fix for one GPU allows that GPU: its minor or its
    /// path, never the major (every GPU of the node) or `--gpus all`.
    #[test]
    fn a_denied_gpu_is_allowed_alone_in_every_runtime() {
        let gpu = DeviceToAllow {
            path: "/dev/nvidia1",
            major: 195,
            minor: Some(1),
            driver: "nvidia",
            gpu_node: true,
            allocated_gpu: None,
        };
        for cgroup in [
            "/lxc/200",
            "/lxc.payload.box",
            "/docker/3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8",
            "/kubepods/besteffort/pod6b1e2a3c-4d5e-6f70-8192-a3b4c5d6e7f8/3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8",
            "/machine.slice/libpod-3f2a9c1b0d4e5f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7e8.scope",
            "/system.slice/ollama.service",
            "/user.slice",
        ] {
            let container = identify(cgroup, &NameSources::default());
            let room = of(container.runtime);
            for fix in [
                room.allow_device(&container, &gpu),
                room.keep_rules(&container, &gpu),
            ] {
                let fix = fix.join(" ");
                for wide in ["195:*", "char-nvidia", "--gpus all", "gpu=all"] {
                    assert!(!fix.contains(wide), "{cgroup}: {fix}");
                }
            }
            let fix = room.allow_device(&container, &gpu).join(" ");
            assert!(
                fix.contains("c 195:1")
                    || fix.contains("DeviceAllow=/dev/nvidia1 rw")
                    || fix.contains("--device /dev/nvidia1`"),
                "{cgroup}: {fix}"
            );
        }
    }

    #[test]
    fn hostile_unit_names_reach_commands_as_literal_words() {
        for name in [
            "$(touch${IFS}pwned)",
            "x;echo>pwned",
            "a'b`echo>pwned`",
            "-n$(echo>pwned)",
        ] {
            assert_paste_safe(&fix(&format!("/system.slice/{name}.service")), name);
        }
    }

    #[test]
    fn the_table_holds_each_room_once_and_of_finds_it() {
        let mut seen = Vec::new();
        for room in ROOMS {
            let runtime = room.runtime();
            assert_eq!(of(runtime).runtime(), runtime);
            assert!(!seen.contains(&runtime), "{runtime:?} twice");
            seen.push(runtime);
        }
    }
}
