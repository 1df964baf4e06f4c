//! What sysfs says of a char device: the PCI vendor id and the kernel
//! driver behind /sys/dev/char/MAJ:MIN/device. DRM and accel nodes are
//! every vendor's, so this is where their vendor comes from.

use std::{fs, path::PathBuf};

use crate::model::vendor::DeviceFacts;

pub fn device_facts(major: u32, minor: u32) -> DeviceFacts {
    let device = PathBuf::from(format!("/sys/dev/char/{major}:{minor}/device"));
    let pci_vendor = fs::read_to_string(device.join("vendor"))
        .ok()
        .and_then(|v| u16::from_str_radix(v.trim().trim_start_matches("0x"), 16).ok());
    let kernel_driver = fs::read_link(device.join("driver"))
        .ok()
        .and_then(|link| Some(link.file_name()?.to_string_lossy().into_owned()));
    DeviceFacts {
        pci_vendor,
        kernel_driver,
    }
}
