//! `gpu-trace selftest`: the incident, reproduced with no GPU, and the
//! tracer catching it.
//!
//! A scratch cgroup gets a device policy that allows the NVIDIA frontend
//! major and denies a stand-in for the dynamic nvidia-uvm major. A child in
//! that cgroup opens one node of each: the kernel gives EPERM for the denied
//! one and ENXIO ("no driver") for the allowed one. The tracer must report
//! exactly that.

use std::{
    path::Path,
    process, thread,
    time::{Duration, Instant},
};

use anyhow::Context;
use gpu_trace_common::{ACCESS_MKNOD, ACCESS_READ, ACCESS_WRITE};

use crate::{
    analysis::pipeline::Pipeline,
    cgroup::paths::CgroupPaths,
    cli::TracerArgs,
    host::preflight::check_host,
    host::proc_devices::CharMajors,
    kernel::tracer::Tracer,
    kernel::tracer::TracerConfig,
    model::access::Verdict,
    model::denied_by::DeniedBy,
    model::node::NVIDIA_FRONTEND_MAJOR,
    model::record::Record,
    render::announce::{hook_lines, Hooks},
    render::output::errno_name,
    render::output::human_line,
    scenario::run_probe,
    scenario::DeviceNodes,
    scenario::OpenMode,
    scenario::ProbeOp,
    scenario::ScratchCgroup,
    scenario::ScratchPolicy,
};

/// How long to wait for the tracer's events after the child has exited.
const EVENT_DEADLINE: Duration = Duration::from_secs(3);

/// Returns Ok(true) on PASS, Ok(false) on FAIL (already explained).
pub fn run(args: TracerArgs) -> anyhow::Result<bool> {
    let host = check_host()?;
    let majors = CharMajors::read().context("reading /proc/devices")?;
    let uvm_standin = majors
        .unused_dynamic_major()
        .context("every char major from 384 to 511 is taken; no stand-in for nvidia-uvm")?;
    let frontend = NVIDIA_FRONTEND_MAJOR;

    println!("gpu-trace selftest: the nvidia-uvm incident, reproduced without a GPU");
    println!(
        "  kernel {}, cgroup2 at {}",
        host.kernel,
        host.cgroup2_mount.display()
    );

    let cgroup = ScratchCgroup::create(
        &host.cgroup2_mount,
        &format!("gpu-trace-selftest-{}", process::id()),
    )?;
    let policy = ScratchPolicy::attach(
        &cgroup,
        &[(uvm_standin, ACCESS_READ | ACCESS_WRITE | ACCESS_MKNOD)],
    )?;
    println!(
        "  scratch cgroup {} with device policy prog {}: allows c {frontend}:*, denies c {uvm_standin}:* rwm",
        cgroup.path().display(),
        policy.program_id().map_or("?".into(), |id| id.to_string()),
    );
    let nodes = DeviceNodes::create(&[("nvidia0", frontend, 0), ("nvidia-uvm", uvm_standin, 0)])?;
    println!(
        "  device nodes in {}: nvidia0 = c {frontend}:0, nvidia-uvm = c {uvm_standin}:0 (stand-in for the dynamic uvm major)",
        nodes.dir().display()
    );

    let config = TracerConfig {
        majors: vec![frontend, uvm_standin],
        all_devices: false,
        report_allowed: true,
        hook: args.hook,
        device_hook_only: args.device_hook_only,
        ..TracerConfig::default()
    };
    let mut tracer = Tracer::start(&host.cgroup2_mount, &config)?;
    for line in hook_lines(&tracer, Hooks::All) {
        println!("  {line}");
    }

    let allowed_node = nodes.path("nvidia0");
    let denied_node = nodes.path("nvidia-uvm");
    let ops = [
        ProbeOp::Open {
            path: allowed_node.clone(),
            mode: OpenMode::ReadWrite,
        },
        ProbeOp::Open {
            path: denied_node.clone(),
            mode: OpenMode::ReadWrite,
        },
    ];
    let exe = std::env::current_exe().context("finding gpu-trace's own executable")?;
    let child = run_probe(&exe, &[&cgroup], &ops)?;
    println!(
        "  child pid {} in the scratch cgroup opened both nodes O_RDWR",
        child.pid
    );

    let cgroups = CgroupPaths::new(&host.cgroup2_mount).with_cgroups_made(
        tracer
            .take_cgroup_paths()
            .map(|made| move |id| made.path(id)),
    );
    let mut pipeline = Pipeline::new(cgroups, majors.clone());
    let records = collect_child_events(&mut tracer, &mut pipeline, child.pid, 2);
    println!();
    println!("  what the tracer reported:");
    for record in &records {
        println!("    {}", human_line(record));
    }
    println!();
    println!("  {:<48} {:<10} tracer caught", "node", "child saw");
    let expectations = [
        Expect {
            node: &allowed_node,
            major: frontend,
            child_errno: child.results[0],
            denied: false,
        },
        Expect {
            node: &denied_node,
            major: uvm_standin,
            child_errno: child.results[1],
            denied: true,
        },
    ];
    let driver_present = majors.is_registered(frontend);
    let mut failures = Vec::new();
    for expect in &expectations {
        let caught = records.iter().find(|r| {
            r.access
                .open
                .as_ref()
                .is_some_and(|o| o.path == expect.node.as_os_str().as_encoded_bytes())
        });
        println!(
            "  {:<48} {:<10} {}",
            format!("{} (c {}:0)", expect.node.display(), expect.major),
            if expect.child_errno == 0 {
                "ok".to_string()
            } else {
                errno_name(expect.child_errno)
            },
            caught.map_or("nothing".to_string(), describe),
        );
        failures.extend(expect.check(caught, cgroup.relative_path(), child.pid, driver_present));
    }
    // The denial must be attributed to the very program the selftest attached.
    let culprit = records
        .iter()
        .find_map(|r| r.denied_by.as_deref())
        .map(|c| &**c);
    match (culprit, policy.program_id()) {
        (Some(DeniedBy::Program { id, .. }), Some(expected)) if *id == expected => {}
        (other, expected) => failures.push(format!(
            "the denial should be attributed to the scratch policy (prog {}), gpu-trace said {}",
            expected.map_or("?".into(), |id| id.to_string()),
            other.map_or("nothing".into(), DeniedBy::describe)
        )),
    }
    let lost = tracer.lost_events();
    if lost > 0 {
        failures.push(format!("{lost} events lost"));
    }
    drop(tracer);
    drop(policy);
    println!();
    if failures.is_empty() {
        let result = if args.device_hook_only {
            ""
        } else {
            " and EPERM"
        };
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
        Ok(true)
    } else {
        for failure in &failures {
            println!("FAIL: {failure}");
        }
        Ok(false)
    }
}

