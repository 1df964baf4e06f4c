//! Which GPU a device minor is, as a person knows it: the NVIDIA driver's
//! /proc/driver/nvidia/gpus/<PCI bus id>/information gives each GPU's UUID,
//! PCI bus id and "Device Minor" (the N of /dev/nvidiaN, which is not
//! nvidia-smi's index); /proc/driver/nvidia-caps/mig-minors says which GPU
//! instance or compute instance each MIG capability node
//! (/dev/nvidia-caps/nvidia-capM) stands for.
//!
//! The files are the driver's (procfs), never a tenant's; their directory
//! can be moved with GPU_TRACE_PROC_DRIVER, in root's environment only (for
//! a copy saved from another host, and for tests). Read with bounds all the
//! same: so many GPUs, so many bytes a file, so many lines.

use std::{collections::BTreeMap, fs, io::Read, path::Path, rc::Rc};

use crate::model::{
    gpu::{GpuIdentity, MigCapability},
    rendered::Rendered,
};

/// Read the driver's files under this directory instead of /proc/driver.
pub const PROC_DRIVER_ENV: &str = "GPU_TRACE_PROC_DRIVER";
/// More GPUs than any host has; the rest are left out.
const MAX_GPUS: usize = 256;
/// An information file is a dozen short lines.
const MAX_INFORMATION_BYTES: u64 = 4096;
/// mig-minors lists every possible instance: 8 GPUs' worth is ~2 000 lines.
const MAX_MIG_MINORS_BYTES: u64 = 256 * 1024;

/// The host's GPUs and MIG capabilities, as last read.
#[derive(Debug, Default)]
pub struct NvidiaGpus {
    by_minor: BTreeMap<u32, Rc<Rendered<GpuIdentity>>>,
    caps: BTreeMap<u32, Rc<Rendered<MigCapability>>>,
}

impl NvidiaGpus {
    /// From /proc/driver (or PROC_DRIVER_ENV); empty where the NVIDIA
    /// driver is not loaded.
    pub fn read() -> Self {
        let dir = std::env::var_os(PROC_DRIVER_ENV).unwrap_or_else(|| "/proc/driver".into());
        Self::read_from(Path::new(&dir))
    }

    pub fn read_from(proc_driver: &Path) -> Self {
        let mut gpus = Self::default();
        if let Ok(dirs) = fs::read_dir(proc_driver.join("nvidia/gpus")) {
            for dir in dirs.flatten().take(MAX_GPUS) {
                let Some(text) =
                    read_bounded(&dir.path().join("information"), MAX_INFORMATION_BYTES)
                else {
                    continue;
                };
                if let Some(gpu) = parse_information(&text) {
                    gpus.by_minor.insert(gpu.minor, Rc::new(Rendered::new(gpu)));
                }
            }
        }
        let mig_minors = proc_driver.join("nvidia-caps/mig-minors");
        if let Some(text) = read_bounded(&mig_minors, MAX_MIG_MINORS_BYTES) {
            for (minor, capability) in parse_mig_minors(&text) {
                gpus.caps.insert(minor, Rc::new(Rendered::new(capability)));
            }
        }
        gpus
    }

    /// The GPU whose /dev/nvidiaN has minor `minor`.
    pub fn gpu(&self, minor: u32) -> Option<&Rc<Rendered<GpuIdentity>>> {
        self.by_minor.get(&minor)
    }

    /// What the capability node of minor `minor` stands for.
    pub fn capability(&self, minor: u32) -> Option<&Rc<Rendered<MigCapability>>> {
        self.caps.get(&minor)
    }

    pub fn is_empty(&self) -> bool {
        self.by_minor.is_empty() && self.caps.is_empty()
    }
}

/// At most `limit` bytes of the file, as text; None when it cannot be read
/// or is longer (not the driver's file, then).
fn read_bounded(path: &Path, limit: u64) -> Option<String> {
    let mut text = String::new();
    fs::File::open(path)
        .ok()?
        .take(limit + 1)
        .read_to_string(&mut text)
        .ok()?;
    (text.len() as u64 <= limit).then_some(text)
}

/// "Key:<spaces or tabs>value" lines: the UUID, bus location and minor.
fn parse_information(text: &str) -> Option<GpuIdentity> {
    let field = |name: &str| {
        text.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key.trim() == name).then(|| value.trim())
        })
    };
    let uuid = field("GPU UUID")?;
    let pci_bus_id = field("Bus Location")?;
    // What the driver writes: GPU-<hex and dashes>, and a PCI address.
    let plain = |s: &str, extra: &[char]| {
        !s.is_empty()
            && s.len() <= 64
            && s.chars()
                .all(|c| c.is_ascii_hexdigit() || extra.contains(&c))
    };
    let uuid_ok = uuid
        .strip_prefix("GPU-")
        .is_some_and(|rest| plain(rest, &['-']));
    if !uuid_ok || !plain(pci_bus_id, &[':', '.']) {
        return None;
    }
    Some(GpuIdentity {
        uuid: uuid.to_string(),
        pci_bus_id: pci_bus_id.to_string(),
        minor: field("Device Minor")?.parse().ok()?,
    })
}

