//! Who wrote a device policy: the manager that loaded and attached a
//! program, and what that answer rests on. Never a guess: without evidence
//! the manager is `unknown`.

use serde::Serialize;

/// The managers that write device policies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Manager {
    Systemd,
    Runc,
    Crun,
    Lxc,
    Docker,
    Containerd,
    Podman,
    NvidiaContainerToolkit,
    Snapd,
    GpuTrace,
    Unknown,
}

impl Manager {
    pub fn label(self) -> &'static str {
        match self {
            Manager::Systemd => "systemd",
            Manager::Runc => "runc",
            Manager::Crun => "crun",
            Manager::Lxc => "lxc",
            Manager::Docker => "docker",
            Manager::Containerd => "containerd",
            Manager::Podman => "podman",
            Manager::NvidiaContainerToolkit => "nvidia-container-toolkit",
            Manager::Snapd => "snapd",
            Manager::GpuTrace => "gpu-trace",
            Manager::Unknown => "unknown",
        }
    }

    /// The manager a process of this command name is, if it is one.
    pub fn from_comm(comm: &str) -> Option<Self> {
        Some(match comm {
            "systemd" => Manager::Systemd,
            "runc" => Manager::Runc,
            "crun" => Manager::Crun,
            "dockerd" => Manager::Docker,
            "containerd" => Manager::Containerd,
            "podman" | "conmon" => Manager::Podman,
            "gpu-trace" => Manager::GpuTrace,
            "snapd" => Manager::Snapd,
            // lxc-start, or its monitor renamed "[lxc monitor] PATH NAME".
            c if c.starts_with("lxc") || c.starts_with("[lxc") => Manager::Lxc,
            c if c.starts_with("nvidia-") => Manager::NvidiaContainerToolkit,
            c if c.starts_with("snap-") => Manager::Snapd,
            _ => return None,
        })
    }
}

/// A process named as evidence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProcessRef {
    pub pid: u32,
    pub comm: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyWriter {
    pub manager: Manager,
    /// What the answer rests on, in a sentence.
    pub evidence: String,
    /// The process the evidence names, when there is one.
    pub pid: Option<u32>,
    pub comm: Option<String>,
    /// When the program was loaded (RFC 3339): when its rules were written.
    pub loaded_at: String,
    /// What made it write them, where that is on record.
    pub trigger: Option<Box<PropertiesSet>>,
}

/// A program loaded as properties of the systemd unit at its cgroup were
/// set (SetUnitProperties: `systemctl set-property`, or a runtime's update
/// of a container's resources through the systemd cgroup driver), which
/// makes systemd apply the unit's device rules again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PropertiesSet {
    pub unit: String,
    /// The properties set, by their systemd names (`CPUWeight`, `AllowedCPUs`).
    pub properties: Vec<String>,
    /// When (RFC 3339), from their drop-ins' times.
    pub set_at: String,
    /// The folder of the drop-ins systemd wrote for them.
    pub drop_ins: String,
}
