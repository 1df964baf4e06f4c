//! `gpu-trace selftest`: the incident, reproduced with no GPU, and the
//! tracer catching it.
//!
//! A scratch cgroup gets a device policy that allows the NVIDIA frontend
//! major and denies a stand-in for the dynamic nvidia-uvm major. A child in
//! that cgroup opens one node of each: the kernel gives EPERM for the denied
//! one and ENXIO ("no driver") for the allowed one. The tracer must report
//! exactly that.

use std::{
    path::{Path, PathBuf},
    process, thread,
    time::{Duration, Instant},
};

use anyhow::Context;

use crate::{
    cgroup::resolver::CgroupResolver,
    cli::TracerArgs,
    host::{preflight::check_tracing_host, proc_devices::CharMajors},
    kernel::{
        bpf_log::BpfLogLevel,
        open_route::{OpenRoute, OpensChoice},
        tracer::TracerConfig,
    },
    model::{
        access::{OpenCall, Verdict},
        denied_by::DeniedBy,
        node::NVIDIA_FRONTEND_MAJOR,
        record::Record,
    },
    render::{
        announce::{hook_lines, Hooks},
        output::{errno_name, write_human},
    },
    scenario::{
        incident::{Incident, GPU_NODE, UVM_NODE},
        interrupt, ProbeOutcome,
    },
    stream::session::Session,
};

/// How long to wait for the tracer's events after the child has exited.
const EVENT_DEADLINE: Duration = Duration::from_secs(3);

/// Returns Ok(true) on PASS, Ok(false) on FAIL (already explained).
pub fn run(args: TracerArgs) -> anyhow::Result<bool> {
    let host = check_tracing_host()?;
    // Before any thread starts: an interrupt removes what we make.
    interrupt::take_signals()?;
    let majors = CharMajors::read().context("reading /proc/devices")?;
    let uvm_standin = majors
        .unused_dynamic_major()
        .context("every char major from 384 to 511 is taken; no stand-in for nvidia-uvm")?;

    println!("gpu-trace selftest: the nvidia-uvm incident, reproduced without a GPU");
    println!(
        "  kernel {}, cgroup2 at {}",
        host.kernel,
        host.cgroup2_mount.display()
    );

    let incident = set_up(&host.cgroup2_mount, uvm_standin)?;
    let mut session = start_session(&host.cgroup2_mount, &args, uvm_standin, &majors)?;
    let child = run_child(&incident)?;
    let records = collect_child_events(&mut session, child.pid, 2);
    print_records(&records);

    let expectations = expectations(&incident, &child);
    print_table(&expectations, &records);
    let driver_present = majors.is_registered(NVIDIA_FRONTEND_MAJOR);
    let mut failures = judge(
        &incident,
        &expectations,
        &records,
        child.pid,
        driver_present,
    );
    let lost = session.tracer.lost_events();
    if lost > 0 {
        failures.push(format!("{lost} events lost"));
    }
    let results_traced = session.tracer.open_route() != OpenRoute::None;
    session.tracer.finish_bpf_log();
    drop(session);
    drop(incident.policy);
    Ok(print_verdict(
        &failures,
        &records,
        results_traced,
        uvm_standin,
    ))
}

/// The incident in a scratch cgroup, said as it is made; an interrupt
/// removes what was made.
fn set_up(cgroup2_mount: &Path, uvm_standin: u32) -> anyhow::Result<Incident> {
    let frontend = NVIDIA_FRONTEND_MAJOR;
    let incident = Incident::set_up(
        cgroup2_mount,
        &format!("gpu-trace-selftest-{}", process::id()),
        uvm_standin,
        interrupt::register,
    )?;
    println!(
        "  scratch cgroup {} with device policy prog {}: allows c {frontend}:*, denies c {uvm_standin}:* rwm",
        incident.cgroup.path().display(),
        incident
            .policy
            .program_id()
            .map_or("?".into(), |id| id.to_string()),
    );
    println!(
        "  device nodes in {}: nvidia0 = c {frontend}:0, nvidia-uvm = c {uvm_standin}:0 (stand-in for the dynamic uvm major)",
        incident.nodes.dir().display()
    );
    Ok(incident)
}

/// The nodes the child opens, in order: one the policy allows, one it denies.
const OPENED: [&str; 2] = [GPU_NODE, UVM_NODE];

/// Runs a child in the scratch cgroup that opens both nodes.
fn run_child(incident: &Incident) -> anyhow::Result<ProbeOutcome> {
    let exe = std::env::current_exe().context("finding gpu-trace's own executable")?;
    let child = incident.open_in_cgroup(&exe, &OPENED)?;
    println!(
        "  child pid {} in the scratch cgroup opened both nodes O_RDWR",
        child.pid
    );
    Ok(child)
}

