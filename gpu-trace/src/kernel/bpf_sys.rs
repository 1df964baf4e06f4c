//! The few bpf(2) commands aya keeps to itself: which device programs are
//! attached to a cgroup, a program's translated instructions, and loading a
//! device program from instructions made at run time, as runtimes do.

use std::{
    io, mem,
    os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd},
};

use aya_obj::generated::{
    bpf_attach_type::BPF_CGROUP_DEVICE, bpf_attr, bpf_cmd, bpf_prog_info, bpf_prog_type,
    BPF_F_ALLOW_MULTI, BPF_F_QUERY_EFFECTIVE, BPF_F_REPLACE,
};
use gpu_trace_policy::Insn;

/// Loads a cgroup_device program made of `insns`. On a verifier refusal the
/// error carries the verifier's log.
///
/// Loaded without a verifier log first: before 5.15 or so a log that does
/// not fit its buffer fails the load (ENOSPC), and a long program that
/// would load makes a long log. The log is asked for only to say why a
/// load failed.
pub fn load_device_program(name: &str, insns: &[Insn]) -> io::Result<OwnedFd> {
    load_device_program_logged(name, insns, false)
        .or_else(|_| load_device_program_logged(name, insns, true))
}

fn load_device_program_logged(name: &str, insns: &[Insn], logged: bool) -> io::Result<OwnedFd> {
    let code: Vec<u8> = insns.iter().flat_map(|i| i.to_bytes()).collect();
    let license = c"GPL";
    let mut log = vec![0u8; if logged { 64 * 1024 } else { 1 }];
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { mem::zeroed() };
    // SAFETY: the union is all zeroes; we fill in its prog-load member.
    let load = unsafe { &mut attr.__bindgen_anon_3 };

    load.prog_type = bpf_prog_type::BPF_PROG_TYPE_CGROUP_DEVICE as u32;
    load.expected_attach_type = BPF_CGROUP_DEVICE as u32;
    load.insns = code.as_ptr() as u64;
    load.insn_cnt = insns.len() as u32;
    load.license = license.as_ptr() as u64;
    if logged {
        load.log_level = 1;
        load.log_size = log.len() as u32;
        load.log_buf = log.as_mut_ptr() as u64;
    }
    for (slot, byte) in load.prog_name.iter_mut().zip(name.bytes().take(15)) {
        *slot = byte as libc::c_char;
    }
    match sys_bpf(bpf_cmd::BPF_PROG_LOAD, &mut attr) {
        // SAFETY: BPF_PROG_LOAD returns a new descriptor we now own.
        Ok(fd) => Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) }),
        Err(e) => {
            let text = String::from_utf8_lossy(log.split(|&b| b == 0).next().unwrap_or_default())
                .into_owned();
            Err(io::Error::new(
                e.kind(),
                format!("{e}; verifier log: {}", text.trim()),
            ))
        }
    }
}

/// Attaches a device program to a cgroup with a BPF link; closing the
/// returned descriptor detaches it.
pub fn attach_device_program(program: impl AsFd, cgroup: impl AsFd) -> io::Result<OwnedFd> {
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { mem::zeroed() };
    attr.link_create.__bindgen_anon_1.prog_fd = program.as_fd().as_raw_fd() as u32;
    attr.link_create.__bindgen_anon_2.target_fd = cgroup.as_fd().as_raw_fd() as u32;
    attr.link_create.attach_type = BPF_CGROUP_DEVICE as u32;
    let fd = sys_bpf(bpf_cmd::BPF_LINK_CREATE, &mut attr)?;
    // SAFETY: BPF_LINK_CREATE returns a new descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Puts `program` in the place of program `old_id` at `cgroup`, without a
/// link, as runc and NVIDIA's legacy hook patch a container's policy: the
/// program stays attached after the descriptor closes, until the cgroup
/// goes or another writer replaces it.
pub fn replace_attached_program(
    cgroup: impl AsFd,
    old_id: u32,
    program: impl AsFd,
) -> io::Result<()> {
    let old = program_fd(old_id)?;
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { mem::zeroed() };
    // SAFETY: the union is all zeroes; we fill in its attach member.
    let attach = unsafe { &mut attr.__bindgen_anon_5 };
    attach.__bindgen_anon_1.target_fd = cgroup.as_fd().as_raw_fd() as u32;
    attach.attach_bpf_fd = program.as_fd().as_raw_fd() as u32;
    attach.attach_type = BPF_CGROUP_DEVICE as u32;
    attach.attach_flags = BPF_F_ALLOW_MULTI | BPF_F_REPLACE;
    attach.replace_bpf_fd = old.as_raw_fd() as u32;
    sys_bpf(bpf_cmd::BPF_PROG_ATTACH, &mut attr).map(drop)
}

/// The id the kernel gave a loaded program.
pub fn program_id(program: &OwnedFd) -> io::Result<u32> {
    Ok(program_info(program, &mut [])?.id)
}

/// Device programs attached at one cgroup, or in force on it (`effective`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Attached {
    /// `BPF_F_ALLOW_OVERRIDE` / `BPF_F_ALLOW_MULTI` of the cgroup itself.
    pub flags: u32,
    pub program_ids: Vec<u32>,
}

