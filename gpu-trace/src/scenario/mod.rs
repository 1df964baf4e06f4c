//! The incident, rebuilt from scratch on any machine: a scratch cgroup, a
//! device policy attached to it, device nodes made with mknod, and a child
//! process inside the cgroup that opens them. Used by `selftest` and by the
//! kernel tests. Every piece removes itself on drop.

pub mod compat_open;
pub mod incident;
pub mod interrupt;
pub mod pasted;

use std::{
    fs::{self, File},
    io::Write,
    os::fd::{AsRawFd, OwnedFd},
    path::{Path, PathBuf},
    process::{Command, Stdio},
    thread,
    time::Duration,
};

use anyhow::{bail, Context};
use gpu_trace_policy::Insn;
use nix::sys::stat::{makedev, mknod, mknodat, Mode, SFlag};

use crate::kernel::bpf_sys::{attach_device_program, load_device_program};

/// A cgroup made for one run and removed after it.
pub struct ScratchCgroup {
    path: PathBuf,
    relative: PathBuf,
}

impl ScratchCgroup {
    /// Makes `<cgroup2 mount>/<name>`; the name should be unique (add a pid).
    pub fn create(cgroup2_mount: &Path, name: &str) -> anyhow::Result<Self> {
        let path = cgroup2_mount.join(name);
        fs::create_dir(&path)
            .with_context(|| format!("creating scratch cgroup {}", path.display()))?;
        Ok(Self {
            path,
            relative: Path::new("/").join(name),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The path as gpu-trace reports it: relative to the cgroup2 mount.
    pub fn relative_path(&self) -> &Path {
        &self.relative
    }

    pub fn open(&self) -> anyhow::Result<File> {
        File::open(&self.path).with_context(|| format!("opening {}", self.path.display()))
    }
}

impl Drop for ScratchCgroup {
    fn drop(&mut self) {
        // Cgroups a probe made below it (EnterNewCgroup) go first, deepest
        // first. Leftover processes (a test that panicked mid-way) would
        // keep a directory busy: kill them first (cgroup.kill, kernel >= 5.14).
        let mut dirs = vec![self.path.clone()];
        let mut i = 0;
        while i < dirs.len() && dirs.len() < 64 {
            if let Ok(entries) = fs::read_dir(&dirs[i]) {
                dirs.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
            }
            i += 1;
        }
        for dir in dirs.iter().rev() {
            let _ = fs::write(dir.join("cgroup.kill"), "1");
            let removed = (0..50).any(|_| {
                let gone = fs::remove_dir(dir).is_ok() || !dir.exists();
                if !gone {
                    thread::sleep(Duration::from_millis(20));
                }
                gone
            });
            if !removed {
                eprintln!(
                    "gpu-trace: could not remove scratch cgroup {}",
                    dir.display()
                );
                return;
            }
        }
    }
}

/// A device policy made the way container runtimes make theirs: a
/// cgroup_device program generated from rules at run time and attached with
/// a link. It denies the given access bits for the given char majors and
/// allows everything else.
pub struct ScratchPolicy {
    cgroup: File,
    rules: Vec<(u32, u16)>,
    // The link detaches the program when dropped.
    link: OwnedFd,
    program: OwnedFd,
}

/// Name the kernel shows for the stand-in policy (bpftool, `check`).
pub const SCRATCH_POLICY_NAME: &str = "gt_scratch_dev";

impl ScratchPolicy {
    /// `rules`: (char major, `ACCESS_*` bits denied).
    pub fn attach(cgroup: &ScratchCgroup, rules: &[(u32, u16)]) -> anyhow::Result<Self> {
        let cgroup = cgroup.open()?;
        let (program, link) = load_and_attach(&cgroup, rules)?;
        Ok(Self {
            cgroup,
            rules: rules.to_vec(),
            link,
            program,
        })
    }

    /// Rewrites the policy while it is attached, as a runtime updating a
    /// container's device rules does: the new program is attached before
    /// the old one goes. Denies `access` bits for `major` from now on.
    pub fn set_rule(&mut self, major: u32, access: u16) -> anyhow::Result<()> {
        self.rules.retain(|(m, _)| *m != major);
        self.rules.push((major, access));
        let (program, link) = load_and_attach(&self.cgroup, &self.rules)?;
        self.program = program;
        self.link = link;
        Ok(())
    }

    /// The kernel's id for the policy program, as `bpftool prog` shows it.
    pub fn program_id(&self) -> Option<u32> {
        crate::kernel::bpf_sys::program_id(&self.program).ok()
    }
}

fn load_and_attach(cgroup: &File, rules: &[(u32, u16)]) -> anyhow::Result<(OwnedFd, OwnedFd)> {
    let program = load_device_program(SCRATCH_POLICY_NAME, &denylist_program(rules))
        .context("loading the scratch device policy")?;
    let link =
        attach_device_program(&program, cgroup).context("attaching the scratch device policy")?;
    Ok((program, link))
}

/// The instructions of a deny-list device policy, in the shape runc, LXC
/// and systemd generate (context loads, ALU, jumps; no maps, no helpers).
pub fn denylist_program(rules: &[(u32, u16)]) -> Vec<Insn> {
    let insn = Insn::new;
    let mut p = vec![
        insn(0x61, 2, 1, 0, 0),      // r2 = ctx->access_type
        insn(0x54, 2, 0, 0, 0xffff), // w2 &= 0xffff: device type
        insn(0x61, 3, 1, 0, 0),      // r3 = ctx->access_type
        insn(0x74, 3, 0, 0, 16),     // w3 >>= 16: access bits
        insn(0x61, 4, 1, 4, 0),      // r4 = ctx->major
    ];
    for &(major, access) in rules {
        p.extend([
            insn(0x55, 2, 0, 6, i32::from(gpu_trace_common::DEV_TYPE_CHAR)), // not char: next rule
            insn(0x55, 4, 0, 5, major as i32), // other major: next rule
            insn(0xbc, 5, 3, 0, 0),            // w5 = w3
            insn(0x54, 5, 0, 0, i32::from(access)), // w5 &= denied bits
            insn(0x15, 5, 0, 2, 0),            // none asked: next rule
            insn(0xb7, 0, 0, 0, 0),            // r0 = 0: deny
            insn(0x95, 0, 0, 0, 0),            // exit
        ]);
    }
    p.push(insn(0xb7, 0, 0, 0, 1)); // r0 = 1: allow
    p.push(insn(0x95, 0, 0, 0, 0));
    p
}

/// Device nodes made with mknod in a temporary directory on a filesystem
/// that honours device nodes (not mounted nodev).
pub struct DeviceNodes {
    dir: tempfile::TempDir,
}

impl DeviceNodes {
    /// `nodes`: (file name, char major, minor).
    pub fn create(nodes: &[(&str, u32, u32)]) -> anyhow::Result<Self> {
        let base = device_capable_dir()?;
        let dir = tempfile::Builder::new()
            .prefix("gpu-trace-nodes-")
            .tempdir_in(&base)
            .with_context(|| format!("making a temporary directory in {}", base.display()))?;
        // Everything relative to the directory's descriptor: once made (0700,
        // ours), no path lookup through the shared base can be redirected.
        let dir_fd =
            File::open(dir.path()).with_context(|| format!("opening {}", dir.path().display()))?;
        for &(name, major, minor) in nodes {
            mknodat(
                Some(dir_fd.as_raw_fd()),
                name,
                SFlag::S_IFCHR,
                Mode::from_bits_truncate(0o666),
                makedev(major.into(), minor.into()),
            )
            .with_context(|| {
                format!("mknod {name} c {major} {minor} in {}", dir.path().display())
            })?;
            // mknod applies the umask; make the node as open as NVIDIA's (crw-rw-rw-).
            nix::sys::stat::fchmodat(
                Some(dir_fd.as_raw_fd()),
                name,
                Mode::from_bits_truncate(0o666),
                nix::sys::stat::FchmodatFlags::FollowSymlink,
            )?;
        }
        Ok(Self { dir })
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

/// The first of the usual temporary places whose mount lets device nodes work.
fn device_capable_dir() -> anyhow::Result<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo")?;
    let candidates = std::env::var_os("TMPDIR")
        .map(PathBuf::from)
        .into_iter()
        .chain(["/tmp", "/var/tmp", "/run", "/dev/shm", "/dev"].map(PathBuf::from));
    for dir in candidates {
        let Ok(dir) = dir.canonicalize() else {
            continue;
        };
        if mount_options(&mountinfo, &dir)
            .is_some_and(|opts| !opts.split(',').any(|o| o == "nodev"))
        {
            shared_safely(&dir)?;
            return Ok(dir);
        }
    }
    bail!("no temporary directory on a filesystem without nodev (tried $TMPDIR, /tmp, /var/tmp, /run, /dev/shm, /dev)")
}

/// A directory root may make files in while others can write to it too:
/// root's own, and sticky if anyone else may write there (so no one can
/// remove or rename what root made). Anything else is refused.
fn shared_safely(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(dir).with_context(|| format!("{}", dir.display()))?;
    let others_write = meta.mode() & 0o022 != 0;
    let sticky = meta.mode() & 0o1000 != 0;
    if meta.uid() != 0 {
        bail!(
            "{} (TMPDIR or a default) is owned by uid {}, not root: pick a root-owned directory",
            dir.display(),
            meta.uid()
        );
    }
    if others_write && !sticky {
        bail!(
            "{} (TMPDIR or a default) is writable by others and not sticky (mode {:o}): pick one that is not, or is sticky like /tmp",
            dir.display(),
            meta.mode() & 0o7777
        );
    }
    Ok(())
}

/// Per-mount options of the mount that holds `path` (the longest mount point
/// that is a prefix of it).
fn mount_options<'a>(mountinfo: &'a str, path: &Path) -> Option<&'a str> {
    mountinfo
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let mount_point = fields.nth(4)?;
            let options = fields.next()?;
            path.starts_with(mount_point)
                .then_some((mount_point.len(), options))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, options)| options)
}

