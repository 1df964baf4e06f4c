//! Arbitrary instruction streams and contexts for the device-policy
//! evaluator: every run must end in allow, deny or a refusal — never a
//! panic, never an endless loop (the step limit bounds it).
#![no_main]

use libfuzzer_sys::fuzz_target;

// gpu-trace-policy is std only: the target builds it alone, without
// gpu-trace's eBPF programs.
use gpu_trace_policy::{evaluate, DeviceQuery, Insn};

fuzz_target!(|data: &[u8]| {
    let Some((head, code)) = data.split_first_chunk::<10>() else { return };
    let query = DeviceQuery {
        dev_type: u16::from_le_bytes([head[0], head[1]]),
        access: u16::from_le_bytes([head[2], head[3]]),
        major: u32::from_le_bytes([head[4], head[5], head[6], head[7]]),
        minor: u32::from(u16::from_le_bytes([head[8], head[9]])),
    };
    let insns: Vec<Insn> = code
        .chunks_exact(8)
        .map(|chunk| Insn::from_bytes(chunk.try_into().expect("8 bytes")))
        .collect();
    let _ = evaluate(&insns, &query);
});