/// What each node should have given, in the order the child opened them.
fn expectations(incident: &Incident, child: &ProbeOutcome) -> [Expect; 2] {
    [
        Expect {
            node: incident.node(GPU_NODE),
            major: NVIDIA_FRONTEND_MAJOR,
            child_errno: child.results[0],
            denied: false,
        },
        Expect {
            node: incident.node(UVM_NODE),
            major: incident.uvm_major,
            child_errno: child.results[1],
            denied: true,
        },
    ]
}

/// Everything the child or the tracer got wrong; empty on PASS.
fn judge(
    incident: &Incident,
    expectations: &[Expect],
    records: &[Record],
    pid: u32,
    driver_present: bool,
) -> Vec<String> {
    let mut failures: Vec<String> = expectations
        .iter()
        .flat_map(|expect| {
            let caught = expect.caught(records);
            expect.check(caught, incident.cgroup.relative_path(), pid, driver_present)
        })
        .collect();
    failures.extend(misattribution(records, incident.policy.program_id()));
    failures
}

/// Starts the tracer on both majors, reporting allowed accesses too, and
/// the same pipeline `watch` uses.
fn start_session(
    cgroup2_mount: &Path,
    args: &TracerArgs,
    uvm_standin: u32,
    majors: &CharMajors,
) -> anyhow::Result<Session> {
    let config = TracerConfig {
        majors: vec![NVIDIA_FRONTEND_MAJOR, uvm_standin],
        all_devices: false,
        report_allowed: true,
        hook: args.hook,
        // A one-shot check of the whole picture, as `run` sees it.
        opens: args.opens_or(OpensChoice::Full),
        // A first look: say what the kernel side dropped, if anything.
        bpf_log: args.bpf_log.unwrap_or(BpfLogLevel::Warn),
        ..TracerConfig::default()
    };
    let cgroups = CgroupResolver::new(cgroup2_mount);
    let session = Session::start(cgroup2_mount, &config, cgroups, majors.clone())?;
    for line in hook_lines(&session.tracer, Hooks::All) {
        println!("  {line}");
    }
    Ok(session)
}

fn print_records(records: &[Record]) {
    println!();
    println!("  what the tracer reported:");
    let mut out = std::io::stdout().lock();
    for record in records {
        let _ = write_human(&mut out, record, "    ", false);
    }
}

/// One row per node: what the child saw beside what the tracer caught.
fn print_table(expectations: &[Expect], records: &[Record]) {
    println!();
    println!("  {:<48} {:<10} tracer caught", "node", "child saw");
    for expect in expectations {
        println!(
            "  {:<48} {:<10} {}",
            format!("{} (c {}:0)", expect.node.display(), expect.major),
            if expect.child_errno == 0 {
                "ok".to_string()
            } else {
                errno_name(expect.child_errno)
            },
            expect
                .caught(records)
                .map_or("nothing".to_string(), describe),
        );
    }
}

/// The denial must be attributed to the very program the selftest attached.
fn misattribution(records: &[Record], expected: Option<u32>) -> Option<String> {
    let culprit = records
        .iter()
        .find_map(|r| r.denied_by.as_deref())
        .map(|c| &**c);
    match (culprit, expected) {
        (Some(DeniedBy::Program { id, .. }), Some(expected)) if *id == expected => None,
        (other, expected) => Some(format!(
            "the denial should be attributed to the scratch policy (prog {}), gpu-trace said {}",
            expected.map_or("?".into(), |id| id.to_string()),
            other.map_or("nothing".into(), DeniedBy::describe)
        )),
    }
}

/// Prints PASS with gpu-trace's diagnosis, or every failure; true on PASS.
fn print_verdict(
    failures: &[String],
    records: &[Record],
    results_traced: bool,
    uvm_standin: u32,
) -> bool {
    println!();
    if !failures.is_empty() {
        for failure in failures {
            println!("FAIL: {failure}");
        }
        return false;
    }
    let frontend = NVIDIA_FRONTEND_MAJOR;
    let result = if results_traced { " and EPERM" } else { "" };
    println!(
        "PASS: the denied open of c {uvm_standin}:0 was caught live with its cgroup, pid, path{result}, \
attributed to the device policy program that denied it; the allowed c {frontend}:0 was seen as allowed."
    );
    if let Some(diagnosis) = records.iter().find_map(|r| r.diagnosis.as_ref()) {
        println!(
            "      The diagnosis gpu-trace gives for it ({}):",
            diagnosis.cause.id()
        );
        println!("        {}", diagnosis.explanation);
        for step in &diagnosis.fix {
            println!("        fix: {step}");
        }
    }
    true
}

struct Expect {
    node: PathBuf,
    major: u32,
    child_errno: i32,
    denied: bool,
}

