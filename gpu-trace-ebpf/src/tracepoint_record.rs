//! Reading a field of a tracepoint's record.

use aya_ebpf::{programs::TracePointContext, EbpfContext};

/// A field of the tracepoint's record, read straight from the context: the
/// verifier allows loads at constant offsets, and every open pays for the
/// helper call `read_at` would make. Inlined so that `offset` stays constant.
#[inline(always)]
pub fn record_field<T: Copy>(ctx: &TracePointContext, offset: usize) -> T {
    // SAFETY: the offsets come from the tracepoints' format files (checked
    // by userspace where they can vary), inside the record the kernel hands over.
    unsafe { ctx.as_ptr().cast::<u8>().add(offset).cast::<T>().read() }
}
