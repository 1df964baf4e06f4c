//! What NVIDIA's device nodes are called, and which driver owns which major.

/// The NVIDIA frontend's fixed char major (nvidiactl, nvidia0, ...).
pub const NVIDIA_FRONTEND_MAJOR: u32 = 195;

/// NVIDIA drivers whose char majors are assigned at module load time.
pub const NVIDIA_DYNAMIC_DRIVERS: [&str; 4] = [
    "nvidia-uvm",
    "nvidia-caps",
    "nvidia-nvswitch",
    "nvidia-nvlink",
];

/// The device nodes NVIDIA's drivers create, by what they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NvidiaNode {
    Ctl,
    Modeset,
    Gpu(u32),
    Uvm,
    UvmTools,
    Cap(u32),
    NvswitchCtl,
    Nvswitch(u32),
    Nvlink,
}

impl NvidiaNode {
    /// From the driver that owns the major (per /proc/devices) and the minor.
    pub fn from_device(driver: &str, minor: u32) -> Option<Self> {
        Some(match (driver, minor) {
            ("nvidia-frontend" | "nvidia", 255) => NvidiaNode::Ctl,
            ("nvidia-frontend" | "nvidia", 254) => NvidiaNode::Modeset,
            ("nvidia-frontend" | "nvidia", n) => NvidiaNode::Gpu(n),
            ("nvidia-uvm", 1) => NvidiaNode::UvmTools,
            ("nvidia-uvm", _) => NvidiaNode::Uvm,
            ("nvidia-caps", n) => NvidiaNode::Cap(n),
            ("nvidia-nvswitch", 255) => NvidiaNode::NvswitchCtl,
            ("nvidia-nvswitch", n) => NvidiaNode::Nvswitch(n),
            ("nvidia-nvlink", _) => NvidiaNode::Nvlink,
            _ => return None,
        })
    }

    /// From the file name of a path, for nodes whose major no driver owns
    /// (a stale major, a driver not loaded, a stand-in in tests).
    pub fn from_path(path: &[u8]) -> Option<Self> {
        let name = std::str::from_utf8(path.rsplit(|&b| b == b'/').next()?).ok()?;
        let number = |prefix: &str| name.strip_prefix(prefix)?.parse::<u32>().ok();
        Some(match name {
            "nvidiactl" => NvidiaNode::Ctl,
            "nvidia-modeset" => NvidiaNode::Modeset,
            "nvidia-uvm" => NvidiaNode::Uvm,
            "nvidia-uvm-tools" => NvidiaNode::UvmTools,
            "nvidia-nvswitchctl" => NvidiaNode::NvswitchCtl,
            "nvidia-nvlink" => NvidiaNode::Nvlink,
            _ => {
                if let Some(n) = number("nvidia-cap") {
                    NvidiaNode::Cap(n)
                } else if let Some(n) = number("nvidia-nvswitch") {
                    NvidiaNode::Nvswitch(n)
                } else {
                    NvidiaNode::Gpu(number("nvidia")?)
                }
            }
        })
    }

    pub fn name(self) -> String {
        match self {
            NvidiaNode::Ctl => "nvidiactl".into(),
            NvidiaNode::Modeset => "nvidia-modeset".into(),
            NvidiaNode::Gpu(n) => format!("nvidia{n}"),
            NvidiaNode::Uvm => "nvidia-uvm".into(),
            NvidiaNode::UvmTools => "nvidia-uvm-tools".into(),
            NvidiaNode::Cap(n) => format!("nvidia-cap{n}"),
            NvidiaNode::NvswitchCtl => "nvidia-nvswitchctl".into(),
            NvidiaNode::Nvswitch(n) => format!("nvidia-nvswitch{n}"),
            NvidiaNode::Nvlink => "nvidia-nvlink".into(),
        }
    }

    /// Where the node usually lives on the host.
    pub fn dev_path(self) -> String {
        match self {
            NvidiaNode::Cap(_) => format!("/dev/nvidia-caps/{}", self.name()),
            _ => format!("/dev/{}", self.name()),
        }
    }

    /// The driver name in /proc/devices (and in systemd's `char-NAME`).
    pub fn driver(self) -> &'static str {
        match self {
            NvidiaNode::Ctl | NvidiaNode::Modeset | NvidiaNode::Gpu(_) => "nvidia-frontend",
            NvidiaNode::Uvm | NvidiaNode::UvmTools => "nvidia-uvm",
            NvidiaNode::Cap(_) => "nvidia-caps",
            NvidiaNode::NvswitchCtl | NvidiaNode::Nvswitch(_) => "nvidia-nvswitch",
            NvidiaNode::Nvlink => "nvidia-nvlink",
        }
    }

    /// One node among many on its major (a GPU, the control node, a MIG
    /// capability, a switch): a fix allows its minor alone, never the
    /// major, which would hand over every other. uvm's and nvlink's majors
    /// serve one purpose each.
    pub fn is_one_of_many(self) -> bool {
        !matches!(
            self,
            NvidiaNode::Uvm | NvidiaNode::UvmTools | NvidiaNode::Nvlink
        )
    }

    /// The minor the driver gives this kind of node, where it is fixed by
    /// the kind (nvidiaN is 195:N); None where the driver hands it out (a
    /// MIG capability's is in /proc/driver/nvidia-caps).
    pub fn fixed_minor(self) -> Option<u32> {
        match self {
            NvidiaNode::Ctl | NvidiaNode::NvswitchCtl => Some(255),
            NvidiaNode::Modeset => Some(254),
            NvidiaNode::Gpu(n) | NvidiaNode::Nvswitch(n) => Some(n),
            NvidiaNode::Uvm => Some(0),
            NvidiaNode::UvmTools => Some(1),
            NvidiaNode::Cap(_) | NvidiaNode::Nvlink => None,
        }
    }

    /// The driver's own helper that makes this node on the host, with the
    /// driver's mode and group.
    pub fn maker(self) -> String {
        match self {
            NvidiaNode::Uvm | NvidiaNode::UvmTools => "nvidia-modprobe -u -c=0".into(),
            NvidiaNode::Modeset => "nvidia-modprobe -m".into(),
            NvidiaNode::Gpu(n) => format!("nvidia-modprobe -c={n}"),
            NvidiaNode::Ctl => "nvidia-modprobe -c=0".into(),
            NvidiaNode::Cap(_) => {
                "nvidia-modprobe -f /proc/driver/nvidia/capabilities/... (the capability's file)"
                    .into()
            }
            NvidiaNode::NvswitchCtl | NvidiaNode::Nvswitch(_) | NvidiaNode::Nvlink => {
                "nvidia-modprobe".into()
            }
        }
    }

    /// Its major is handed out at module load time, not fixed like 195.
    pub fn has_dynamic_major(self) -> bool {
        self.driver() != "nvidia-frontend"
    }
}

/// The driver that owns a char major: the one /proc/devices names, or the
/// NVIDIA frontend for 195, whose major is fixed even with no driver loaded.
pub fn major_owner(driver: Option<&str>, major: u32) -> Option<&str> {
    match driver {
        Some(name) => Some(name),
        None if major == NVIDIA_FRONTEND_MAJOR => Some("nvidia-frontend"),
        None => None,
    }
}

/// The node name a driver gives a minor, e.g. "nvidia-uvm" or "nvidia0";
/// for drivers outside NVIDIA's, the driver's own name.
pub fn node_name(driver: Option<&str>, major: u32, minor: u32) -> Option<String> {
    let driver = major_owner(driver, major)?;
    Some(
        NvidiaNode::from_device(driver, minor).map_or_else(|| driver.to_string(), NvidiaNode::name),
    )
}