struct Expect<'a> {
    node: &'a Path,
    major: u32,
    child_errno: i32,
    denied: bool,
}

impl Expect<'_> {
    /// What is wrong with the child's result and the tracer's record, if anything.
    fn check(
        &self,
        caught: Option<&Record>,
        cgroup: &Path,
        pid: u32,
        driver_present: bool,
    ) -> Vec<String> {
        let node = self.node.display();
        let mut wrong = Vec::new();
        match (self.denied, self.child_errno) {
            (true, libc::EPERM) => {}
            (true, other) => wrong.push(format!(
                "the policy should deny {node} with EPERM, the child got {}",
                errno_name(other)
            )),
            (false, libc::EPERM) => {
                wrong.push(format!("{node} should be allowed, the child got EPERM"))
            }
            // With no NVIDIA driver loaded the allowed node opens into ENXIO.
            (false, errno) if !driver_present && errno != libc::ENXIO => wrong.push(format!(
                "{node} should give ENXIO (no driver), the child got {}",
                errno_name(errno)
            )),
            _ => {}
        }
        let Some(record) = caught else {
            wrong.push(format!("the tracer reported nothing for {node}"));
            return wrong;
        };
        let a = &record.access;
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
        let Some(open) = &a.open else {
            wrong.push(format!("{node}: the tracer saw no path"));
            return wrong;
        };
        if open.path != self.node.as_os_str().as_encoded_bytes() {
            wrong.push(format!(
                "{node}: tracer saw path {}",
                String::from_utf8_lossy(&open.path)
            ));
        }
        // Unknown with --device-hook-only, which leaves the open's exit out.
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
fn collect_child_events(
    tracer: &mut Tracer,
    pipeline: &mut Pipeline,
    pid: u32,
    expected: usize,
) -> Vec<Record> {
    let deadline = Instant::now() + EVENT_DEADLINE;
    let mut records = Vec::new();
    while records.len() < expected && Instant::now() < deadline {
        tracer.drain(usize::MAX, |access| {
            if access.pid == pid {
                records.push(pipeline.process(access));
            }
        });
        thread::sleep(Duration::from_millis(10));
    }
    records
}
