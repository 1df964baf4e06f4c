//! How the open calls' path and result reach the tracer, chosen at start-up
//! (`--opens`): the device hook alone sees every device check, but only the
//! open's result shows a missing node (ENOENT), a node without a driver
//! (ENXIO), a refusal by file mode or a security module (EACCES) and, where
//! the device hook is the observer, a cgroup v1 denial.
//!
//! Routes, cheapest first:
//! 1. fexit on the kernel's open function: only opens pay, and nothing runs
//!    at their entry;
//! 2. the open-family syscall tracepoints: while any syscall tracepoint is
//!    enabled, every syscall of every task takes the kernel's slow path;
//! 3. none: the device hook reports each access itself.

use aya::{maps::Array, programs::FExit, Ebpf};
use gpu_trace_common::{map, program, OPEN_CALLS_BY_ENTRY, OPEN_CALLS_BY_RESULT};

use crate::{
    host::{preflight::Unsupported, v1_device_limits::V1DeviceLimits},
    kernel::{
        attach::{attach_tracepoint, Hook, TraceLink},
        device_hook::{one_line, program_mut, DeviceHook, HookChoice},
        lazy_btf::LazyBtf,
    },
};

/// The user's choice.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum OpensChoice {
    /// The cheapest route that sees what this host can deny: fexit on the
    /// open function where the kernel has trampolines; otherwise the syscall tracepoints
    /// only when the device hook needs them (cgroup v1 restrictions, or
    /// verdicts from the errno), else none. `watch`'s default.
    #[default]
    Auto,
    /// Every open's result, whatever it costs: fexit on the open function,
    /// else the syscall tracepoints. `run`'s and `selftest`'s default.
    Full,
    /// fexit on the open function, or stop (exit status 6).
    Fexit,
    /// The syscall tracepoints.
    Tracepoints,
    /// The device hook alone (also `--device-hook-only`).
    None,
}

impl OpensChoice {
    /// As written on the command line.
    pub fn name(self) -> &'static str {
        match self {
            OpensChoice::Auto => "auto",
            OpensChoice::Full => "full",
            OpensChoice::Fexit => "fexit",
            OpensChoice::Tracepoints => "tracepoints",
            OpensChoice::None => "none",
        }
    }
}

/// The route in place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenRoute {
    Function,
    Tracepoints,
    None,
}

/// What was attached, and one line that says what it costs and misses.
pub struct OpenRouteAttached {
    pub route: OpenRoute,
    pub links: Vec<TraceLink>,
    pub hooks: Vec<Hook>,
    pub summary: String,
    /// A cgroup v1 devices hierarchy nobody is in yet: once that changes,
    /// the syscall tracepoints are needed after all.
    pub upgrade_watch: Option<std::path::PathBuf>,
}

/// One open-family syscall: its tracepoints and the programs for them.
struct OpenSyscall {
    name: &'static str,
    enter: &'static str,
    exit: &'static str,
}

const OPEN_SYSCALLS: [OpenSyscall; 3] = [
    OpenSyscall {
        name: "openat",
        enter: program::ENTER_OPENAT,
        exit: program::EXIT_OPENAT,
    },
    OpenSyscall {
        name: "openat2",
        enter: program::ENTER_OPENAT2,
        exit: program::EXIT_OPENAT2,
    },
    OpenSyscall {
        name: "open",
        enter: program::ENTER_OPEN,
        exit: program::EXIT_OPEN,
    },
];

const UNSEEN: &str = "missing nodes (ENOENT), nodes without a driver (ENXIO), \
refusals by file mode or a security module (EACCES)";
const TRACEPOINT_PRICE: &str = "while they are on, every syscall of every task on the host \
takes the kernel's slow path (about +30 % per syscall, docs/benchmarks.md)";