/// BPF_PROG_QUERY for cgroup_device programs on `cgroup` (an open directory).
pub fn device_programs(cgroup: impl AsFd, effective: bool) -> io::Result<Attached> {
    let mut ids = vec![0u32; 64];
    loop {
        // SAFETY: an all-zero bpf_attr is the documented starting point.
        let mut attr: bpf_attr = unsafe { mem::zeroed() };
        attr.query.__bindgen_anon_1.target_fd = cgroup.as_fd().as_raw_fd() as u32;
        attr.query.attach_type = BPF_CGROUP_DEVICE as u32;
        attr.query.query_flags = if effective { BPF_F_QUERY_EFFECTIVE } else { 0 };
        attr.query.__bindgen_anon_2.prog_cnt = ids.len() as u32;
        attr.query.prog_ids = ids.as_mut_ptr() as u64;
        let result = sys_bpf(bpf_cmd::BPF_PROG_QUERY, &mut attr);
        // SAFETY: the kernel filled in the count (also on ENOSPC).
        let count = unsafe { attr.query.__bindgen_anon_2.prog_cnt } as usize;
        match result {
            Ok(_) => {
                ids.truncate(count);
                // SAFETY: as above.
                let flags = unsafe { attr.query.attach_flags };
                return Ok(Attached {
                    flags,
                    program_ids: ids,
                });
            }
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) && count > ids.len() => {
                ids.resize(count, 0)
            }
            Err(e) => return Err(e),
        }
    }
}

/// A loaded program's identity and translated instructions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramDump {
    pub id: u32,
    pub name: String,
    /// The kernel's tag: a hash of the instructions, as bpftool shows it.
    pub tag: String,
    /// Empty when the kernel withholds them (kernel.kptr_restrict=2).
    pub insns: Vec<Insn>,
    /// When it was loaded, on the kernel's boot-time clock (ns).
    pub load_boot_ns: u64,
}

pub fn dump_program(id: u32) -> io::Result<ProgramDump> {
    let fd = program_fd(id)?;
    // First ask for the sizes, then for the instructions.
    let first = program_info(&fd, &mut [])?;
    let mut raw = vec![0u8; first.xlated_prog_len as usize];
    let info = program_info(&fd, &mut raw)?;
    let len = (info.xlated_prog_len as usize).min(raw.len());
    let insns = raw[..len]
        .chunks_exact(8)
        .map(|c| Insn::from_bytes(c.try_into().expect("8-byte chunk")))
        .collect();
    let name: Vec<u8> = info
        .name
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    Ok(ProgramDump {
        id: info.id,
        name: String::from_utf8_lossy(&name).into_owned(),
        tag: info.tag.iter().map(|b| format!("{b:02x}")).collect(),
        insns,
        load_boot_ns: info.load_time,
    })
}

fn program_fd(id: u32) -> io::Result<OwnedFd> {
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { mem::zeroed() };
    attr.__bindgen_anon_6.__bindgen_anon_1.prog_id = id;
    let fd = sys_bpf(bpf_cmd::BPF_PROG_GET_FD_BY_ID, &mut attr)?;
    // SAFETY: BPF_PROG_GET_FD_BY_ID returns a new descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

fn program_info(fd: &OwnedFd, xlated: &mut [u8]) -> io::Result<bpf_prog_info> {
    // SAFETY: all-zero is a valid bpf_prog_info.
    let mut info: bpf_prog_info = unsafe { mem::zeroed() };
    info.xlated_prog_len = xlated.len() as u32;
    info.xlated_prog_insns = xlated.as_mut_ptr() as u64;
    // SAFETY: as above.
    let mut attr: bpf_attr = unsafe { mem::zeroed() };
    attr.info.bpf_fd = fd.as_raw_fd() as u32;
    attr.info.info_len = mem::size_of::<bpf_prog_info>() as u32;
    attr.info.info = &mut info as *mut _ as u64;
    sys_bpf(bpf_cmd::BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    Ok(info)
}

/// Kernels before 5.11 charge BPF memory to the user's RLIMIT_MEMLOCK, and
/// root's total includes every running tracer's 4 MiB ring buffer: on EPERM,
/// lift this process's limit once and try again (as aya does for its calls).
fn sys_bpf(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<i64> {
    let result = sys_bpf_once(cmd, attr);
    if !matches!(&result, Err(e) if e.raw_os_error() == Some(libc::EPERM)) {
        return result;
    }
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: a valid rlimit; failure (no CAP_SYS_RESOURCE) leaves the limit as it was.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) } != 0 {
        return result;
    }
    sys_bpf_once(cmd, attr)
}

fn sys_bpf_once(cmd: bpf_cmd, attr: &mut bpf_attr) -> io::Result<i64> {
    // SAFETY: `attr` is a valid, fully initialised bpf_attr of the size passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd as i32,
            attr as *mut bpf_attr,
            mem::size_of::<bpf_attr>(),
        )
    };
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}
