//! The benchmark's cuts (gpu_trace_common::bench_cut): the device hook's
//! report returns after the step userspace names, so that the kernel's
//! run-time statistics time the steps one by one. The setting is a
//! read-only global, 0 outside the benchmark: the verifier knows it and
//! removes every cut from the loaded program, leaving a load where one was.

use aya_ebpf::Global;

// Patched by the loader by symbol name (gpu_trace_common::global::BENCH_CUT).
#[unsafe(no_mangle)]
static BENCH_CUT: Global<u8> = Global::new(0);

/// True when the benchmark cuts the report right after `step`.
#[inline(always)]
pub fn after(step: u8) -> bool {
    BENCH_CUT.load() == step
}
