//! gpu-trace's kernel side.
//!
//! Data flows one way: an open call's entry stashes its path pointer per
//! thread (`open_calls`), the device hook fills in what it saw and the verdict
//! of the policies that ran before it (`observer`), and the call's exit joins
//! both with the errno into one event on the ring buffer.
#![no_std]
#![no_main]

mod maps;
mod observer;
mod open_calls;
mod process_tree;

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // Never reached: the verifier rejects programs that could panic.
    loop {}
}