/// One thing the probe child does to a device node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOp {
    /// open(2) with O_RDONLY ("r"), O_WRONLY ("w") or O_RDWR ("rw").
    Open { path: PathBuf, mode: OpenMode },
    /// mknod(2) of a char node.
    Mknod {
        path: PathBuf,
        major: u32,
        minor: u32,
    },
    /// Wait until this file exists (lets a test change a policy mid-run).
    WaitFor { path: PathBuf },
    /// Become this user and group, with no supplementary groups: a tenant.
    BecomeUser { uid: u32 },
    /// Make a cgroup of this name below the probe's own and move into it,
    /// as a tenant with a delegated subtree may.
    EnterNewCgroup { name: String },
    /// Open `path` `count` times, under a new command name each time
    /// (PR_SET_NAME), as a tenant evading folding would; the result is how
    /// many opens failed with EPERM.
    OpenUnderNewNames {
        path: PathBuf,
        mode: OpenMode,
        count: u32,
    },
    /// Take this command name (PR_SET_NAME), as a program renaming its
    /// threads does.
    Rename { name: String },
    /// openat2 through the 32-bit entry from this 64-bit process
    /// (compat_open.rs), as a tenant hiding its path from the saved
    /// registers would.
    OpenThroughInt80 { path: PathBuf, mode: OpenMode },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    Read,
    Write,
    ReadWrite,
}

