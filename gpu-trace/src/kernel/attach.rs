//! What is attached: each hook's state as the user is told it, and the one
//! way a tracepoint program is loaded and attached.

use anyhow::Context;
use aya::{
    programs::{
        raw_trace_point::RawTracePointLink, trace_point::TracePointLink, RawTracePoint, TracePoint,
    },
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

/// A tracepoint program's link, ours to own until the tracer goes.
pub enum TraceLink {
    /// A trace event (perf): the record's fields by offset. Its detach
    /// waits out the tracepoints' grace periods, about 75 ms here.
    Event(TracePointLink),
    /// A raw tracepoint: the call's arguments, and a detach that waits out
    /// no grace periods (at most one, where other programs share the
    /// tracepoint; the kernel frees the program after one, in the background).
    Raw(RawTracePointLink),
}

/// Loads `program` and attaches it to the trace event `category:event`.
pub fn attach_tracepoint(
    ebpf: &mut Ebpf,
    program: &str,
    category: &str,
    event: &str,
) -> anyhow::Result<TraceLink> {
    let tracepoint: &mut TracePoint = program_mut(ebpf, program)?;
    tracepoint
        .load()
        .with_context(|| format!("loading {program}"))?;
    let id = tracepoint
        .attach(category, event)
        .with_context(|| format!("attaching to {category}:{event}"))?;
    Ok(TraceLink::Event(tracepoint.take_link(id)?))
}

/// Loads `program` (once) and attaches it to the raw tracepoint `name`.
pub fn attach_raw_tracepoint(
    ebpf: &mut Ebpf,
    program: &str,
    name: &str,
) -> anyhow::Result<TraceLink> {
    let tracepoint: &mut RawTracePoint = program_mut(ebpf, program)?;
    if tracepoint.fd().is_err() {
        tracepoint
            .load()
            .with_context(|| format!("loading {program}"))?;
    }
    let id = tracepoint
        .attach(name)
        .with_context(|| format!("attaching to the raw tracepoint {name}"))?;
    Ok(TraceLink::Raw(tracepoint.take_link(id)?))
}

/// Takes map `name` out of the loaded object, to be read from here on.
pub fn take_map(ebpf: &mut aya::Ebpf, name: &str) -> anyhow::Result<aya::maps::Map> {
    use anyhow::Context;
    ebpf.take_map(name)
        .with_context(|| format!("map {name} missing from the eBPF object"))
}
