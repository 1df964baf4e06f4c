//! The tracepoints that keep a thread's folded key honest (gpu-trace-ebpf's
//! thread_identity.rs and fold.rs): a rename, a move to another cgroup or
//! an exit anywhere bumps one generation, and a repeat counts under its
//! thread's remembered key only while the generation is the one it was
//! made under. None of them is a syscall tracepoint, and all three are
//! raw tracepoints, whose detach does not wait out the tracepoints' grace
//! periods as a trace event's does.

use anyhow::Context;
use aya::{maps::Array, Ebpf};
use gpu_trace_common::{map, program};

use crate::kernel::attach::{attach_raw_tracepoint, TraceLink};

/// Attaches the generation's program to all three tracepoints, then starts
/// the generation at 1, which lets repeats take the short way. Anything
/// refused leaves the generation at 0: every repeat is then decided the
/// long way (its cgroup and command name read), as it was before.
pub fn watch(ebpf: &mut Ebpf, links: &mut Vec<TraceLink>) -> anyhow::Result<()> {
    // On any error none stays (`attached` is dropped, and with it the
    // links): two of three, or three with the generation left at 0, would
    // run for nothing.
    let mut attached = Vec::new();
    for name in program::IDENTITY_TRACEPOINTS {
        attached.push(attach_raw_tracepoint(
            ebpf,
            program::IDENTITY_CHANGED,
            name,
        )?);
    }
    let mut generation: Array<_, u64> = Array::try_from(
        ebpf.map_mut(map::IDENTITY_GENERATION)
            .with_context(|| format!("map {} missing", map::IDENTITY_GENERATION))?,
    )?;
    generation.set(0, 1, 0)?;
    links.extend(attached);
    Ok(())
}
