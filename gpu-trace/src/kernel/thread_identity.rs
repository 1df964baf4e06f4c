//! The tracepoints that keep a thread's folded key honest (gpu-trace-ebpf's
//! thread_identity.rs and fold.rs): a rename, a move to another cgroup or
//! an exit anywhere bumps one generation, and a repeat counts under its
//! thread's remembered key only while the generation is the one it was
//! made under. None of them is a syscall tracepoint.

use anyhow::Context;
use aya::{
    maps::Array,
    programs::{trace_point::TracePointLink, TracePoint},
    Ebpf,
};
use gpu_trace_common::{map, program};

use crate::kernel::device_hook::program_mut;

/// Attaches the generation's program to all three tracepoints, then starts
/// the generation at 1, which lets repeats take the short way. Anything
/// refused leaves the generation at 0: every repeat is then decided the
/// long way (its cgroup and command name read), as it was before.
pub fn watch(ebpf: &mut Ebpf, links: &mut Vec<TracePointLink>) -> anyhow::Result<()> {
    let tracepoint: &mut TracePoint = program_mut(ebpf, program::IDENTITY_CHANGED)?;
    tracepoint
        .load()
        .with_context(|| format!("loading {}", program::IDENTITY_CHANGED))?;
    let mut attached = Vec::new();
    for (category, event) in program::IDENTITY_TRACEPOINTS {
        match tracepoint.attach(category, event) {
            Ok(id) => attached.push(id),
            Err(e) => {
                // Two of three would bump for nothing: none stays.
                for id in attached {
                    let _ = tracepoint.detach(id);
                }
                return Err(e).with_context(|| format!("attaching to {category}:{event}"));
            }
        }
    }
    for id in attached {
        links.push(tracepoint.take_link(id)?);
    }
    let mut generation: Array<_, u64> = Array::try_from(
        ebpf.map_mut(map::IDENTITY_GENERATION)
            .with_context(|| format!("map {} missing", map::IDENTITY_GENERATION))?,
    )?;
    generation.set(0, 1, 0)?;
    Ok(())
}
