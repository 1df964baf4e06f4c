//! Which NIC an RDMA node belongs to, by the names a person knows: the RDMA
//! device (mlx5_0, rxe0) and the network interface it carries (eth0).

use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RdmaNic {
    pub rdma_device: String,
    /// None where the port has no network interface (InfiniBand without
    /// IPoIB) or sysfs does not say.
    pub netdev: Option<String>,
}

/// "mlx5_0 on ens1f0np0", or the RDMA device alone.
impl std::fmt::Display for RdmaNic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.netdev {
            Some(netdev) => write!(f, "{} on {netdev}", self.rdma_device),
            None => f.write_str(&self.rdma_device),
        }
    }
}

/// A name sysfs gives that a line may show as it is: a kernel device or
/// interface name has no reason to hold anything else, and one that does
/// (an interface a tenant renamed in its own namespace) is left out.
pub fn is_plain_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.:-@".contains(&b))
}