/// "config 1", "monitor 2", "gpu0/gi1/access 21", "gpu0/gi1/ci0/access 22".
fn parse_mig_minors(text: &str) -> impl Iterator<Item = (u32, MigCapability)> + '_ {
    text.lines().filter_map(|line| {
        let (name, minor) = line.trim().split_once(char::is_whitespace)?;
        let minor = minor.trim().parse().ok()?;
        let host_wide = |capability| MigCapability {
            capability,
            gpu: None,
            gi: None,
            ci: None,
        };
        let capability = match name {
            "config" => host_wide("config"),
            "monitor" => host_wide("monitor"),
            _ => instance(name)?,
        };
        Some((minor, capability))
    })
}

/// gpu<N>/gi<G>/access or gpu<N>/gi<G>/ci<C>/access.
fn instance(name: &str) -> Option<MigCapability> {
    let parts: Vec<&str> = name.split('/').collect();
    let number = |part: &str, prefix: &str| part.strip_prefix(prefix)?.parse::<u32>().ok();
    match parts.as_slice() {
        [gpu, gi, "access"] => Some(MigCapability {
            capability: "gpu-instance",
            gpu: Some(number(gpu, "gpu")?),
            gi: Some(number(gi, "gi")?),
            ci: None,
        }),
        [gpu, gi, ci, "access"] => Some(MigCapability {
            capability: "compute-instance",
            gpu: Some(number(gpu, "gpu")?),
            gi: Some(number(gi, "gi")?),
            ci: Some(number(ci, "ci")?),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An information file as the 550-series driver writes it.
    const INFORMATION: &str = "Model: \t\t NVIDIA A100-SXM4-40GB\nIRQ:   \t\t 42\nGPU UUID: \t\t GPU-6f1b2c3d-aaaa-bbbb-cccc-0123456789ab\nVideo BIOS: \t\t 92.00.45.00.03\nBus Type: \t\t PCIe\nDMA Size: \t\t 47 bits\nDMA Mask: \t\t 0x7fffffffffff\nBus Location: \t\t 0000:18:00.0\nDevice Minor: \t\t 3\nGPU Excluded:\t\t No\n";

    fn tree() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let gpu = root.path().join("nvidia/gpus/0000:18:00.0");
        fs::create_dir_all(&gpu).unwrap();
        fs::write(gpu.join("information"), INFORMATION).unwrap();
        let caps = root.path().join("nvidia-caps");
        fs::create_dir_all(&caps).unwrap();
        fs::write(
            caps.join("mig-minors"),
            "config 1\nmonitor 2\ngpu3/gi1/access 30\ngpu3/gi1/ci0/access 31\nnonsense\n",
        )
        .unwrap();
        root
    }

    #[test]
    fn a_minor_is_its_gpus_uuid_and_bus_id() {
        let root = tree();
        let gpus = NvidiaGpus::read_from(root.path());
        let gpu = gpus.gpu(3).expect("minor 3");
        assert_eq!(gpu.uuid, "GPU-6f1b2c3d-aaaa-bbbb-cccc-0123456789ab");
        assert_eq!(gpu.pci_bus_id, "0000:18:00.0");
        assert_eq!(
            gpu.json().get(),
            r#"{"uuid":"GPU-6f1b2c3d-aaaa-bbbb-cccc-0123456789ab","pci_bus_id":"0000:18:00.0","minor":3}"#
        );
        assert!(gpus.gpu(0).is_none());
    }

    #[test]
    fn capability_minors_are_their_mig_instances() {
        let root = tree();
        let gpus = NvidiaGpus::read_from(root.path());
        assert_eq!(gpus.capability(1).unwrap().capability, "config");
        let ci = gpus.capability(31).unwrap();
        assert_eq!((ci.gpu, ci.gi, ci.ci), (Some(3), Some(1), Some(0)));
        assert_eq!(
            ci.json().get(),
            r#"{"capability":"compute-instance","gpu":3,"gi":1,"ci":0}"#
        );
        assert_eq!(gpus.capability(30).unwrap().ci, None);
        assert!(gpus.capability(32).is_none());
    }

    #[test]
    fn files_that_are_not_the_drivers_are_left_out() {
        let root = tree();
        let gpu = root.path().join("nvidia/gpus/0000:18:00.0/information");
        // A UUID that is not one, and a file far longer than the driver's.
        fs::write(&gpu, INFORMATION.replace("GPU-6f1b", "\u{1b}[31mGPU-6f1b")).unwrap();
        assert!(NvidiaGpus::read_from(root.path()).gpu(3).is_none());
        fs::write(&gpu, INFORMATION.repeat(200)).unwrap();
        assert!(NvidiaGpus::read_from(root.path()).gpu(3).is_none());
        // No driver at all: nothing, and no error.
        assert!(NvidiaGpus::read_from(Path::new("/nonexistent")).is_empty());
    }
}