/// Chooses and attaches the route; the device hook is loaded, not attached.
pub fn attach(
    ebpf: &mut Ebpf,
    choice: OpensChoice,
    device_hook: DeviceHook,
    hook_choice: HookChoice,
    registers_known: bool,
    btf: &mut LazyBtf,
) -> anyhow::Result<OpenRouteAttached> {
    let mut hooks = Vec::new();
    let fexit = FexitRoute {
        choice,
        device_hook,
        hook_choice,
        registers_known,
    };
    if let Some(attached) = fexit.try_attach(ebpf, btf, &mut hooks)? {
        return Ok(attached);
    }
    let needs = match choice {
        // (The errno observer, which needs the open's result, stopped
        // gpu-trace earlier.)
        OpensChoice::None => Need::LeftOut("--opens none".into(), None),
        OpensChoice::Full | OpensChoice::Fexit | OpensChoice::Tracepoints => Need::Asked,
        OpensChoice::Auto => auto_need(device_hook),
    };
    match needs {
        Need::LeftOut(why, upgrade_watch) => {
            Ok(left_out(choice, device_hook, &why, upgrade_watch, hooks))
        }
        Need::Asked | Need::Because(_) => {
            let because = match needs {
                Need::Because(why) => why,
                _ => String::new(),
            };
            let mut opens = attach_syscall_tracepoints(ebpf, &because)?;
            hooks.append(&mut opens.hooks);
            Ok(OpenRouteAttached { hooks, ..opens })
        }
    }
}

/// What decides whether the open function's fexit is tried.
struct FexitRoute {
    choice: OpensChoice,
    device_hook: DeviceHook,
    hook_choice: HookChoice,
    registers_known: bool,
}

impl FexitRoute {
    /// Why the fexit route cannot serve here, and what stands in. The errno
    /// observer's sighting is claimed by the call whose entry came before
    /// it, and the function route sees no entry; and without the saved
    /// registers the device hook cannot tell that it is inside an open.
    fn unfit(&self, trampolines_refused: bool) -> Option<(&'static str, &'static str)> {
        if self.device_hook == DeviceHook::ErrnoObserver {
            Some((
                "the errno observer needs each open's entry, which fexit does not see",
                "the syscall tracepoints stand in",
            ))
        } else if !self.registers_known
            && (self.choice == OpensChoice::Fexit || !trampolines_refused)
        {
            Some((
                "the device hook finds no saved user registers to tell it is inside an open",
                "the syscall tracepoints or the device hook alone stand in",
            ))
        } else {
            None
        }
    }

    /// The fexit route when it is wanted, fit and loads; otherwise None,
    /// with why in `hooks` (or an error for `--opens fexit`).
    fn try_attach(
        &self,
        ebpf: &mut Ebpf,
        btf: &mut LazyBtf,
        hooks: &mut Vec<Hook>,
    ) -> anyhow::Result<Option<OpenRouteAttached>> {
        let FexitRoute {
            choice,
            device_hook,
            hook_choice,
            ..
        } = *self;
        let function = || format!("fexit {}", program::OPEN_FUNCTION);
        let wants_function = matches!(
            choice,
            OpensChoice::Auto | OpensChoice::Full | OpensChoice::Fexit
        );
        // Where auto's fexit on the device check was refused, this kernel has no
        // trampolines either: not worth a second refusal.
        let trampolines_refused =
            hook_choice == HookChoice::Auto && device_hook != DeviceHook::Fexit;
        if let Some((reason, stand_in)) = self.unfit(trampolines_refused).filter(|_| wants_function)
        {
            if choice == OpensChoice::Fexit {
                return Err(Unsupported::HookRefused {
                    hook: format!("{} (--opens fexit)", function()),
                    reason: reason.into(),
                }
                .into());
            }
            hooks.push(Hook {
                name: function(),
                refused: Some(format!("{reason}; {stand_in}")),
                stood_in_for: true,
            });
        } else if wants_function && (choice == OpensChoice::Fexit || !trampolines_refused) {
            match attach_open_function(ebpf, btf) {
                Ok(()) => {
                    mark_open_calls_traced(ebpf, OPEN_CALLS_BY_RESULT)?;
                    hooks.push(active(format!(
                        "{} (open calls' path and result)",
                        function()
                    )));
                    let summary =
                        format!("open results traced by {}: only open calls pay", function());
                    return Ok(Some(attached(
                        OpenRoute::Function,
                        Vec::new(),
                        std::mem::take(hooks),
                        summary,
                    )));
                }
                Err(e) if choice == OpensChoice::Fexit => {
                    return Err(Unsupported::HookRefused {
                        hook: format!("{} (--opens fexit)", function()),
                        reason: format!("{e:#}"),
                    }
                    .into())
                }
                Err(e) => hooks.push(Hook {
                    name: function(),
                    refused: Some(format!(
                        "{e:#}; the syscall tracepoints or the device hook alone stand in"
                    )),
                    stood_in_for: true,
                }),
            }
        }
        Ok(None)
    }
}

