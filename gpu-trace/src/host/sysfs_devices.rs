//! What sysfs says of a char device: the PCI vendor id and the kernel
//! driver behind /sys/dev/char/MAJ:MIN/device (DRM and accel nodes are
//! every vendor's, so this is where their vendor comes from), and for an
//! RDMA node the NIC it belongs to.

use std::{
    fs,
    path::{Path, PathBuf},
};

use crate::model::{
    nic::{is_plain_name, RdmaNic},
    vendor::DeviceFacts,
};

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

/// The NIC behind an RDMA node (uverbsN, umadN): sysfs's class entry for
/// the node names its RDMA device; the device's first port names the
/// network interface (RoCE and Soft-RoCE), else Soft-RoCE's `parent`, else
/// the PCI device's own interface.
pub fn rdma_nic(major: u32, minor: u32) -> Option<RdmaNic> {
    rdma_nic_under(Path::new("/sys"), major, minor)
}

fn rdma_nic_under(sys: &Path, major: u32, minor: u32) -> Option<RdmaNic> {
    let node = sys.join(format!("dev/char/{major}:{minor}"));
    let rdma_device = plain_name_in(&node.join("ibdev"))?;
    let device = sys.join("class/infiniband").join(&rdma_device);
    let netdev = plain_name_in(&device.join("ports/1/gid_attrs/ndevs/0"))
        .or_else(|| plain_name_in(&device.join("parent")))
        .or_else(|| {
            // A NIC has one interface or a few: the first by name.
            fs::read_dir(device.join("device/net"))
                .ok()?
                .filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|name| is_plain_name(name))
                .min()
        });
    Some(RdmaNic {
        rdma_device,
        netdev,
    })
}

/// A one-line sysfs file's name, if it is a plain one.
fn plain_name_in(file: &Path) -> Option<String> {
    let text = fs::read_to_string(file).ok()?;
    let name = text.trim();
    is_plain_name(name).then(|| name.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(root: &Path, file: &str, text: &str) {
        let path = root.join(file);
        fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
        fs::write(path, text).expect("write");
    }

    #[test]
    fn a_verbs_node_names_its_rdma_device_and_interface() {
        let sys = tempfile::tempdir().expect("temp dir");
        let sys = sys.path();
        // Soft-RoCE on eth0, as its files read: the port's GID table names
        // the interface.
        write(sys, "dev/char/231:192/ibdev", "rxe0\n");
        write(
            sys,
            "class/infiniband/rxe0/ports/1/gid_attrs/ndevs/0",
            "eth0\n",
        );
        assert_eq!(
            rdma_nic_under(sys, 231, 192),
            Some(RdmaNic {
                rdma_device: "rxe0".into(),
                netdev: Some("eth0".into())
            })
        );
        // A PCI NIC whose GID table says nothing: its own interface.
        write(sys, "dev/char/231:193/ibdev", "mlx5_0\n");
        fs::create_dir_all(sys.join("class/infiniband/mlx5_0/device/net/ens1f1np1")).unwrap();
        fs::create_dir_all(sys.join("class/infiniband/mlx5_0/device/net/ens1f0np0")).unwrap();
        assert_eq!(
            rdma_nic_under(sys, 231, 193).and_then(|n| n.netdev),
            Some("ens1f0np0".into())
        );
        // A name no line should show, and no node at all.
        write(sys, "dev/char/231:194/ibdev", "rxe1\n");
        write(sys, "class/infiniband/rxe1/parent", "e\u{1b}[31mth0\n");
        assert_eq!(
            rdma_nic_under(sys, 231, 194),
            Some(RdmaNic {
                rdma_device: "rxe1".into(),
                netdev: None
            })
        );
        assert_eq!(rdma_nic_under(sys, 231, 195), None);
    }
}