impl OpenMode {
    pub fn flag(self) -> nix::fcntl::OFlag {
        use nix::fcntl::OFlag;
        match self {
            OpenMode::Read => OFlag::O_RDONLY,
            OpenMode::Write => OFlag::O_WRONLY,
            OpenMode::ReadWrite => OFlag::O_RDWR,
        }
    }

    fn text(self) -> &'static str {
        match self {
            OpenMode::Read => "r",
            OpenMode::Write => "w",
            OpenMode::ReadWrite => "rw",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        match text {
            "r" => Some(OpenMode::Read),
            "w" => Some(OpenMode::Write),
            "rw" => Some(OpenMode::ReadWrite),
            _ => None,
        }
    }
}

impl ProbeOp {
    /// The command-line form the probe subcommand takes.
    pub fn to_arg(&self) -> String {
        match self {
            ProbeOp::Open { path, mode } => format!("open:{}:{}", mode.text(), path.display()),
            ProbeOp::Mknod { path, major, minor } => {
                format!("mknod:{major}:{minor}:{}", path.display())
            }
            ProbeOp::WaitFor { path } => format!("wait-for:{}", path.display()),
            ProbeOp::BecomeUser { uid } => format!("user:{uid}"),
            ProbeOp::EnterNewCgroup { name } => format!("cgroup:{name}"),
            ProbeOp::OpenUnderNewNames { path, mode, count } => {
                format!("open-renamed:{count}:{}:{}", mode.text(), path.display())
            }
            ProbeOp::Rename { name } => format!("rename:{name}"),
            ProbeOp::OpenThroughInt80 { path, mode } => {
                format!("open-int80:{}:{}", mode.text(), path.display())
            }
        }
    }