/// No tracepoints: what that leaves unseen, and when they would come.
fn left_out(
    choice: OpensChoice,
    device_hook: DeviceHook,
    why: &str,
    upgrade_watch: Option<std::path::PathBuf>,
    mut hooks: Vec<Hook>,
) -> OpenRouteAttached {
    hooks.extend(OPEN_SYSCALLS.iter().map(|syscall| Hook {
        name: tracepoint_name(syscall),
        refused: Some(format!(
            "left out (--opens {}): paths come from the device hook, results are not traced",
            choice.name()
        )),
        stood_in_for: true,
    }));
    let v1 = if device_hook == DeviceHook::Fexit || choice == OpensChoice::Auto {
        // (Auto attaches the tracepoints once the v1 hierarchy changes.)
        ""
    } else {
        ", and cgroup v1 denials"
    };
    let upgrade = if upgrade_watch.is_some() {
        "; the syscall tracepoints are attached once a cgroup v1 devices cgroup is made or joined"
    } else {
        ""
    };
    let summary = format!(
        "open results not traced ({why}), so no syscall on the host pays; \
         unseen: {UNSEEN}{v1}{upgrade}; `--opens full` traces them, and {TRACEPOINT_PRICE}"
    );
    OpenRouteAttached {
        upgrade_watch,
        ..attached(OpenRoute::None, Vec::new(), hooks, summary)
    }
}

/// The syscall tracepoints, each optional; `because` (may be empty) says
/// why they were needed.
pub fn attach_syscall_tracepoints(
    ebpf: &mut Ebpf,
    because: &str,
) -> anyhow::Result<OpenRouteAttached> {
    let (links, hooks) = attach_open_syscalls(ebpf)?;
    if links.is_empty() {
        let summary = format!(
            "open results not traced: the kernel refused every syscall tracepoint; unseen: {UNSEEN}"
        );
        return Ok(attached(OpenRoute::None, links, hooks, summary));
    }
    let because = if because.is_empty() {
        String::new()
    } else {
        format!(", needed because {because}")
    };
    let summary =
        format!("open results traced by the syscall tracepoints{because}; {TRACEPOINT_PRICE}");
    Ok(attached(OpenRoute::Tracepoints, links, hooks, summary))
}

/// Why auto does or does not need the syscall tracepoints, once the open function is out.
enum Need {
    /// The user asked for open results.
    Asked,
    Because(String),
    /// Why not, and the unpopulated v1 hierarchy to keep an eye on.
    LeftOut(String, Option<std::path::PathBuf>),
}

fn auto_need(device_hook: DeviceHook) -> Need {
    match device_hook {
        DeviceHook::ErrnoObserver => Need::Because(
            "this kernel's device hook takes its verdict from the open's errno".into(),
        ),
        DeviceHook::Fexit => Need::LeftOut(
            "fexit on the device check sees cgroup v1 denials too".into(),
            None,
        ),
        DeviceHook::Observer => {
            let v1 = V1DeviceLimits::read();
            let why = format!("no BPF trampolines for fexit, and {}", v1.describe());
            match &v1 {
                _ if v1.may_deny() => Need::Because(format!(
                    "{why}: their denials show only in the open's result"
                )),
                V1DeviceLimits::Unpopulated { mount, .. } => {
                    Need::LeftOut(why, Some(mount.clone()))
                }
                _ => Need::LeftOut(why, None),
            }
        }
    }
}

