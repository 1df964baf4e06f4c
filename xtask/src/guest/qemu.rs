//! One qemu guest run, watched: the console is streamed and kept, and the
//! guest is killed at its deadline — or at once when it shows it is stuck in
//! the emulator rather than in our code, in which case it is booted once more.
//!
//! Under TCG on a busy 2-core host a guest now and then boots with a vCPU
//! whose timer never fires (the kernel says "timer wakeup didn't happen" and
//! RCU stalls); nothing then runs, and waiting for the deadline only wastes
//! it. That is the emulator's fault, not a test result, so it earns one more
//! boot; a second such run fails like any other.

use std::{
    fs,
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc, Mutex,
    },
    thread,
    time::{Duration, Instant},
};

use anyhow::Context;

/// How long a guest may take to reach its /init's first line. Boots take
/// 10-60 s under TCG; a guest that has printed nothing of ours by then is stuck.
pub(crate) const FIRST_LINE_WITHIN: Duration = Duration::from_secs(240);

/// Lines our guests' /init scripts start with.
const INIT_PREFIXES: [&str; 3] = ["gpu-trace-vm: ", "gpu-trace-lab: ", "gpu-trace-bench: "];

/// What the kernel prints when a CPU's timer stopped firing: under emulation,
/// a lost timer, after which the guest makes no progress.
const LOST_TIMER: &str = "timer wakeup didn't happen";

/// What one run left.
pub(crate) struct QemuRun {
    /// Everything on the first serial port.
    pub console: String,
    pub ending: Ending,
    pub seconds: f64,
}

/// How the last boot ended.
#[derive(Debug, PartialEq)]
pub(crate) enum Ending {
    PoweredOff,
    /// Killed at the deadline.
    TimedOut(Duration),
    /// Killed early, stuck in the emulator, and why.
    Stuck(String),
}

impl Ending {
    /// Why the guest gave no result, when it was killed.
    pub(crate) fn problem(&self) -> Option<String> {
        match self {
            Ending::PoweredOff => None,
            Ending::TimedOut(after) => Some(format!(
                "no result within {} s; qemu killed",
                after.as_secs()
            )),
            Ending::Stuck(why) => Some(format!("stuck in the emulator twice: {why}")),
        }
    }
}

/// Runs the guest `command` makes, up to twice: the second boot only when
/// the first got stuck in the emulator. `result_file` (the guest's second
/// serial port) is removed before each boot so no earlier result passes for
/// this one.
pub(crate) fn run_qemu(
    command: impl Fn() -> Command,
    result_file: &Path,
    console_log: &Path,
    prefix: &str,
    timeout: Duration,
) -> anyhow::Result<QemuRun> {
    let mut run = run_once(command(), result_file, console_log, prefix, timeout)?;
    if let Ending::Stuck(why) = &run.ending {
        eprintln!(
            "xtask: {}the guest got stuck in the emulator ({why}); its console is in {}.old; booting it once more",
            prefix,
            console_log.display()
        );
        let mut old = console_log.as_os_str().to_owned();
        old.push(".old");
        fs::rename(console_log, &old)?;
        let first = run.seconds;
        run = run_once(command(), result_file, console_log, prefix, timeout)?;
        run.seconds += first;
    }
    Ok(run)
}