    pub fn parse_arg(arg: &str) -> anyhow::Result<Self> {
        let bad = || anyhow::anyhow!("bad probe operation {arg:?}");
        let (kind, rest) = arg.split_once(':').ok_or_else(bad)?;
        Ok(match kind {
            "open" => {
                let (mode, path) = rest.split_once(':').ok_or_else(bad)?;
                ProbeOp::Open {
                    path: path.into(),
                    mode: OpenMode::parse(mode).ok_or_else(bad)?,
                }
            }
            "mknod" => {
                let mut parts = rest.splitn(3, ':');
                let mut number = || parts.next().and_then(|n| n.parse().ok()).ok_or_else(bad);
                let (major, minor) = (number()?, number()?);
                let path = parts.next().ok_or_else(bad)?.into();
                ProbeOp::Mknod { path, major, minor }
            }
            "open-int80" => {
                let (mode, path) = rest.split_once(':').ok_or_else(bad)?;
                ProbeOp::OpenThroughInt80 {
                    path: path.into(),
                    mode: OpenMode::parse(mode).ok_or_else(bad)?,
                }
            }
            "wait-for" => ProbeOp::WaitFor { path: rest.into() },
            "user" => ProbeOp::BecomeUser {
                uid: rest.parse().map_err(|_| bad())?,
            },
            "cgroup" => ProbeOp::EnterNewCgroup { name: rest.into() },
            "rename" => ProbeOp::Rename { name: rest.into() },
            "open-renamed" => {
                let mut parts = rest.splitn(3, ':');
                let count = parts.next().and_then(|n| n.parse().ok()).ok_or_else(bad)?;
                let mode = parts.next().and_then(OpenMode::parse).ok_or_else(bad)?;
                let path = parts.next().ok_or_else(bad)?.into();
                ProbeOp::OpenUnderNewNames { path, mode, count }
            }
            _ => return Err(bad()),
        })
    }