fn attached(
    route: OpenRoute,
    links: Vec<TraceLink>,
    hooks: Vec<Hook>,
    summary: String,
) -> OpenRouteAttached {
    OpenRouteAttached {
        route,
        links,
        hooks,
        summary,
        upgrade_watch: None,
    }
}

fn active(name: String) -> Hook {
    Hook {
        name,
        refused: None,
        stood_in_for: false,
    }
}

fn tracepoint_name(syscall: &OpenSyscall) -> String {
    format!("tracepoints syscalls:sys_{{enter,exit}}_{}", syscall.name)
}

/// Tells the device hook where to leave what it sees (`OPEN_CALLS_*`): set
/// once a route is attached, before the device hook is.
fn mark_open_calls_traced(ebpf: &mut Ebpf, route: u8) -> anyhow::Result<()> {
    let mut flag: Array<_, u8> = Array::try_from(
        ebpf.map_mut(map::OPEN_CALLS_TRACED)
            .ok_or_else(|| anyhow::anyhow!("map {} missing", map::OPEN_CALLS_TRACED))?,
    )?;
    flag.set(0, route, 0)?;
    Ok(())
}

/// Loads and attaches fexit on the open function; the link belongs to `ebpf`.
fn attach_open_function(ebpf: &mut Ebpf, btf: &mut LazyBtf) -> anyhow::Result<()> {
    let btf = btf.get()?;
    let exit: &mut FExit = program_mut(ebpf, program::OPEN_FUNCTION_EXIT)?;
    exit.load(program::OPEN_FUNCTION, btf)
        .map_err(|e| anyhow::anyhow!("load fexit: {}", one_line(&e.into())))?;
    exit.attach()?;
    Ok(())
}

/// The open-family tracepoints, each optional: a refused one leaves its
/// calls to the device hook alone.
fn attach_open_syscalls(ebpf: &mut Ebpf) -> anyhow::Result<(Vec<TraceLink>, Vec<Hook>)> {
    // Every exit, then the flag, then every entry: a call is never stashed
    // without an exit to finish it, and while the device hook does not yet
    // look for calls in flight, no entry stashes one (or the same denial
    // would be sent by the device hook and again by the exit). This order
    // matters when the tracepoints come after the device hook (the upgrade).
    let mut exits = Vec::new();
    let mut hooks = Vec::new();
    for syscall in &OPEN_SYSCALLS {
        match attach_half(ebpf, syscall, Half::Exit) {
            Ok(link) => exits.push((syscall, link)),
            Err(e) => hooks.push(refused_tracepoint(syscall, &e)),
        }
    }
    if !exits.is_empty() {
        mark_open_calls_traced(ebpf, OPEN_CALLS_BY_ENTRY)?;
    }
    let mut links = Vec::new();
    for (syscall, exit) in exits {
        match attach_half(ebpf, syscall, Half::Enter) {
            Ok(enter) => {
                links.extend([exit, enter]);
                hooks.push(active(tracepoint_name(syscall)));
            }
            // Both halves or neither: the exit alone would run for nothing
            // (dropping its link detaches it).
            Err(e) => hooks.push(refused_tracepoint(syscall, &e)),
        }
    }
    Ok((links, hooks))
}

enum Half {
    Enter,
    Exit,
}

/// One of a syscall's two tracepoints, with its program.
fn attach_half(ebpf: &mut Ebpf, syscall: &OpenSyscall, half: Half) -> anyhow::Result<TraceLink> {
    let (program, event) = match half {
        Half::Enter => (syscall.enter, "enter"),
        Half::Exit => (syscall.exit, "exit"),
    };
    attach_tracepoint(
        ebpf,
        program,
        "syscalls",
        &format!("sys_{event}_{}", syscall.name),
    )
}

fn refused_tracepoint(syscall: &OpenSyscall, e: &anyhow::Error) -> Hook {
    Hook {
        name: tracepoint_name(syscall),
        refused: Some(format!(
            "{e:#}; {} calls reach the device hook without their path and errno",
            syscall.name
        )),
        stood_in_for: false,
    }
}