impl Expect {
    /// The tracer's record of the open of this node, if it made one.
    fn caught<'r>(&self, records: &'r [Record]) -> Option<&'r Record> {
        records.iter().find(|r| {
            r.access
                .open
                .as_ref()
                .is_some_and(|o| o.path == self.node.as_os_str().as_encoded_bytes())
        })
    }

    /// What is wrong with the child's result and the tracer's record, if anything.
    fn check(
        &self,
        caught: Option<&Record>,
        cgroup: &Path,
        pid: u32,
        driver_present: bool,
    ) -> Vec<String> {
        let mut wrong: Vec<String> = self.check_child(driver_present).into_iter().collect();
        match caught {
            Some(record) => wrong.extend(self.check_record(record, cgroup, pid)),
            None => wrong.push(format!(
                "the tracer reported nothing for {}",
                self.node.display()
            )),
        }
        wrong
    }

    /// What the kernel should have answered the child.
    fn check_child(&self, driver_present: bool) -> Option<String> {
        let node = self.node.display();
        match (self.denied, self.child_errno) {
            (true, libc::EPERM) => None,
            (true, other) => Some(format!(
                "the policy should deny {node} with EPERM, the child got {}",
                errno_name(other)
            )),
            (false, libc::EPERM) => Some(format!("{node} should be allowed, the child got EPERM")),
            // With no NVIDIA driver loaded the allowed node opens into ENXIO.
            (false, errno) if !driver_present && errno != libc::ENXIO => Some(format!(
                "{node} should give ENXIO (no driver), the child got {}",
                errno_name(errno)
            )),
            _ => None,
        }
    }

    /// The record's verdict, device, pid and cgroup, then its open call.
    fn check_record(&self, record: &Record, cgroup: &Path, pid: u32) -> Vec<String> {
        let node = self.node.display();
        let a = &record.access;
        let mut wrong = Vec::new();
        let expected_verdict = if self.denied {
            Verdict::DeniedByBpfPolicy
        } else {
            Verdict::Allowed
        };
        if a.verdict != expected_verdict {
            wrong.push(format!(
                "{node}: tracer verdict {:?}, expected {expected_verdict:?}",
                a.verdict
            ));
        }
        if (a.major, a.minor, a.access_letters().as_str()) != (self.major, 0, "rw") {
            wrong.push(format!(
                "{node}: tracer saw c {}:{} {}, expected c {}:0 rw",
                a.major,
                a.minor,
                a.access_letters(),
                self.major
            ));
        }
        if a.pid != pid {
            wrong.push(format!(
                "{node}: tracer saw pid {}, the child was {pid}",
                a.pid
            ));
        }
        if record.cgroup.as_deref() != Some(cgroup) {
            wrong.push(format!(
                "{node}: tracer saw cgroup {:?}, expected {}",
                record.cgroup,
                cgroup.display()
            ));
        }
        match &a.open {
            Some(open) => wrong.extend(self.check_open(open)),
            None => wrong.push(format!("{node}: the tracer saw no path")),
        }
        wrong
    }

    /// The open call's path and result.
    fn check_open(&self, open: &OpenCall) -> Vec<String> {
        let node = self.node.display();
        let mut wrong = Vec::new();
        if open.path != self.node.as_os_str().as_encoded_bytes() {
            wrong.push(format!(
                "{node}: tracer saw path {}",
                String::from_utf8_lossy(&open.path)
            ));
        }
        // Unknown without an open route (--opens none).
        if open.ret.is_some() {
            let errno = open.errno().unwrap_or(0);
            if errno != self.child_errno {
                wrong.push(format!(
                    "{node}: tracer saw errno {errno}, the child got {}",
                    self.child_errno
                ));
            }
        }
        wrong
    }
}

fn describe(record: &Record) -> String {
    match (&record.access.verdict, &record.denied_by) {
        (Verdict::Allowed, _) => "allowed".to_string(),
        (_, Some(culprit)) => format!("DENIED by {}", culprit.describe()),
        (verdict, None) => format!("DENIED {}", verdict.describe()),
    }
}

/// Reads events until `expected` of them come from `pid` or the deadline passes.
fn collect_child_events(session: &mut Session, pid: u32, expected: usize) -> Vec<Record> {
    let deadline = Instant::now() + EVENT_DEADLINE;
    let mut records = Vec::new();
    while records.len() < expected && Instant::now() < deadline {
        let Session { tracer, pipeline } = &mut *session;
        tracer.drain(usize::MAX, |access| {
            if access.pid == pid {
                records.push(pipeline.process(access));
            }
        });
        tracer.flush_bpf_log();
        thread::sleep(Duration::from_millis(10));
    }
    records
}
