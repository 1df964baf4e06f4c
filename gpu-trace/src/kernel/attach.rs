//! What is attached: each hook's state as the user is told it, and the one
//! way a tracepoint program is loaded and attached.

use anyhow::Context;
use aya::{
    programs::{trace_point::TracePointLink, TracePoint},
    Ebpf,
};

use crate::kernel::device_hook::program_mut;

/// A hook and whether it is in place.
#[derive(Debug, Clone)]
pub struct Hook {
    pub name: String,
    /// None when attached; otherwise why not, and what stands in for it.
    pub refused: Option<String>,
    /// Refused, but another device hook does the same job (with the same
    /// events): worth a line in watch's announcement, not in every `run`.
    pub stood_in_for: bool,
}

/// Loads `program` and attaches it to `category:event`; the link is ours to own.
pub fn attach_tracepoint(
    ebpf: &mut Ebpf,
    program: &str,
    category: &str,
    event: &str,
) -> anyhow::Result<TracePointLink> {
    let tracepoint: &mut TracePoint = program_mut(ebpf, program)?;
    tracepoint
        .load()
        .with_context(|| format!("loading {program}"))?;
    let id = tracepoint
        .attach(category, event)
        .with_context(|| format!("attaching to {category}:{event}"))?;
    Ok(tracepoint.take_link(id)?)
}

/// Takes map `name` out of the loaded object, to be read from here on.
pub fn take_map(ebpf: &mut aya::Ebpf, name: &str) -> anyhow::Result<aya::maps::Map> {
    use anyhow::Context;
    ebpf.take_map(name)
        .with_context(|| format!("map {name} missing from the eBPF object"))
}