    /// Does it, returning 0 or the errno.
    pub fn perform(&self) -> i32 {
        let result = match self {
            ProbeOp::BecomeUser { uid } => become_user(*uid),
            ProbeOp::EnterNewCgroup { name } => enter_new_cgroup(name),
            ProbeOp::Rename { name } => {
                set_comm(name);
                Ok(())
            }
            ProbeOp::OpenUnderNewNames { path, mode, count } => {
                return (0..*count)
                    .map(|n| {
                        set_comm(&format!("t{n}"));
                        let open = ProbeOp::Open {
                            path: path.clone(),
                            mode: *mode,
                        };
                        i32::from(open.perform() == libc::EPERM)
                    })
                    .sum();
            }
            ProbeOp::Open { path, mode } => nix::fcntl::open(
                path,
                mode.flag() | nix::fcntl::OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map(|fd| {
                let _ = nix::unistd::close(fd);
            }),
            ProbeOp::OpenThroughInt80 { path, mode } => {
                compat_open::open_through_int80(path, *mode)
            }
            ProbeOp::Mknod { path, major, minor } => {
                let made = mknod(
                    path,
                    SFlag::S_IFCHR,
                    Mode::from_bits_truncate(0o600),
                    makedev((*major).into(), (*minor).into()),
                );
                if made.is_ok() {
                    let _ = fs::remove_file(path);
                }
                made
            }
            ProbeOp::WaitFor { path } => {
                let deadline = std::time::Instant::now() + PROBE_WAIT_LIMIT;
                while !path.exists() && std::time::Instant::now() < deadline {
                    thread::sleep(Duration::from_millis(10));
                }
                if path.exists() {
                    Ok(())
                } else {
                    Err(nix::errno::Errno::ETIMEDOUT)
                }
            }
        };
        match result {
            Ok(()) => 0,
            Err(errno) => errno as i32,
        }
    }
}

fn become_user(uid: u32) -> nix::Result<()> {
    use nix::unistd::{setgid, setgroups, setuid, Gid, Uid};
    setgroups(&[])?;
    setgid(Gid::from_raw(uid))?;
    setuid(Uid::from_raw(uid))
}

/// mkdir `<own cgroup>/name`, then write "0" to its cgroup.procs.
fn enter_new_cgroup(name: &str) -> nix::Result<()> {
    let io = |e: std::io::Error| nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO));
    let mount = crate::host::mountinfo::cgroup2_mount()
        .map_err(io)?
        .ok_or(nix::errno::Errno::ENOENT)?;
    let own = crate::cgroup::target::cgroup_of_pid(std::process::id())
        .map_err(|_| nix::errno::Errno::ENOENT)?;
    let dir = mount.join(own.strip_prefix("/").unwrap_or(&own)).join(name);
    fs::create_dir(&dir).map_err(io)?;
    fs::write(dir.join("cgroup.procs"), "0").map_err(io)
}

fn set_comm(name: &str) {
    let name = std::ffi::CString::new(name).expect("no NUL");
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of up to 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr()) };
}

/// How long a `wait-for` operation waits before giving up with ETIMEDOUT.
const PROBE_WAIT_LIMIT: Duration = Duration::from_secs(30);

/// What a probe child did: its pid and, per operation, 0 or the errno.
#[derive(Debug, Clone)]
pub struct ProbeOutcome {
    pub pid: u32,
    pub results: Vec<i32>,
}

/// The command name the probe child gives itself, so events from it are
/// easy to tell apart.
pub const PROBE_COMM: &str = "gpu-trace-probe";

/// Runs `gpu_trace_bin __probe OPS...` as a child, placed into `cgroups`
/// before it executes (so every access it makes is under their policies).
/// Several make sense on hybrid hosts: a cgroup2 directory plus a v1
/// devices-controller directory.
pub fn run_probe(
    gpu_trace_bin: &Path,
    cgroups: &[&ScratchCgroup],
    ops: &[ProbeOp],
) -> anyhow::Result<ProbeOutcome> {
    let dirs: Vec<&Path> = cgroups.iter().map(|c| c.path()).collect();
    run_probe_in(gpu_trace_bin, &dirs, ops)
}

