//! Colour: `watch` on a real pseudo-terminal (util-linux `script` gives it
//! one) colours the verdict and the fix; piped, or with NO_COLOR or
//! `--color never`, its lines carry no escape sequence at all.

use std::{
    io::Read,
    sync::{Arc, Mutex},
};

use crate::common::*;

/// What `script` typed out while `watch ARGS` saw one denied open of the
/// incident's uvm node; `pty`: on a pseudo-terminal, else through a pipe.
fn watch_output(incident: &Incident, pty: bool, env: &[(&str, &str)], args: &[&str]) -> String {
    let major = incident.uvm_major.to_string();
    let mut watch = vec![gpu_trace(), "watch", "--major", &major];
    watch.extend(args);
    let mut command = if pty {
        // exec: the pty's process is gpu-trace itself, which we interrupt.
        let line = format!("exec {}", watch.join(" "));
        let mut c = Command::new("script");
        c.args(["-qfc", &line, "/dev/null"]);
        c
    } else {
        let mut c = Command::new(watch[0]);
        c.args(&watch[1..]);
        c.stderr(Stdio::piped());
        c
    };
    command
        .env_remove("NO_COLOR")
        .env_remove("CLICOLOR_FORCE")
        .env_remove("CLICOLOR")
        .env("TERM", "xterm-256color")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    let mut child = command.spawn().expect("start watch");
    let seen = Arc::new(Mutex::new(String::new()));
    let mut readers = Vec::new();
    let stdout: Box<dyn Read + Send> = Box::new(child.stdout.take().expect("stdout"));
    let streams: Vec<Box<dyn Read + Send>> = match child.stderr.take() {
        Some(stderr) => vec![stdout, Box::new(stderr)],
        None => vec![stdout],
    };
    for mut stream in streams {
        let seen = Arc::clone(&seen);
        readers.push(thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = stream.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock()
                    .expect("lock")
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        }));
    }
    let mut wait_for = |what: &str| {
        let deadline = Instant::now() + WAIT;
        while !seen.lock().expect("lock").contains(what) {
            // A pty that could not be had ends script at once: say so.
            if let Some(status) = child.try_wait().expect("wait") {
                panic!("watch ended ({status}) before {what:?}: {:?}", seen.lock());
            }
            assert!(
                Instant::now() < deadline,
                "no {what:?} in {:?}",
                seen.lock()
            );
            thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    wait_for("ready:");
    incident.deny_once();
    wait_for("EPERM");
    wait_for("fix (");
    // The process on the pty is gpu-trace (exec'd by script's shell).
    let watch_pid = if pty {
        let children = std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", child.id()))
            .expect("script's children");
        children.trim().parse::<i32>().expect("one child")
    } else {
        child.id() as i32
    };
    kill(Pid::from_raw(watch_pid), Signal::SIGINT).expect("interrupt watch");
    assert!(child.wait().expect("wait").success());
    for reader in readers {
        reader.join().expect("reader");
    }
    let text = seen.lock().expect("lock").clone();
    text
}

#[test]
fn watch_colours_a_terminal_and_nothing_else() {
    let incident = or_skip!(incident_test, "colour");
    let red_denied = "\u{1b}[1m\u{1b}[31mDENIED \u{1b}[0m";
    let green_fix = "\u{1b}[1m\u{1b}[32mfix (";

    let on_pty = watch_output(&incident, true, &[], &[]);
    assert!(on_pty.contains(red_denied), "{on_pty:?}");
    assert!(on_pty.contains(green_fix), "{on_pty:?}");
    // Every escape is one of ours: the denial's path and names stay inert.
    let ours = on_pty.replace("\u{1b}[1m", "").replace("\u{1b}[31m", "");
    let ours = ours.replace("\u{1b}[32m", "").replace("\u{1b}[0m", "");
    assert!(!ours.contains('\u{1b}'), "{on_pty:?}");

    for (case, env, args) in [
        ("NO_COLOR on a terminal", &[("NO_COLOR", "1")][..], &[][..]),
        ("--color never on a terminal", &[], &["--color", "never"]),
    ] {
        let text = watch_output(&incident, true, env, args);
        assert!(text.contains("DENIED"), "{case}: {text:?}");
        assert!(!text.contains('\u{1b}'), "{case}: {text:?}");
    }
    let piped = watch_output(&incident, false, &[], &[]);
    assert!(piped.contains("DENIED"), "{piped:?}");
    assert!(!piped.contains('\u{1b}'), "piped: {piped:?}");
    // CLICOLOR_FORCE colours even a pipe, as its users ask.
    let forced = watch_output(&incident, false, &[("CLICOLOR_FORCE", "1")], &[]);
    assert!(forced.contains(red_denied), "{forced:?}");
}
