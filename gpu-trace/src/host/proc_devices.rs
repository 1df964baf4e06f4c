//! Device majors and names: /proc/devices, and what NVIDIA's nodes are called.

use std::{collections::BTreeMap, fs, io};

use crate::model::{
    node::{NVIDIA_DYNAMIC_DRIVERS, NVIDIA_FRONTEND_MAJOR},
    vendor::{ACCEL_MAJOR, DRM_MAJOR, DYNAMIC_ACCELERATOR_DRIVERS, NEIGHBOUR_DRIVERS},
};

/// The char-device section of /proc/devices: major -> driver name.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct CharMajors(BTreeMap<u32, String>);

/// Read majors from this file instead of /proc/devices: to diagnose against
/// a copy saved on another host or before a driver update, and for tests.
pub const PROC_DEVICES_ENV: &str = "GPU_TRACE_PROC_DEVICES";

impl CharMajors {
    /// Whether `read` reads a copy (PROC_DEVICES_ENV), not the kernel's list.
    pub fn read_is_a_copy() -> bool {
        std::env::var_os(PROC_DEVICES_ENV).is_some()
    }

    pub fn read() -> io::Result<Self> {
        let path = std::env::var_os(PROC_DEVICES_ENV).unwrap_or_else(|| "/proc/devices".into());
        Ok(Self::parse(&fs::read_to_string(path)?))
    }

    /// The running kernel's own list, whatever PROC_DEVICES_ENV says. Text
    /// without its "Character devices:" heading is not the kernel's (a file
    /// bound over it): an error, not a list in which no driver has a major.
    pub fn read_kernel() -> io::Result<Self> {
        Self::parse_kernel(&fs::read_to_string("/proc/devices")?)
    }

    fn parse_kernel(text: &str) -> io::Result<Self> {
        if !text.lines().any(|l| l.trim() == "Character devices:") {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "it has no \"Character devices:\" section",
            ));
        }
        Ok(Self::parse(text))
    }

    pub fn parse(text: &str) -> Self {
        let mut majors = BTreeMap::new();
        let mut in_char_section = false;
        for line in text.lines() {
            match line.trim() {
                "Character devices:" => in_char_section = true,
                "Block devices:" => in_char_section = false,
                entry if in_char_section => {
                    if let Some((major, name)) = entry.split_once(char::is_whitespace) {
                        if let Ok(major) = major.parse() {
                            // Several names can share a major (tty, ttyS): keep the first.
                            majors
                                .entry(major)
                                .or_insert_with(|| name.trim().to_string());
                        }
                    }
                }
                _ => {}
            }
        }
        Self(majors)
    }

    /// Every (major, driver name), lowest major first.
    pub fn iter(&self) -> impl Iterator<Item = (u32, &str)> {
        self.0.iter().map(|(&major, name)| (major, name.as_str()))
    }

    pub fn driver(&self, major: u32) -> Option<&str> {
        self.0.get(&major).map(String::as_str)
    }

    /// Whether a char driver of this name is registered (systemd resolves
    /// `DeviceAllow=char-NAME` against this list).
    pub fn has_driver(&self, name: &str) -> bool {
        self.0.values().any(|n| n == name)
    }

    pub fn is_registered(&self, major: u32) -> bool {
        self.0.contains_key(&major)
    }

    /// Majors to watch by default: the frontend's (even with no driver
    /// loaded) and every dynamic NVIDIA major registered now.
    pub fn nvidia_majors(&self) -> Vec<u32> {
        let dynamic = self
            .0
            .iter()
            .filter(|(_, name)| NVIDIA_DYNAMIC_DRIVERS.contains(&name.as_str()))
            .map(|(&major, _)| major);
        std::iter::once(NVIDIA_FRONTEND_MAJOR)
            .chain(dynamic)
            .collect()
    }

    /// Majors watched by default: NVIDIA's, the other accelerators' dynamic
    /// ones (AMD's kfd, Habana's legacy driver) and the devices next to the
    /// GPU (RDMA, IMEX, GPUDirect, VFIO) when registered, and the fixed DRM
    /// (226) and accel (261) majors every vendor shares.
    pub fn accelerator_majors(&self) -> Vec<u32> {
        let mut majors = self.nvidia_majors();
        let watched = |name: &str| {
            DYNAMIC_ACCELERATOR_DRIVERS.contains(&name)
                || NEIGHBOUR_DRIVERS.iter().any(|(n, ..)| *n == name)
        };
        majors.extend(
            self.0
                .iter()
                .filter(|(_, name)| watched(name))
                .map(|(&major, _)| major),
        );
        majors.extend([DRM_MAJOR, ACCEL_MAJOR]);
        majors.sort_unstable();
        majors.dedup();
        majors
    }

    /// A char major no driver uses, from the top of the dynamic range
    /// (511 first, as nvidia-uvm often gets), for stand-in devices.
    pub fn unused_dynamic_major(&self) -> Option<u32> {
        (384..=511).rev().find(|m| !self.is_registered(*m))
    }
}

