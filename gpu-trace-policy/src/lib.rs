//! cgroup device policies without a kernel: the BPF instruction codec, an
//! evaluator of device programs, cgroup v1 devices.list rules, and the
//! device query they all answer. std only, no aya, no I/O: unit tests and
//! the fuzz target need no BPF toolchain and no privileges.

pub mod answer;
pub mod evaluate;
pub mod insn;
pub mod query;
pub mod v1_rules;

pub use answer::{combined_answer, Answer};
pub use evaluate::{evaluate, CannotEvaluate, Outcome, STEP_LIMIT};
pub use insn::Insn;
pub use query::{access_bits, access_letters, DeviceQuery, ACCESS_LETTERS};
pub use v1_rules::{DevicesList, V1Answer};
