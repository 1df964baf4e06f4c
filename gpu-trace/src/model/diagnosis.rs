//! A named root cause, what happened and what to change.
//!
//! The catalogue of causes is documented in docs/root-causes.md.

use serde::Serialize;
use serde_json::value::RawValue;

use crate::text::json;

/// Root causes, with the stable names JSON output uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Cause {
    /// The policy lacks the dynamic major of nvidia-uvm (or caps, nvswitch).
    DynamicMajorNotAllowed,
    /// The node (or the rule) carries a major the driver no longer has.
    StaleMajor,
    /// The same cgroup opened the same device before; now it is denied.
    RulesRewritten,
    /// ENOENT: the node was never created.
    NodeMissing,
    /// EACCES: file mode or group, not the device policy.
    FilePermissions,
    /// Denied by cgroup v1 devices.list, not by a BPF program.
    V1DevicesList,
    /// systemd's DeviceAllow=char-NAME names a driver /proc/devices lacks.
    DeviceAllowNameUnresolved,
    /// The denying program sits at an ancestor of the container's cgroup.
    AncestorPolicy,
    /// Another program in force allows what the denying one refuses.
    StackedPrograms,
    /// NVIDIA's runtime config says no-cgroups = true on a rootful runtime.
    NoCgroupsHook,
    /// The device check allowed it; SELinux or AppArmor refused the open.
    LsmDenied,
    /// The node came from a CDI spec that no longer matches the host.
    StaleCdiSpec,
    /// ENXIO: no driver has the node's major; its module is not loaded.
    DriverNotLoaded,
    /// A pod's container was denied a GPU the kubelet did not allocate to it: a probe.
    NotAllocated,
    /// Denied by a device policy, for a device with no more specific story.
    DeviceDenied,
}

impl Cause {
    pub fn id(self) -> &'static str {
        match self {
            Cause::DynamicMajorNotAllowed => "dynamic-major-not-allowed",
            Cause::StaleMajor => "stale-major",
            Cause::RulesRewritten => "rules-rewritten",
            Cause::NodeMissing => "node-missing",
            Cause::FilePermissions => "file-permissions",
            Cause::V1DevicesList => "v1-devices-list",
            Cause::DeviceAllowNameUnresolved => "device-allow-name-unresolved",
            Cause::AncestorPolicy => "ancestor-policy",
            Cause::StackedPrograms => "stacked-programs",
            Cause::NoCgroupsHook => "no-cgroups-hook",
            Cause::LsmDenied => "lsm-denied",
            Cause::StaleCdiSpec => "stale-cdi-spec",
            Cause::DriverNotLoaded => "driver-not-loaded",
            Cause::NotAllocated => "not-allocated",
            Cause::DeviceDenied => "device-denied",
        }
    }
}

#[derive(Debug, Serialize)]
pub struct Diagnosis {
    pub cause: Cause,
    /// What happened, in plain words.
    pub explanation: String,
    /// What to change, one step per line.
    pub fix: Vec<String>,
    /// The fix on one line, for event streams.
    #[serde(skip)]
    pub hint: String,
    /// `explanation` and `hint` as JSON strings, rendered once: the same
    /// diagnosis goes out with every repeat of a denial.
    #[serde(skip)]
    pub json_explanation: Box<RawValue>,
    #[serde(skip)]
    pub json_hint: Box<RawValue>,
}

impl Diagnosis {
    /// Renders `explanation` and the one-line hint to JSON once.
    pub fn new(cause: Cause, explanation: String, fix: Vec<String>) -> Self {
        let hint = fix.join("; ");
        Self {
            json_explanation: json::to_raw(&explanation),
            json_hint: json::to_raw(&hint),
            cause,
            explanation,
            fix,
            hint,
        }
    }
}
