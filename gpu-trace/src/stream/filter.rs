//! What `watch` shows, narrowed down by the user: a container, a cgroup
//! subtree, a process, a command, a device.

use std::path::PathBuf;

use crate::{
    cgroup::identity::matches,
    model::{record::Record, vendor::Vendor},
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

/// `--vendor`: none given shows every device; else only those vendors'.
pub fn vendor_shown(vendors: &[Vendor], record: &Record) -> bool {
    vendors.is_empty() || record.vendor.is_some_and(|v| vendors.contains(&v))
}

#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub container: Option<String>,
    /// A subtree, relative to the cgroup2 mount.
    pub cgroup: Option<PathBuf>,
    pub pid: Option<u32>,
    pub comm: Option<String>,
    pub device: Option<DeviceFilter>,
    /// Only these vendors' devices; empty: every device.
    pub vendors: Vec<Vendor>,
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
            && self.cgroup.as_deref().is_none_or(|root| {
                record
                    .cgroup
                    .as_deref()
                    .is_some_and(|c| c.starts_with(root))
            })
            && self.device.as_ref().is_none_or(|d| d.accepts(record))
            && (self.vendors.is_empty() || record.vendor.is_some_and(|v| self.vendors.contains(&v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
