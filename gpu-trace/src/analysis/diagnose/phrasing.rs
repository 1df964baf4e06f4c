//! The words every cause shares: how the container, the device, the policy
//! and the node are named in prose, the runtime's fix for the denied
//! device, and how a finding becomes a diagnosis.

use std::path::Path;

use crate::{
    analysis::diagnose::facts::Facts,
    host::{device_node::is_char_node, proc_devices::CharMajors},
    model::{
        denied_by::DeniedBy,
        diagnosis::{Cause, Diagnosis},
        node::{NvidiaNode, NVIDIA_FRONTEND_MAJOR},
        policy_writer::Manager,
        vendor::{neighbour_dev_path, Role, DRM_MAJOR},
    },
    runtime::{self, DeviceToAllow, CONTAINER, NODE_PATH},
    text::shell_word::prose,
};

/// What a cause works out; the cause table adds which cause it is.
pub(super) struct Finding {
    pub explanation: String,
    pub fix: Vec<String>,
}

/// The words commands show for names no quoting can show.
const PLACEHOLDERS: [&str; 2] = [CONTAINER, NODE_PATH];

impl Finding {
    /// The diagnosis, with a note on any placeholder the fix had to use.
    pub fn into_diagnosis(mut self, cause: Cause) -> Diagnosis {
        let placeholders: Vec<&str> = PLACEHOLDERS
            .into_iter()
            .filter(|p| self.fix.iter().any(|f| f.contains(p)))
            .collect();
        if !placeholders.is_empty() {
            self.fix.push(format!(
                "({} stand{} for the name in this event, which holds characters that cannot be shown safely in a command)",
                placeholders.join(" and "),
                if placeholders.len() == 1 { "s" } else { "" }
            ));
        }
        Diagnosis::new(cause, self.explanation, self.fix)
    }
}

impl Facts {
    /// The path opened, else the node's usual path.
    pub fn path_text(&self) -> String {
        match (&self.path, self.node) {
            (Some(path), _) => String::from_utf8_lossy(path).into_owned(),
            (None, Some(node)) => node.dev_path(),
            (None, None) => "(device)".into(),
        }
    }

    /// The node's usual path when it is NVIDIA's, else the path opened.
    pub fn node_path(&self) -> String {
        self.node
            .map_or_else(|| self.path_text(), NvidiaNode::dev_path)
    }

    /// "the device policy prog 920 (lxc_dev) at /lxc/200 (of ct 200)" when
    /// attribution found the program, else "the device policy of ct 200".
    pub fn policy_text(&self) -> String {
        match self.culprit() {
            Some(culprit @ DeniedBy::Program { .. }) => format!(
                "the device policy {} (of {})",
                prose(&culprit.describe()),
                self.label()
            ),
            _ => format!("the device policy of {}", self.label()),
        }
    }

    /// The container's label, for prose.
    pub fn label(&self) -> String {
        prose(&runtime::label(self.container())).into_owned()
    }

    /// "nvidia-uvm (c 509:0)".
    pub fn device_text(&self) -> String {
        let name = self.device.as_deref().unwrap_or("device");
        format!("{name} (c {}:{})", self.major, self.minor)
    }

    /// The driver's name today, for rules by name.
    pub fn driver_name(&self) -> &str {
        self.driver
            .as_deref()
            .or(self.node.map(NvidiaNode::driver))
            .unwrap_or("DRIVER")
    }

    /// The culprit program's cgroup and writer, when a program denied it.
    pub fn culprit_program(&self) -> Option<(&str, Option<Manager>)> {
        match self.culprit()? {
            DeniedBy::Program {
                attached_at,
                writer,
                ..
            } => Some((attached_at.as_str(), writer.as_ref().map(|w| w.manager))),
            _ => None,
        }
    }
}

impl Facts {
    /// How the container's runtime allows the denied device: the node's
    /// usual path, the major denied, its driver's name today.
    pub fn allow_denied(&self) -> Vec<String> {
        self.with_denied_device(|device| runtime::allow_device(self.container(), device))
    }

