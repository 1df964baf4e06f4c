//! openat2 through the 32-bit syscall entry (`int $0x80`) from a 64-bit
//! process: the kernel takes its arguments from ebx, ecx, edx and esi,
//! while the saved code segment still says 64-bit and the 64-bit argument
//! registers hold something else. A tenant can open a device this way to
//! make a tracer that trusts the code segment read the wrong path.

use std::{os::unix::ffi::OsStrExt, path::Path};

use nix::errno::Errno;

use super::OpenMode;

/// The number of openat2 in both the 64-bit and the 32-bit tables.
const OPENAT2: i64 = 437;
/// Where open_how lies in the low page, after room for the path.
const HOW_AT: usize = 2048;

/// Opens `path` with `mode` through `int $0x80` and closes it again.
#[cfg(target_arch = "x86_64")]
pub(super) fn open_through_int80(path: &Path, mode: OpenMode) -> nix::Result<()> {
    let bytes = path.as_os_str().as_bytes();
    if bytes.len() >= HOW_AT {
        return Err(Errno::ENAMETOOLONG);
    }
    // The 32-bit entry takes 32-bit pointers: the path and open_how go in
    // a page below 4 GiB.
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
    // (which LLVM keeps for itself) is swapped in and out around it, and
    // the 32-bit entry leaves r8-r11 undefined for a 64-bit caller.
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
