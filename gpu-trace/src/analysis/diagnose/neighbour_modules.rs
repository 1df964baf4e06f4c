//! The devices next to the GPU by the paths their nodes have, for a node
//! whose major no driver has (driver-not-loaded) or that is not there at
//! all (node-missing): /proc/devices has no name to go by, the path is all
//! there is.

use crate::model::vendor::Role;

/// What a node under `prefix` needs on the host.
pub(super) struct NeighbourModule {
    prefix: &'static str,
    pub role: Role,
    /// The module that registers its major, as a sentence names it.
    pub module: &'static str,
    /// How to load it.
    pub load: &'static str,
}

/// The first whose prefix fits wins: umad and issm before the verbs.
const MODULES: [NeighbourModule; 7] = [
    NeighbourModule {
        prefix: "/dev/infiniband/umad",
        role: Role::Rdma,
        module: "ib_umad",
        load: "`modprobe ib_umad`",
    },
    NeighbourModule {
        prefix: "/dev/infiniband/issm",
        role: Role::Rdma,
        module: "ib_umad",
        load: "`modprobe ib_umad`",
    },
    NeighbourModule {
        prefix: "/dev/infiniband/",
        role: Role::Rdma,
        module: "ib_uverbs",
        load: "`modprobe ib_uverbs` with the NIC's RDMA driver (`mlx5_ib`, `irdma`, `bnxt_re`, ...; `rdma link` lists the RDMA devices the kernel has)",
    },
    NeighbourModule {
        prefix: "/dev/nvidia-caps-imex-channels/",
        role: Role::Imex,
        module: "the nvidia module (it registers the IMEX channels)",
        load: "`modprobe nvidia`",
    },
    NeighbourModule {
        prefix: "/dev/gdrdrv",
        role: Role::Gpudirect,
        module: "gdrdrv (gdrcopy's module)",
        load: "`modprobe gdrdrv` (gdrcopy's gdrdrv-dkms package builds it)",
    },
    NeighbourModule {
        prefix: "/dev/nvidia-fs",
        role: Role::Gpudirect,
        module: "nvidia-fs (GPUDirect Storage's module)",
        load: "`modprobe nvidia-fs`",
    },
    NeighbourModule {
        prefix: "/dev/vfio/",
        role: Role::Vfio,
        module: "vfio",
        load: "`modprobe vfio-pci`, with the device bound to it (`driverctl set-override PCI_ADDRESS vfio-pci`)",
    },
];

/// A device next to the GPU by the path it is opened at.
pub(super) fn by_path(path: &str) -> Option<&'static NeighbourModule> {
    MODULES.iter().find(|m| path.starts_with(m.prefix))
}