    /// `use_it` on the denied device as the runtimes take it, built in one
    /// place so that allowing it and keeping its rules name the same node.
    fn with_denied_device<T>(&self, use_it: impl FnOnce(&DeviceToAllow) -> T) -> T {
        let path = self.host_node_path();
        use_it(&DeviceToAllow {
            path: &path,
            major: self.major,
            minor: self.denied_minor(),
            driver: self.driver_name(),
            gpu_node: !self.next_to_the_gpu(),
            allocated_gpu: self
                .allocation
                .as_ref()
                .map(|a| &**a.0)
                .filter(|a| a.allocated)
                .map(|a| a.gpu.as_str()),
        })
    }

    /// Where the host has the denied node, for a fix to name: NVIDIA's own
    /// path where the kernel's numbers are that node's; a device next to
    /// the GPU's usual path where the host's node there has those numbers
    /// (udev makes no /dev/char link for a node without sysfs, as IMEX
    /// channels and gdrdrv are, and systemd skips a DeviceAllow= path that
    /// is not there); else udev's `/dev/char/MAJ:MIN` for one node of many.
    /// Never the path the process opened, which may be a tenant's own link
    /// or mknod, but for a single-purpose major's node, whose rule is the
    /// whole major anyway.
    pub fn host_node_path(&self) -> String {
        let numbers_agree = |node: NvidiaNode| {
            node.fixed_minor() == Some(self.minor)
                && node.has_dynamic_major() != (self.major == NVIDIA_FRONTEND_MAJOR)
        };
        let neighbour = self
            .driver
            .as_deref()
            .filter(|_| self.next_to_the_gpu())
            .and_then(|driver| neighbour_dev_path(driver, self.major, self.minor))
            .filter(|path| is_char_node(Path::new(path), self.major, self.minor));
        if let Some(path) = neighbour {
            return path;
        }
        match self.node {
            Some(node) if numbers_agree(node) => node.dev_path(),
            _ if self.denied_minor().is_some() => {
                format!("/dev/char/{}:{}", self.major, self.minor)
            }
            _ => self.node_path(),
        }
    }

    /// The denied device as a rule: "c 195:1", or "c 509:*" for a major
    /// that serves one purpose.
    pub fn denied_rule(&self) -> String {
        runtime::char_rule(self.major, self.denied_minor())
    }

    /// The minor a fix allows alone: the denied one, where its node is one
    /// of many on the major (a GPU, a render node). Seen by the kernel at
    /// the device check, so the host's, not a name the tenant chose.
    pub fn denied_minor(&self) -> Option<u32> {
        // The devices next to the GPU: one NIC's verbs node, one IMEX
        // channel, one VFIO group, never every one their major serves.
        let one_of_many = self.node.is_some_and(NvidiaNode::is_one_of_many)
            || self.major == DRM_MAJOR
            || self.next_to_the_gpu();
        one_of_many.then_some(self.minor)
    }

    /// A node of the devices next to the GPU (RDMA, IMEX, GPUDirect, VFIO).
    pub fn next_to_the_gpu(&self) -> bool {
        self.role.is_some_and(Role::is_next_to_the_gpu)
    }

    /// What keeps the container's rules for the denied device from being
    /// rewritten, in its runtime's words.
    pub fn keep_denied_rules(&self) -> Vec<String> {
        self.with_denied_device(|device| {
            runtime::of(self.container().runtime).keep_rules(self.container(), device)
        })
    }
}

/// Today's major of the node's driver, per /proc/devices.
pub(super) fn todays_major(node: NvidiaNode, majors: &CharMajors) -> Option<u32> {
    if !node.has_dynamic_major() {
        return Some(NVIDIA_FRONTEND_MAJOR);
    }
    majors
        .nvidia_majors()
        .into_iter()
        .find(|&m| majors.driver(m) == Some(node.driver()))
}
