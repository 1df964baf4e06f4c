//! Facts about a process are its own: what a diagnosis reads of /proc/PID
//! after the event must come from the process that was sighted, never from
//! another that got its pid since.

use gpu_trace::model::node::NVIDIA_FRONTEND_MAJOR;

use crate::common::*;

/// uid 65534 in `groups` only, running `args`.
fn as_nobody_in(groups: &str, args: &[&str]) -> Command {
    let mut command = Command::new("setpriv");
    command
        .args(["--reuid=65534", "--regid=65534"])
        .arg(format!("--groups={groups}"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

/// A process started with pid `pid` (free now) running `command`: the
/// kernel hands out the pid after ns_last_pid next, so it is set just below
/// and the start retried while other forks on the host take it first.
fn start_with_pid(pid: u32, mut command: impl FnMut() -> Command) -> std::process::Child {
    for _ in 0..100 {
        fs::write("/proc/sys/kernel/ns_last_pid", (pid - 1).to_string())
            .expect("write ns_last_pid (CONFIG_CHECKPOINT_RESTORE, which Debian's kernels have)");
        let mut child = command().spawn().expect("start");
        if child.id() == pid {
            return child;
        }
        let _ = child.kill();
        let _ = child.wait();
    }
    panic!("pid {pid} was taken by another fork a hundred times in a row");
}

/// An open refused by the node's mode (crw-rw---- root:video) from a shell
/// in group 100 that exits at once; before watch reads the event (it is
/// stopped meanwhile), another process in group 44, the node's, gets the
/// shell's pid. The diagnosis must not read that process's groups and
/// conclude the opener was in the node's group: it says the opener's
/// groups could not be read.
#[test]
fn a_pid_reused_before_the_diagnosis_does_not_lend_its_groups() {
    let _host = or_skip!(kernel_test);
    let node = DevNode::create(NVIDIA_FRONTEND_MAJOR, 252, 0o660);
    std::os::unix::fs::chown(&node.0, Some(0), Some(44)).expect("chown to video");
    let watcher = Watcher::start(&["--format", "json", "--opens", "full", "--fold", "0"]);
    let watch_pid = Pid::from_raw(watcher.child.id() as i32);
    kill(watch_pid, Signal::SIGSTOP).expect("stop watch");

    let script = format!("exec 3<{}", node.0.display());
    let mut opener = as_nobody_in("100", &["sh", "-c", &script])
        .spawn()
        .expect("start the opener");
    let pid = opener.id();
    assert!(
        !opener.wait().expect("opener").success(),
        "the open was allowed"
    );
    // /proc gives start times in clock ticks (10 ms): a pid reused within
    // the tick of its sighting cannot be told apart. Pids come round far
    // slower than that on any host; only ns_last_pid makes it this quick.
    thread::sleep(Duration::from_millis(30));
    let mut successor = start_with_pid(pid, || as_nobody_in("44", &["sleep", "30"]));

    kill(watch_pid, Signal::SIGCONT).expect("continue watch");
    let events = watcher.wait_for_events(pid, 1);
    let _ = successor.kill();
    let _ = successor.wait();
    watcher.stop_cleanly();
    assert_eq!(events.len(), 1, "{events:#?}");
    let event = &events[0];
    assert_eq!(event["errno"], "EACCES", "{event:#}");
    assert_eq!(event["cause"], "file-permissions", "{event:#}");
    assert_event_says(
        event,
        "explanation",
        "the process exited before its groups could be read",
    );
    assert_event_starts(event, "hint", "check `ls -l");
}
