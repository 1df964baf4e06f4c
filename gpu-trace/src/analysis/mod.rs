//! From a typed access to a record that says who, which policy and why:
//! enrich (names), attribute (the policy that denied it), diagnose (the
//! root cause and its fix), in that order (`pipeline`).

pub mod access_check;
pub mod attribute;
pub mod cdi_check;
pub mod diagnose;
pub mod enrich;
pub mod gpu_allocation;
pub mod log_summary;
pub mod neighbour_check;
pub mod pipeline;
pub mod policy_age;
pub mod policy_source;
pub mod policy_writer;
#[cfg(test)]
pub(crate) mod test_support;
pub mod unit_rules;
pub mod vendor_check;