fn run_once(
    mut command: Command,
    result_file: &Path,
    console_log: &Path,
    prefix: &str,
    timeout: Duration,
) -> anyhow::Result<QemuRun> {
    if result_file.exists() {
        fs::remove_file(result_file)?;
    }
    let started = Instant::now();
    let mut qemu = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .context("starting qemu-system-x86_64")?;
    let stdout = qemu.stdout.take().expect("piped");
    let log = fs::File::create(console_log)?;
    let seen = Arc::new(Seen::default());
    let streamer = {
        let (prefix, seen) = (prefix.to_string(), Arc::clone(&seen));
        thread::spawn(move || stream_console(stdout, log, &prefix, &seen))
    };
    let ending = wait(&mut qemu, timeout, &seen)?;
    let console = streamer.join().expect("console streamer")?;
    Ok(QemuRun {
        console,
        ending,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// What the console streamer has seen so far.
#[derive(Default)]
struct Seen {
    init_started: AtomicBool,
    lost_timer: Mutex<Option<String>>,
}

/// Waits for qemu to power off; kills it at `timeout`, or as soon as the
/// guest is seen stuck.
fn wait(qemu: &mut Child, timeout: Duration, seen: &Seen) -> anyhow::Result<Ending> {
    let started = Instant::now();
    while qemu.try_wait()?.is_none() {
        let stuck = if let Some(line) = seen.lost_timer.lock().expect("not poisoned").clone() {
            Some(format!("the kernel said: {line}"))
        } else if !seen.init_started.load(Ordering::Relaxed)
            && started.elapsed() >= FIRST_LINE_WITHIN
        {
            Some(format!(
                "/init printed nothing within {} s",
                FIRST_LINE_WITHIN.as_secs()
            ))
        } else {
            None
        };
        let ending = match stuck {
            Some(why) => Ending::Stuck(why),
            None if started.elapsed() >= timeout => Ending::TimedOut(timeout),
            None => {
                thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        qemu.kill()?;
        qemu.wait()?;
        return Ok(ending);
    }
    Ok(Ending::PoweredOff)
}

/// Writes every console line to the log, echoes it from /init's first line
/// on (the kernel's boot messages stay in the log), notes what `wait` needs,
/// and returns the whole console.
fn stream_console(
    stdout: impl std::io::Read,
    mut log: fs::File,
    prefix: &str,
    seen: &Seen,
) -> anyhow::Result<String> {
    let mut console = String::new();
    let mut init_started = false;
    for line in BufReader::new(stdout).split(b'\n') {
        let line = String::from_utf8_lossy(&line?).trim_end().to_string();
        writeln!(log, "{line}")?;
        if !init_started && INIT_PREFIXES.iter().any(|p| line.starts_with(p)) {
            init_started = true;
            seen.init_started.store(true, Ordering::Relaxed);
        }
        if line.contains(LOST_TIMER) {
            seen.lost_timer
                .lock()
                .expect("not poisoned")
                .get_or_insert_with(|| line.trim().to_string());
        }
        if init_started {
            eprintln!("{prefix}{line}");
        }
        console.push_str(&line);
        console.push('\n');
    }
    Ok(console)
}

/// What one boot of a guest left.
pub(crate) struct GuestRun {
    /// Everything on the first serial port.
    pub console: String,
    pub console_log: PathBuf,
    /// What its init wrote to the second serial port.
    pub result: String,
    pub ending: Ending,
    pub seconds: f64,
}

/// A guest machine: 2 vCPUs, a kernel and its initramfs, and the disks a
/// recipe adds. The first serial port is the console, the second the
/// result file.
pub(crate) struct Machine<'a> {
    pub vmlinuz: &'a Path,
    pub initramfs: &'a Path,
    pub memory: &'static str,
    /// The kernel command line after `console=ttyS0 panic=-1` (with
    /// -no-reboot, a panicking guest ends qemu at once).
    pub append: &'a str,
    /// Raw disk images, written only in a snapshot of this boot.
    pub disks: &'a [&'a Path],
    /// An emulated IOMMU (q35 with Intel's VT-d), so that PCI devices have
    /// IOMMU groups a VFIO driver can take.
    pub iommu: bool,
}

impl<'a> Machine<'a> {
    /// A busybox guest: the kernel and its initramfs, nothing else.
    pub(crate) fn busybox(vmlinuz: &'a Path, initramfs: &'a Path) -> Self {
        Self {
            vmlinuz,
            initramfs,
            memory: "1G",
            append: "",
            disks: &[],
            iommu: false,
        }
    }

    pub(crate) fn command(&self, result_file: &Path) -> Command {
        let (accel, cpu) = if kvm_usable() {
            ("kvm", "host")
        } else {
            ("tcg", "max")
        };
        let mut command = Command::new("qemu-system-x86_64");
        command
            .args(["-accel", accel, "-cpu", cpu, "-m", self.memory, "-smp", "2"])
            .args(["-nographic", "-monitor", "none", "-no-reboot"]);
        if self.iommu {
            // Before any other PCI device, as qemu requires of the IOMMU.
            command.args(["-machine", "q35", "-device", "intel-iommu"]);
        }
        command
            .arg("-kernel")
            .arg(self.vmlinuz)
            .arg("-initrd")
            .arg(self.initramfs)
            .arg("-append")
            .arg(format!("console=ttyS0 panic=-1 {}", self.append).trim_end());
        if !self.disks.is_empty() {
            command.arg("-snapshot");
        }
        for disk in self.disks {
            command.arg("-drive").arg(format!(
                "file={},format=raw,if=virtio,cache=unsafe",
                disk.display()
            ));
        }
        command
            .args(["-serial", "stdio", "-serial"])
            .arg(format!("file:{}", result_file.display()));
        command
    }

    /// Boots until the guest powers off (killed after `timeout`, booted once
    /// more if stuck in the emulator), echoing the console with `prefix` and
    /// keeping it in `dir`.
    pub(crate) fn boot(
        &self,
        dir: &Path,
        prefix: &str,
        timeout: Duration,
    ) -> anyhow::Result<GuestRun> {
        fs::create_dir_all(dir)?;
        let console_log = dir.join("console.log");
        let result_file = dir.join("result");
        eprintln!(
            "xtask: booting {}, console in {}",
            self.vmlinuz.display(),
            console_log.display()
        );
        let run = run_qemu(
            || self.command(&result_file),
            &result_file,
            &console_log,
            prefix,
            timeout,
        )?;
        Ok(GuestRun {
            console: run.console,
            console_log,
            result: fs::read_to_string(&result_file).unwrap_or_default(),
            ending: run.ending,
            seconds: run.seconds,
        })
    }
}

/// KVM only where it works: this kind of build machine has a /dev/kvm, yet a
/// guest hangs on it; the CPU flags tell the two apart.
pub(crate) fn kvm_usable() -> bool {
    let opens = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .is_ok();
    opens
        && fs::read_to_string("/proc/cpuinfo")
            .is_ok_and(|c| c.split_whitespace().any(|w| w == "vmx" || w == "svm"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for qemu: a shell script that counts its boots in `dir`
    /// and prints what the boot of that number prints. A boot that hangs
    /// must `exec` its sleep: killing qemu kills one process, as here.
    fn fake_guest(dir: &Path, boots: &[&str]) -> impl Fn() -> Command {
        let script = boots
            .iter()
            .enumerate()
            .map(|(i, body)| format!("[ $n -eq {} ] && {{ {body}; }}\n", i + 1))
            .collect::<String>();
        let counter = dir.join("boots");
        let script = format!(
            "n=$(( $(cat {c} 2>/dev/null || echo 0) + 1 )); echo $n > {c}\n{script}exit 0",
            c = counter.display()
        );
        move || {
            let mut command = Command::new("sh");
            command.args(["-c", &script]);
            command
        }
    }

    fn boots(dir: &Path) -> String {
        fs::read_to_string(dir.join("boots")).unwrap().trim().into()
    }

    const STUCK: &str = "echo '[  526.2] rcu: rcu_preempt kthread timer wakeup didn'\\''t happen for 15753 jiffies!'; exec sleep 60";

    #[test]
    fn a_guest_that_lost_its_timer_is_killed_at_once_and_booted_again() {
        let dir = tempfile::tempdir().unwrap();
        let guest = fake_guest(dir.path(), &[STUCK, "echo 'gpu-trace-vm: kernel 6.12'"]);
        let log = dir.path().join("console.log");
        let started = Instant::now();
        let run = run_qemu(
            guest,
            &dir.path().join("result"),
            &log,
            "",
            Duration::from_secs(50),
        )
        .unwrap();
        assert!(started.elapsed() < Duration::from_secs(20));
        assert_eq!(boots(dir.path()), "2");
        assert_eq!(run.ending, Ending::PoweredOff);
        assert_eq!(run.console, "gpu-trace-vm: kernel 6.12\n");
        assert_eq!(fs::read_to_string(&log).unwrap(), run.console);
        let old = fs::read_to_string(dir.path().join("console.log.old")).unwrap();
        assert!(old.contains(LOST_TIMER), "{old}");
    }

    #[test]
    fn a_guest_stuck_twice_is_reported_stuck_with_the_kernels_words() {
        let dir = tempfile::tempdir().unwrap();
        let guest = fake_guest(dir.path(), &[STUCK, STUCK, "echo third"]);
        let run = run_qemu(
            guest,
            &dir.path().join("result"),
            &dir.path().join("console.log"),
            "",
            Duration::from_secs(50),
        )
        .unwrap();
        assert_eq!(boots(dir.path()), "2");
        let Ending::Stuck(why) = run.ending else {
            panic!("not stuck: {:?}", run.ending);
        };
        assert!(
            why.starts_with(
                "the kernel said: [  526.2] rcu: rcu_preempt kthread timer wakeup didn't happen"
            ),
            "{why}"
        );
    }

    #[test]
    fn a_guest_that_runs_is_booted_once_and_a_slow_one_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let result = dir.path().join("result");
        fs::write(&result, "left from an earlier run").unwrap();
        let guest = fake_guest(dir.path(), &["echo 'gpu-trace-vm: start'; exec sleep 60"]);
        let run = run_qemu(
            guest,
            &result,
            &dir.path().join("console.log"),
            "",
            Duration::from_secs(2),
        )
        .unwrap();
        assert_eq!(boots(dir.path()), "1");
        assert_eq!(run.ending, Ending::TimedOut(Duration::from_secs(2)));
        assert_eq!(
            run.ending.problem().unwrap(),
            "no result within 2 s; qemu killed"
        );
        assert!(
            !result.exists(),
            "an earlier result must not survive a boot"
        );
    }
}
