//! The processes that run a container for its engine: containerd's shim
//! for a Docker or containerd container, conmon for a podman one. Their
//! command lines name the OCI runtime (runc, crun) that wrote the
//! container's device policy and then exited.

use std::fs;

use crate::{
    host::proc_pid::is_host_root_process,
    model::policy_writer::{Manager, ProcessRef},
};

/// The OCI runtime running container `id`, and the process whose command
/// line says so. Only root's processes with the host's root count
/// (is_host_root_process): anyone can write any command line.
pub fn oci_runtime_of(id: &str) -> Option<(Manager, ProcessRef)> {
    fs::read_dir("/proc").ok()?.flatten().find_map(|p| {
        let pid: u32 = p.file_name().to_str()?.parse().ok()?;
        let cmdline = fs::read(p.path().join("cmdline")).ok()?;
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        let runtime = runtime_in(&args, id.as_bytes())?;
        if !is_host_root_process(pid) {
            return None;
        }
        Some((
            runtime,
            ProcessRef {
                pid,
                comm: crate::host::proc_pid::comm_of(pid),
            },
        ))
    })
}

/// `containerd-shim-runc-v2 -namespace moby -id ID ...` is runc's;
/// `conmon ... -c ID ... -r /usr/bin/crun` runs the runtime it names.
fn runtime_in(args: &[&[u8]], id: &[u8]) -> Option<Manager> {
    let program = args.first()?.rsplit(|&b| b == b'/').next()?;
    let value_of = |flags: &[&[u8]]| {
        args.windows(2)
            .find(|w| flags.contains(&w[0]))
            .map(|w| w[1])
    };
    if program.starts_with(b"containerd-shim-runc") {
        return (value_of(&[b"-id"]) == Some(id)).then_some(Manager::Runc);
    }
    if program == b"conmon" && value_of(&[b"-c", b"--cid"]) == Some(id) {
        let runtime = value_of(&[b"-r", b"--runtime"])?;
        return match runtime.rsplit(|&b| b == b'/').next()? {
            b"crun" => Some(Manager::Crun),
            b"runc" => Some(Manager::Runc),
            _ => None,
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(line: &str) -> Vec<&[u8]> {
        line.split(' ').map(str::as_bytes).collect()
    }

    #[test]
    fn shims_and_conmon_name_the_runtime() {
        let shim = "/usr/bin/containerd-shim-runc-v2 -namespace moby -id abc -address /run/containerd/containerd.sock";
        assert_eq!(runtime_in(&args(shim), b"abc"), Some(Manager::Runc));
        assert_eq!(runtime_in(&args(shim), b"abd"), None);
        let conmon = "/usr/bin/conmon --api-version 1 -c abc -u abc -r /usr/bin/crun -b /var/lib/containers/x";
        assert_eq!(runtime_in(&args(conmon), b"abc"), Some(Manager::Crun));
        assert_eq!(runtime_in(&args("/usr/bin/sleep -id abc"), b"abc"), None);
    }
}
