//! `gpu-trace run -- CMD`: a one-shot trace of a failing CUDA launch.
//!
//! The tracer follows CMD's process tree in the kernel (forks join, exits
//! leave), streams the tree's problems to stderr as they happen, and when
//! CMD exits prints each distinct problem once with its cause and fix.
//! gpu-trace exits with CMD's status.

use std::{
    ffi::OsString,
    io::{self, Write},
    os::unix::process::ExitStatusExt,
    path::{Path, PathBuf},
    process::ExitStatus,
};

use anyhow::Context;
use nix::{
    sys::signal::{kill, Signal},
    unistd::{getpgrp, tcgetpgrp, Pid},
};
use tokio::{
    process::Child,
    signal::unix::{signal, Signal as UnixSignal, SignalKind},
};

use crate::{
    cgroup::{
        resolver::CgroupResolver,
        spawn::place_child_in,
        target::{cgroup_dir, container_dir},
    },
    cli::{tracer_config, RunArgs},
    host::{
        preflight::{check_tracing_host, Host},
        proc_devices::CharMajors,
    },
    kernel::{detach_after_exit::detach_after_exit, open_route::OpensChoice, tracer::Tracer},
    model::exit_status,
    render::{
        announce::{hook_lines, Hooks},
        output::Format,
        run_report::Report,
    },
    stream::{
        event_loop::{event_loop, Controls, FollowDrivers, Step},
        ring_events::event_loop_runtime,
        run_output::RunOutput,
        session::Session,
        stop_signals::StopSignals,
    },
    text::{json, style, terminal::escape},
};

/// Runs the command and returns the status gpu-trace should exit with.
pub fn run(args: RunArgs) -> anyhow::Result<u8> {
    let host = check_tracing_host()?;
    let majors = CharMajors::read().context("reading /proc/devices")?;
    let mut cgroups = CgroupResolver::new(&host.cgroup2_mount);
    let target = target_cgroup(&args, &host, &mut cgroups)?;

    // Allowed accesses come too: the diagnosis learns from them (for
    // example, that 195 was allowed where uvm was denied).
    let mut config = tracer_config(&args.devices, &majors, true, args.tracer, OpensChoice::Full);
    config.follow_process_tree = true;
    let mut session = Session::start(&host.cgroup2_mount, &config, cgroups, majors)?;
    for line in hook_lines(&session.tracer, Hooks::Missing) {
        eprintln!("gpu-trace: {line}");
    }

    let runtime = event_loop_runtime()?;
    let command_text = shell_words(&args.command);
    let (status, report) =
        runtime.block_on(trace_command(&mut session, &args, target.as_deref()))?;
    let lost = session.tracer.lost_events();
    let exit_code = exit_code_of(status);
    let mut err = io::stderr().lock();
    match args.format {
        Format::Human => {
            report.write_human(
                &mut err,
                &command_text,
                &describe_status(status),
                style::paints(&io::stderr()),
            )?;
            if lost > 0 {
                writeln!(err, "gpu-trace: {lost} events were lost (ring buffer full); the report may be incomplete")?;
            }
        }
        Format::Json => {
            let words: Vec<String> = args
                .command
                .iter()
                .map(|w| w.to_string_lossy().into_owned())
                .collect();
            let mut summary = report.to_json(&words, i32::from(exit_code));
            summary["report"]["lost"] = lost.into();
            writeln!(err, "{}", json::to_string(&summary))?;
        }
    }
    // The report is out. Detaching waits on the kernel for a while: a
    // child does it once we have exited, so CMD's status reaches the
    // caller now (kernel/detach_after_exit.rs).
    err.flush()?;
    drop(err);
    detach_after_exit(session.tracer);
    Ok(exit_code)
}

/// The cgroup to start CMD in, if one was asked for.
fn target_cgroup(
    args: &RunArgs,
    host: &Host,
    cgroups: &mut CgroupResolver,
) -> anyhow::Result<Option<PathBuf>> {
    let (container, pod) = (args.container.as_deref(), args.pod.as_ref());
    match &args.cgroup {
        Some(path) => cgroup_dir(&host.cgroup2_mount, path).map(Some),
        None if container.is_some() || pod.is_some() => {
            container_dir(&host.cgroup2_mount, cgroups, container, pod).map(Some)
        }
        None => Ok(None),
    }
}

async fn trace_command(
    session: &mut Session,
    args: &RunArgs,
    target: Option<&Path>,
) -> anyhow::Result<(ExitStatus, Report)> {
    let mut command = std::process::Command::new(&args.command[0]);
    command.args(&args.command[1..]);
    let cgroup_procs = match target {
        Some(dir) => place_child_in(&mut command, &[dir])?,
        None => Vec::new(),
    };
    // Signals are ours before CMD starts, so none can end gpu-trace early.
    let signals = Forwarded::take()?;
    let child = spawn_followed(&mut session.tracer, command, &args.command[0])?;
    drop(cgroup_procs);
    let child_pid = child.id().context("the child has no pid")?;
    if let Some(dir) = target {
        // The directory may be a child cgroup the container named.
        eprintln!(
            "gpu-trace: started pid {child_pid} in cgroup {}",
            escape(&dir.to_string_lossy())
        );
    }
    let mut command = RunningCommand {
        child,
        pid: child_pid,
        signals,
    };
    let kinds = args.devices.kinds();
    let mut output = RunOutput::new(args.format, style::paints(&io::stderr()), &kinds);
    // A failed re-read must not end the trace while CMD runs (no report, no
    // signals forwarded): it is said once, and the majors stay as they are.
    let drivers = if args.devices.all_devices {
        FollowDrivers::No
    } else {
        FollowDrivers::WarnOnError
    };
    // Every access of the tree happened before its exit; what is still in
    // the ring buffer belongs to the run, and nothing of the tree adds to it.
    let status = event_loop(session, &mut output, &mut command, drivers, |_| {}).await?;
    Ok((status, output.report))
}

