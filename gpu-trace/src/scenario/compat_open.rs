//! openat2 through the 32-bit syscall entry (`int $0x80`) from a 64-bit
//! process: the kernel takes its arguments from ebx, ecx, edx and esi,
//! while the saved code segment still says 64-bit and the 64-bit argument
//! registers hold something else. A tenant can open a device this way to
//! make a tracer that trusts the code segment read the wrong path.

use std::path::Path;

use nix::errno::Errno;

use super::OpenMode;

/// The number of openat2 in both the 64-bit and the 32-bit tables.
#[cfg(target_arch = "x86_64")]
const OPENAT2: i64 = 437;
/// getpid's number in the 32-bit table.
#[cfg(target_arch = "x86_64")]
const GETPID_32: i64 = 20;
/// Where open_how lies in the low page, after room for the path.
#[cfg(target_arch = "x86_64")]
const HOW_AT: usize = 2048;

/// Whether this kernel takes 32-bit calls from 64-bit code (IA32
/// emulation built in and not turned off): a child makes one getpid that
/// way, which kills it where the kernel does not.
#[cfg(target_arch = "x86_64")]
pub fn int80_works() -> bool {
    use nix::{
        sys::wait::{waitpid, WaitStatus},
        unistd::{fork, ForkResult},
    };
    // SAFETY: the child makes one syscall and exits at once, touching
    // nothing another thread of ours may hold.
    match unsafe { fork() } {
        Ok(ForkResult::Child) => {
            let ret: i64;
            // SAFETY: getpid reads no memory; r8-r11 are declared clobbered
            // as the 32-bit entry's contract for 64-bit callers allows.
            unsafe {
                std::arch::asm!(
                    "int 0x80",
                    inlateout("rax") GETPID_32 => ret,
                    lateout("r8") _,
                    lateout("r9") _,
                    lateout("r10") _,
                    lateout("r11") _,
                    options(nostack),
                );
                libc::_exit(if ret > 0 { 0 } else { 1 })
            }
        }
        Ok(ForkResult::Parent { child }) => {
            matches!(waitpid(child, None), Ok(WaitStatus::Exited(_, 0)))
        }
        Err(_) => false,
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub fn int80_works() -> bool {
    false
}

/// Opens `path` with `mode` through `int $0x80` and closes it again.
#[cfg(target_arch = "x86_64")]
pub(super) fn open_through_int80(path: &Path, mode: OpenMode) -> nix::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= HOW_AT {
        return Err(Errno::ENAMETOOLONG);
    }
    // The 32-bit entry takes 32-bit pointers: the path and open_how go in
    // a page below 2 GiB (MAP_32BIT).
    // SAFETY: a fresh anonymous mapping, unmapped below before returning.
    let page = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_32BIT,
            -1,
            0,
        )
    };
    if page == libc::MAP_FAILED {
        return Err(Errno::last());
    }
    let base = page.cast::<u8>();
    // struct open_how: flags, mode, resolve.
    let how: [u64; 3] = [
        (mode.flag() | nix::fcntl::OFlag::O_CLOEXEC).bits() as u64,
        0,
        0,
    ];
    // SAFETY: both copies stay inside the 4096-byte page (path < HOW_AT,
    // open_how is 24 bytes); the page is zeroed, so the path ends in NUL.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), base, bytes.len());
        std::ptr::write_unaligned(base.add(HOW_AT).cast::<[u64; 3]>(), how);
    }
    let dfd = u64::from(libc::AT_FDCWD as u32);
    let ret: i64;
    // SAFETY: the syscall reads the path and open_how from our page; rbx
    // (which LLVM keeps for itself) is swapped in and out around it; r8-r11
    // are declared clobbered, as the 32-bit entry's contract allows (kernels
    // since 4.15 keep them).
    unsafe {
        std::arch::asm!(
            "xchg rbx, {dfd}",
            "int 0x80",
            "xchg rbx, {dfd}",
            dfd = inout(reg) dfd => _,
            inlateout("rax") OPENAT2 => ret,
            in("rcx") base as u64,
            in("rdx") base.add(HOW_AT) as u64,
            in("rsi") std::mem::size_of::<[u64; 3]>() as u64,
            lateout("r8") _,
            lateout("r9") _,
            lateout("r10") _,
            lateout("r11") _,
            options(nostack),
        );
        libc::munmap(page, 4096);
    }
    // The 32-bit entry returns a 32-bit result.
    let ret = ret as i32;
    if ret < 0 {
        return Err(Errno::from_raw(-ret));
    }
    // SAFETY: the descriptor the call just returned, ours to close.
    unsafe { libc::close(ret) };
    Ok(())
}

#[cfg(not(target_arch = "x86_64"))]
pub(super) fn open_through_int80(_: &Path, _: OpenMode) -> nix::Result<()> {
    Err(Errno::ENOSYS)
}
