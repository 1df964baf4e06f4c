//! The combined answer of the device programs in force on a cgroup, in the
//! order the kernel runs them.

use crate::{
    evaluate::{evaluate, CannotEvaluate, Outcome},
    insn::Insn,
    query::DeviceQuery,
};

/// What the programs in force say about one access.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Every program allows it (or there is none).
    Allowed,
    /// This program (index into the programs asked) denies it; the first one
    /// that does, in the kernel's order. A denial is final whatever the others say.
    DeniedBy(usize),
    /// None denies, but this one cannot be evaluated.
    Unknown(usize, CannotEvaluate),
}

/// Asks each program in the kernel's order (the cgroup's own first).
pub fn combined_answer<'a>(
    programs: impl IntoIterator<Item = &'a [Insn]>,
    query: &DeviceQuery,
) -> Answer {
    let mut unknown = None;
    for (i, insns) in programs.into_iter().enumerate() {
        match evaluate(insns, query) {
            Ok(Outcome::Deny) => return Answer::DeniedBy(i),
            Ok(Outcome::Allow) => {}
            Err(why) => unknown = unknown.or(Some((i, why))),
        }
    }
    match unknown {
        Some((i, why)) => Answer::Unknown(i, why),
        None => Answer::Allowed,
    }
}