/// Starts CMD followed by the tracer from its first instruction: our own
/// process joins the followed tree just for the fork, so there is no race.
fn spawn_followed(
    tracer: &mut Tracer,
    command: std::process::Command,
    program: &OsString,
) -> anyhow::Result<Child> {
    let me = std::process::id();
    tracer.follow(me)?;
    let spawned = tokio::process::Command::from(command).spawn();
    tracer.unfollow(me)?;
    spawned.map_err(|e| spawn_error(program, e))
}

/// CMD while it runs: its exit ends the loop, and the signals gpu-trace
/// gets meanwhile are passed on to it.
struct RunningCommand {
    child: Child,
    pid: u32,
    signals: Forwarded,
}

/// The signals passed on to CMD: those that would stop gpu-trace, and
/// SIGQUIT.
struct Forwarded {
    stop: StopSignals,
    quit: UnixSignal,
}

impl Forwarded {
    fn take() -> io::Result<Self> {
        Ok(Self {
            stop: StopSignals::take()?,
            quit: signal(SignalKind::quit())?,
        })
    }
}

impl Controls<RunOutput<'_>> for RunningCommand {
    type Outcome = ExitStatus;

    async fn next(&mut self, _: &mut RunOutput<'_>) -> anyhow::Result<Step<ExitStatus>> {
        let (pid, signals) = (self.pid, &mut self.signals);
        tokio::select! {
            status = self.child.wait() => return Ok(Step::Stop(status?)),
            _ = signals.stop.interrupt.recv() => forward(pid, Signal::SIGINT, true),
            _ = signals.stop.terminate.recv() => forward(pid, Signal::SIGTERM, false),
            _ = signals.stop.hangup.recv() => forward(pid, Signal::SIGHUP, false),
            _ = signals.quit.recv() => forward(pid, Signal::SIGQUIT, true),
        }
        Ok(Step::Continue)
    }
}

/// Passes a signal on to CMD. Keyboard signals (Ctrl-C, Ctrl-\) already
/// reached CMD when both share the terminal's foreground process group;
/// sending them again would deliver them twice.
fn forward(child: u32, signal: Signal, from_keyboard: bool) {
    let terminal_sent_it = from_keyboard && tcgetpgrp(io::stdin()).is_ok_and(|fg| fg == getpgrp());
    if !terminal_sent_it {
        let _ = kill(Pid::from_raw(child as i32), signal);
    }
}

fn spawn_error(program: &OsString, error: io::Error) -> anyhow::Error {
    let code = match error.kind() {
        io::ErrorKind::NotFound => exit_status::COMMAND_NOT_FOUND,
        _ => exit_status::COMMAND_NOT_EXECUTABLE,
    };
    CommandNotStarted {
        code,
        message: format!("cannot run {}: {error}", program.to_string_lossy()),
    }
    .into()
}

/// CMD could not be started; the exit status says why, as shells do.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CommandNotStarted {
    pub code: u8,
    message: String,
}

/// CMD's exit code, or 128+N when a signal N killed it.
fn exit_code_of(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(signal)) => 128u8.saturating_add(signal as u8),
        (None, None) => exit_status::FAILURE,
    }
}

fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => {
            let name = Signal::try_from(signal)
                .map_or_else(|_| signal.to_string(), |s| s.as_str().to_string());
            format!("was killed by {name}")
        }
        (None, None) => "ended".into(),
    }
}

/// The command as a person would type it, for the report.
fn shell_words(words: &[OsString]) -> String {
    words
        .iter()
        .map(|w| {
            let w = w.to_string_lossy();
            if !w.is_empty()
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                w.into_owned()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_follow_shell_conventions() {
        assert_eq!(exit_code_of(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code_of(ExitStatus::from_raw(9)), 137, "SIGKILL");
        assert_eq!(
            describe_status(ExitStatus::from_raw(9)),
            "was killed by SIGKILL"
        );
        assert_eq!(
            describe_status(ExitStatus::from_raw(0)),
            "exited with status 0"
        );
    }

    #[test]
    fn commands_are_quoted_for_the_report() {
        let words: Vec<OsString> = ["python3", "-c", "import torch; x='a'"]
            .map(OsString::from)
            .to_vec();
        assert_eq!(
            shell_words(&words),
            r"python3 -c 'import torch; x='\''a'\'''"
        );
    }
}