/// The same, with cgroups given as directories (a container's, say).
pub fn run_probe_in(
    gpu_trace_bin: &Path,
    cgroup_dirs: &[&Path],
    ops: &[ProbeOp],
) -> anyhow::Result<ProbeOutcome> {
    let mut command = Command::new(gpu_trace_bin);
    command
        .arg("__probe")
        .args(ops.iter().map(ProbeOp::to_arg))
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let _procs = crate::cgroup::spawn::place_child_in(&mut command, cgroup_dirs)?;

    let child = command
        .spawn()
        .with_context(|| format!("starting {}", gpu_trace_bin.display()))?;
    let pid = child.id();
    let output = child.wait_with_output()?;
    if !output.status.success() {
        bail!("probe child {pid} failed: {}", output.status);
    }
    let results = String::from_utf8_lossy(&output.stdout)
        .lines()
        .map(|line| line.trim().parse::<i32>())
        .collect::<Result<Vec<_>, _>>()
        .context("reading the probe child's results")?;
    if results.len() != ops.len() {
        bail!(
            "probe child {pid} reported {} results for {} operations",
            results.len(),
            ops.len()
        );
    }
    Ok(ProbeOutcome { pid, results })
}

/// The probe subcommand's body: name itself, do each operation, print one
/// result per line.
pub fn probe_main(args: &[String]) -> anyhow::Result<()> {
    let ops = args
        .iter()
        .map(|a| ProbeOp::parse_arg(a))
        .collect::<anyhow::Result<Vec<_>>>()?;
    set_comm(PROBE_COMM);
    let mut out = std::io::stdout().lock();
    for op in &ops {
        writeln!(out, "{}", op.perform())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_ops_round_trip_through_arguments() {
        for op in [
            ProbeOp::Open {
                path: "/tmp/x:y/nvidia-uvm".into(),
                mode: OpenMode::ReadWrite,
            },
            ProbeOp::Open {
                path: "/dev/null".into(),
                mode: OpenMode::Read,
            },
            ProbeOp::Mknod {
                path: "/tmp/a:b".into(),
                major: 511,
                minor: 3,
            },
            ProbeOp::OpenThroughInt80 {
                path: "/tmp/n:m/nvidia0".into(),
                mode: OpenMode::Write,
            },
        ] {
            assert_eq!(ProbeOp::parse_arg(&op.to_arg()).expect("parses"), op);
        }
        assert!(ProbeOp::parse_arg("open:x:/dev/null").is_err());
        assert!(ProbeOp::parse_arg("mknod:1:/p").is_err());
    }

    #[test]
    fn denylist_program_denies_exactly_its_rules() {
        use gpu_trace_common::{ACCESS_MKNOD, ACCESS_READ, ACCESS_WRITE};
        use gpu_trace_policy::{evaluate, DeviceQuery, Outcome};
        let p = denylist_program(&[
            (511, ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD),
            (510, ACCESS_WRITE),
        ]);
        let ask = |dev_type, major, access| {
            evaluate(
                &p,
                &DeviceQuery {
                    dev_type,
                    major,
                    minor: 0,
                    access,
                },
            )
        };
        assert_eq!(ask(2, 511, ACCESS_READ), Ok(Outcome::Deny));
        assert_eq!(ask(2, 510, ACCESS_READ), Ok(Outcome::Allow));
        assert_eq!(ask(2, 510, ACCESS_READ | ACCESS_WRITE), Ok(Outcome::Deny));
        assert_eq!(ask(2, 195, ACCESS_READ | ACCESS_WRITE), Ok(Outcome::Allow));
        assert_eq!(
            ask(1, 511, ACCESS_READ),
            Ok(Outcome::Allow),
            "block devices are not covered"
        );
    }

    #[test]
    fn mount_options_pick_the_longest_matching_mount() {
        let mountinfo = "\
27 1 254:0 / / rw,relatime - ext4 /dev/vda rw
25 24 0:23 / /dev/shm rw,nosuid,nodev - tmpfs tmpfs rw
24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw
";
        assert_eq!(
            mount_options(mountinfo, Path::new("/tmp")),
            Some("rw,relatime")
        );
        assert_eq!(
            mount_options(mountinfo, Path::new("/dev/shm/x")),
            Some("rw,nosuid,nodev")
        );
        assert_eq!(
            mount_options(mountinfo, Path::new("/dev/null")),
            Some("rw,relatime")
        );
    }
}
