//! selftest makes a scratch cgroup and device nodes; a SIGINT or SIGTERM
//! half-way must leave nothing behind, as success does. The two signals
//! are blocked in every thread and taken by one that removes what was
//! registered, then exits with the status the signal would have given
//! (128 + N). BPF programs and links go with the process, as always.

use std::{fs, path::PathBuf, sync::Mutex, thread, time::Duration};

use nix::sys::signal::{SigSet, Signal};

/// Made by selftest, to be removed on an interrupt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Made {
    /// A cgroup directory: its processes are killed, then it is removed.
    Cgroup(PathBuf),
    /// A directory of device nodes, removed with its contents.
    Dir(PathBuf),
}

static MADE: Mutex<Vec<Made>> = Mutex::new(Vec::new());

/// From now on SIGINT and SIGTERM remove what is registered and end the
/// process. Call before any other thread starts, so that all inherit the
/// blocked mask (children get a clean one: std resets it at spawn).
pub fn take_signals() -> anyhow::Result<()> {
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGINT);
    signals.add(Signal::SIGTERM);
    signals.thread_block()?;
    thread::Builder::new()
        .name("interrupt".into())
        .spawn(move || {
            let signal = signals.wait().unwrap_or(Signal::SIGTERM);
            remove_all();
            eprintln!("gpu-trace selftest: interrupted ({signal}); removed what it made");
            std::process::exit(128 + signal as i32);
        })?;
    Ok(())
}

pub fn register(made: Made) {
    MADE.lock().unwrap_or_else(|e| e.into_inner()).push(made);
}

fn remove_all() {
    let made = std::mem::take(&mut *MADE.lock().unwrap_or_else(|e| e.into_inner()));
    // Nodes first, then cgroups, deepest (latest) first.
    for item in made.iter().rev() {
        match item {
            Made::Dir(dir) => {
                let _ = fs::remove_dir_all(dir);
            }
            Made::Cgroup(dir) => {
                let _ = fs::write(dir.join("cgroup.kill"), "1");
                for _ in 0..50 {
                    if fs::remove_dir(dir).is_ok() || !dir.exists() {
                        break;
                    }
                    thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
}
