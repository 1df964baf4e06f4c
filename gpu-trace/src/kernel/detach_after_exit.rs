//! Letting the kernel detach after we exit. Releasing a trace event's link
//! (a perf tracepoint: the syscalls', the fork's) waits for RCU grace periods, and the kernel serialises those: about
//! 45 ms a link here, 0.4 s for `run`'s, spent after CMD had exited and
//! before the caller got its status. A forked child keeps a copy of every
//! descriptor until this process has exited, then exits itself; the last
//! reference, and the wait, are the child's. The kernel releases whatever
//! the child holds when it dies, killed or not, so nothing stays attached.

use std::os::fd::{AsRawFd, OwnedFd};

use nix::unistd::{fork, pipe, ForkResult};

use crate::kernel::tracer::Tracer;

/// Consumes the tracer. On success its descriptors close when this process
/// exits and are released by the child after that; if no child can be
/// made, it detaches here.
pub fn detach_after_exit(tracer: Tracer) {
    let Ok((parent_exited, held_by_parent)) = pipe() else {
        drop(tracer);
        return;
    };
    // SAFETY: the child calls only async-signal-safe functions (close,
    // read, _exit) before it exits: this process may have other threads.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => wait_for_parent_then_exit(&parent_exited, &held_by_parent),
        Ok(ForkResult::Parent { .. }) => {
            drop(parent_exited);
            // The write end stays open until exit: the child's signal.
            std::mem::forget(held_by_parent);
            // Not dropped: a drop would detach here. Its descriptors
            // close (no last reference among them) when the process exits.
            std::mem::forget(tracer);
        }
        Err(_) => drop(tracer),
    }
}

/// The child: gives up the caller's terminal and pipes (a pipeline must
/// not wait for it), waits until the parent has exited, then exits.
fn wait_for_parent_then_exit(parent_exited: &OwnedFd, held_by_parent: &OwnedFd) -> ! {
    // SAFETY: close, read and _exit are async-signal-safe; the buffer is ours.
    unsafe {
        for fd in [0, 1, 2, held_by_parent.as_raw_fd()] {
            libc::close(fd);
        }
        let mut byte = 0u8;
        // EOF (0) when the parent's write end is gone: it has exited.
        while libc::read(parent_exited.as_raw_fd(), (&mut byte as *mut u8).cast(), 1) < 0
            && *libc::__errno_location() == libc::EINTR
        {}
        libc::_exit(0)
    }
}
