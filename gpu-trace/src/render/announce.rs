//! The start-up lines of watch and run: which hooks are active, which were
//! refused and what stands in for them, and the "ready" line scripts wait for.

use crate::kernel::tracer::{Tracer, TracerConfig};

/// Says once which hooks are active (and which were refused, with what
/// stands in for them); the last line tells scripts the tracer is ready.
pub fn announce(tracer: &Tracer, config: &TracerConfig) {
    for note in tracer.notes() {
        eprintln!("gpu-trace: {note}");
    }
    for line in hook_lines(tracer, Hooks::All) {
        eprintln!("gpu-trace: {line}");
    }
    let what = if config.all_devices {
        "every device".to_string()
    } else {
        let list: Vec<String> = config.majors.iter().map(u32::to_string).collect();
        format!("char majors {}", list.join(", "))
    };
    let which = if config.report_allowed {
        "all accesses"
    } else {
        "denied accesses"
    };
    eprintln!(
        "gpu-trace: ready: watching {which} to {what}; {}",
        tracer.open_route_summary()
    );
}

/// Which hooks to speak of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hooks {
    /// Every hook, active or refused, and where verdicts come from.
    All,
    /// Only what the trace lacks: a device hook replaced by another is not news.
    Missing,
}

/// "hook active: NAME", "hook refused: NAME: WHY", "verdict source: ...".
pub fn hook_lines(tracer: &Tracer, which: Hooks) -> Vec<String> {
    let mut lines: Vec<String> = tracer
        .hooks()
        .iter()
        .filter(|hook| which == Hooks::All || (hook.refused.is_some() && !hook.stood_in_for))
        .map(|hook| match &hook.refused {
            None => format!("hook active: {}", hook.name),
            Some(why) => format!("hook refused: {}: {why}", hook.name),
        })
        .collect();
    if which == Hooks::All {
        lines.push(format!(
            "verdict source: {}",
            tracer.verdict_source().describe()
        ));
    }
    lines
}
