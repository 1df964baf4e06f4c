//! What `watch` shows, narrowed down by the user: a container, a
//! Kubernetes namespace or pod, a cgroup subtree, a process, a command, a
//! device.

use std::path::PathBuf;

use crate::{
    cgroup::identity::matches,
    model::{
        container::PodQuery,
        record::Record,
        vendor::{Role, Vendor},
    },
};

/// `--device`: a node or driver name, a major, or MAJ:MIN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeviceFilter {
    Name(String),
    Major(u32),
    Number(u32, u32),
}

impl DeviceFilter {
    pub fn parse(text: &str) -> Result<Self, String> {
        if let Some((major, minor)) = text.split_once(':') {
            return match (major.parse(), minor.parse()) {
                (Ok(major), Ok(minor)) => Ok(DeviceFilter::Number(major, minor)),
                _ => Err(format!("{text:?} is not MAJOR:MINOR")),
            };
        }
        match text.parse() {
            Ok(major) => Ok(DeviceFilter::Major(major)),
            Err(_) if !text.is_empty() => Ok(DeviceFilter::Name(text.to_string())),
            Err(_) => Err("an empty device".into()),
        }
    }

    /// The char major to add to the kernel-side watch list, if any.
    pub fn major(&self) -> Option<u32> {
        match self {
            DeviceFilter::Major(m) | DeviceFilter::Number(m, _) => Some(*m),
            DeviceFilter::Name(_) => None,
        }
    }

    fn accepts(&self, record: &Record) -> bool {
        let a = &record.access;
        match self {
            DeviceFilter::Major(m) => a.device_seen && a.major == *m,
            DeviceFilter::Number(m, n) => a.device_seen && (a.major, a.minor) == (*m, *n),
            DeviceFilter::Name(name) => {
                record.device.as_deref() == Some(name.as_str())
                    || record.driver.as_deref() == Some(name.as_str())
            }
        }
    }
}

/// `--vendor` and `--role`: which kinds of device are shown; each left
/// empty shows every device.
#[derive(Debug, Clone, Default)]
pub struct KindFilter {
    pub vendors: Vec<Vendor>,
    pub roles: Vec<Role>,
}

impl KindFilter {
    pub fn shows(&self, record: &Record) -> bool {
        (self.vendors.is_empty() || record.vendor.is_some_and(|v| self.vendors.contains(&v)))
            && (self.roles.is_empty() || record.role.is_some_and(|r| self.roles.contains(&r)))
    }
}

#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub container: Option<String>,
    /// A Kubernetes namespace, or one pod of one.
    pub namespace: Option<String>,
    pub pod: Option<PodQuery>,
    /// A subtree, relative to the cgroup2 mount.
    pub cgroup: Option<PathBuf>,
    pub pid: Option<u32>,
    pub comm: Option<String>,
    pub device: Option<DeviceFilter>,
    pub kinds: KindFilter,
}

impl Filter {
    pub fn accepts(&self, record: &Record) -> bool {
        let a = &record.access;
        self.pid.is_none_or(|pid| a.pid == pid)
            && self
                .comm
                .as_deref()
                .is_none_or(|comm| a.comm == comm.as_bytes())
            && self
                .container
                .as_deref()
                .is_none_or(|query| matches(&record.container, query))
            && self
                .namespace
                .as_deref()
                .is_none_or(|ns| record.container.namespace.as_deref() == Some(ns))
            && self
                .pod
                .as_ref()
                .is_none_or(|query| query.holds(&record.container))
            && self.cgroup.as_deref().is_none_or(|root| {
                record
                    .cgroup
                    .as_deref()
                    .is_some_and(|c| c.starts_with(root))
            })
            && self.device.as_ref().is_none_or(|d| d.accepts(record))
            && self.kinds.shows(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pod_is_namespace_slash_name() {
        assert_eq!(
            PodQuery::parse("ml-team/train-0"),
            Ok(PodQuery {
                namespace: "ml-team".into(),
                pod: "train-0".into()
            })
        );
        for bad in ["train-0", "/train-0", "ml-team/", "a/b/c"] {
            assert!(PodQuery::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn namespace_and_pod_filters_pass_that_pods_containers_only() {
        use std::rc::Rc;

        use crate::{
            analysis::test_support::record,
            model::{
                access::Verdict,
                container::{Container, Runtime},
                rendered::Rendered,
            },
        };
        let in_pod = |namespace: &str, pod: &str| {
            let mut r = record(
                "/kubepods",
                "/dev/nvidia0",
                195,
                0,
                Verdict::DeniedByBpfPolicy,
                -1,
            );
            r.container = Rc::new(Rendered::new(Container {
                runtime: Runtime::Containerd,
                id: "0".repeat(64),
                name: Some("trainer".into()),
                pod_uid: None,
                namespace: Some(namespace.into()),
                pod: Some(pod.into()),
                cgroup: "/kubepods".into(),
            }));
            r
        };
        let pod = Filter {
            pod: Some(PodQuery::parse("ml/train-0").unwrap()),
            ..Filter::default()
        };
        assert!(pod.accepts(&in_pod("ml", "train-0")));
        assert!(!pod.accepts(&in_pod("ml", "train-1")));
        assert!(!pod.accepts(&in_pod("other", "train-0")));
        let namespace = Filter {
            namespace: Some("ml".into()),
            ..Filter::default()
        };
        assert!(namespace.accepts(&in_pod("ml", "train-1")));
        assert!(!namespace.accepts(&in_pod("other", "train-0")));
        let plain = record(
            "/lxc/200",
            "/dev/nvidia0",
            195,
            0,
            Verdict::DeniedByBpfPolicy,
            -1,
        );
        assert!(!namespace.accepts(&plain) && !pod.accepts(&plain));
    }

    #[test]
    fn parses_device_filters() {
        assert_eq!(
            DeviceFilter::parse("nvidia-uvm"),
            Ok(DeviceFilter::Name("nvidia-uvm".into()))
        );
        assert_eq!(DeviceFilter::parse("511"), Ok(DeviceFilter::Major(511)));
        assert_eq!(
            DeviceFilter::parse("195:255"),
            Ok(DeviceFilter::Number(195, 255))
        );
        assert!(DeviceFilter::parse("195:x").is_err());
        assert_eq!(
            DeviceFilter::parse("195:255").map(|d| d.major()),
            Ok(Some(195))
        );
    }
}