/// Whether the nvidia_uvm module is loaded (it makes /dev/nvidia-uvm).
pub fn nvidia_uvm_loaded() -> bool {
    std::path::Path::new("/sys/module/nvidia_uvm").exists()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::node::{node_name, NvidiaNode};

    const PROC_DEVICES: &str = "\
Character devices:
  1 mem
  4 /dev/vc/0
  4 tty
195 nvidia-frontend
234 nvidia-caps
508 nvidia-nvswitch
510 nvidia-nvlink
511 nvidia-uvm

Block devices:
  7 loop
195 notachar
";

    #[test]
    fn parses_char_section_only() {
        let majors = CharMajors::parse(PROC_DEVICES);
        assert_eq!(majors.driver(511), Some("nvidia-uvm"));
        assert_eq!(majors.driver(4), Some("/dev/vc/0"));
        assert_eq!(majors.driver(7), None, "block majors are not char majors");
        assert_eq!(majors.driver(195), Some("nvidia-frontend"));
    }

    #[test]
    fn the_kernels_list_has_its_heading() {
        assert_eq!(
            CharMajors::parse_kernel(PROC_DEVICES)
                .expect("the kernel's")
                .driver(511),
            Some("nvidia-uvm")
        );
        for not_the_kernels in ["", "195 nvidia\n", "Block devices:\n  8 sd\n"] {
            assert!(
                CharMajors::parse_kernel(not_the_kernels).is_err(),
                "{not_the_kernels:?}"
            );
        }
    }

    #[test]
    fn accelerators_add_kfd_drm_and_accel() {
        let majors = CharMajors::parse(
            "Character devices:\n  1 mem\n195 nvidia\n226 drm\n261 accel\n509 nvidia-uvm\n511 kfd\n",
        );
        assert_eq!(majors.accelerator_majors(), vec![195, 226, 261, 509, 511]);
    }

    #[test]
    fn the_devices_next_to_the_gpu_are_watched_where_registered() {
        let majors = CharMajors::parse(
            "Character devices:\n 10 misc\n195 nvidia\n231 infiniband_verbs\n231 infiniband_mad\n235 vfio\n503 nvidia-fs\n504 gdrdrv\n505 nvidia-caps-imex-channels\n506 infiniband_verbs\n",
        );
        assert_eq!(
            majors.accelerator_majors(),
            vec![195, 226, 231, 235, 261, 503, 504, 505, 506]
        );
        // Not where their drivers are not registered.
        let plain = CharMajors::parse("Character devices:\n195 nvidia\n");
        assert_eq!(plain.accelerator_majors(), vec![195, 226, 261]);
    }

    #[test]
    fn default_watch_list_is_frontend_plus_dynamic_nvidia_majors() {
        let majors = CharMajors::parse(PROC_DEVICES);
        assert_eq!(majors.nvidia_majors(), vec![195, 234, 508, 510, 511]);
        assert_eq!(
            CharMajors::parse("Character devices:\n  1 mem\n").nvidia_majors(),
            vec![195]
        );
    }

    #[test]
    fn picks_an_unused_dynamic_major() {
        assert_eq!(
            CharMajors::parse(PROC_DEVICES).unused_dynamic_major(),
            Some(509)
        );
        assert_eq!(CharMajors::default().unused_dynamic_major(), Some(511));
    }

    #[test]
    fn names_nvidia_nodes() {
        let name = |d, maj, min| node_name(d, maj, min);
        assert_eq!(
            name(Some("nvidia-frontend"), 195, 255).as_deref(),
            Some("nvidiactl")
        );
        assert_eq!(name(None, 195, 254).as_deref(), Some("nvidia-modeset"));
        assert_eq!(name(None, 195, 3).as_deref(), Some("nvidia3"));
        assert_eq!(
            name(Some("nvidia-uvm"), 511, 0).as_deref(),
            Some("nvidia-uvm")
        );
        assert_eq!(
            name(Some("nvidia-uvm"), 511, 1).as_deref(),
            Some("nvidia-uvm-tools")
        );
        assert_eq!(
            name(Some("nvidia-caps"), 234, 2).as_deref(),
            Some("nvidia-cap2")
        );
        assert_eq!(name(Some("mem"), 1, 3).as_deref(), Some("mem"));
        assert_eq!(name(None, 511, 0), None, "no driver, no name");
    }

    #[test]
    fn recognises_nvidia_nodes_by_path() {
        let node = |p: &str| NvidiaNode::from_path(p.as_bytes());
        assert_eq!(node("/dev/nvidia-uvm"), Some(NvidiaNode::Uvm));
        assert_eq!(node("/tmp/x/nvidia-uvm-tools"), Some(NvidiaNode::UvmTools));
        assert_eq!(node("/dev/nvidiactl"), Some(NvidiaNode::Ctl));
        assert_eq!(node("/dev/nvidia3"), Some(NvidiaNode::Gpu(3)));
        assert_eq!(
            node("/dev/nvidia-caps/nvidia-cap2"),
            Some(NvidiaNode::Cap(2))
        );
        assert_eq!(node("/dev/nvidia-nvswitch1"), Some(NvidiaNode::Nvswitch(1)));
        assert_eq!(node("/dev/nvidia-modeset"), Some(NvidiaNode::Modeset));
        assert_eq!(node("/dev/nvidia"), None);
        assert_eq!(node("/dev/nvidiafoo"), None);
        assert_eq!(node("/dev/null"), None);
        assert_eq!(
            NvidiaNode::Cap(2).dev_path(),
            "/dev/nvidia-caps/nvidia-cap2"
        );
        assert!(NvidiaNode::Uvm.has_dynamic_major() && !NvidiaNode::Gpu(0).has_dynamic_major());
    }
}
