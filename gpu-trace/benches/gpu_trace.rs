//! `cargo xtask bench`: what gpu-trace costs, measured side by side with a
//! baseline taken in the same run, and with strace and bpftrace.
//!
//! Every figure is a median over repeated runs, with its spread, and each
//! overhead is a ratio to the baseline of the same invocation: these
//! machines are noisy, so absolute times alone would mean little.
//!
//! Run as root. Arguments: `--quick` (fewer, shorter runs), `--json FILE`,
//! `--only GROUP`; inside a matrix guest (xtask/src/vm_bench.rs) `--guest`
//! and `--open-loop FILE` (the loop built beforehand: no compiler there).

#[path = "gpu_trace/collector.rs"]
mod collector;
#[path = "gpu_trace/liveness.rs"]
mod liveness;

use std::{
    fs,
    io::{BufRead, BufReader, Write},
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    thread,
    time::{Duration, Instant},
};

use gpu_trace::{
    cgroup::spawn::place_child_in,
    host::{mountinfo::cgroup2_mount, proc_devices::CharMajors},
    scenario::incident::{Incident, UVM_NODE},
};
use nix::{
    sys::signal::{kill, Signal},
    unistd::Pid,
};
use serde_json::{json, Value};

/// The gpu-trace binary under test: cargo's, or `GPU_TRACE_BIN` (the guests',
/// where cargo's path does not exist).
fn gpu_trace() -> String {
    std::env::var("GPU_TRACE_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_gpu-trace").into())
}

/// The workload: a C loop of open()+close(), timed inside the loop so that
/// process start-up is not part of the figure. Optionally paced to a rate.
/// With the path `--getppid` it makes getppid() calls instead: what every
/// other syscall on the host pays while a tracer is attached.
const OPEN_LOOP_C: &str = include_str!("open_loop.c");

/// The liveness probe: denied opens at a pace, each a first sighting.
const FRESH_PROBE_C: &str = include_str!("fresh_probe.c");

/// The bpftrace side: an opensnoop-like script (entry stashes the path,
/// exit prints it with the result).
const BPFTRACE_SCRIPT: &str = r#"
tracepoint:syscalls:sys_enter_openat { @path[tid] = args->filename; }
tracepoint:syscalls:sys_exit_openat /@path[tid]/ { printf("%d %s %s %d\n", pid, comm, str(@path[tid]), args->ret); delete(@path[tid]); }
"#;

struct Settings {
    /// Inside a matrix guest (`--guest`): the open overhead only, of the
    /// configurations the guest has (no bpftrace, no file output).
    guest: bool,
    runs: usize,
    opens: u64,
    seconds: u64,
    startups: usize,
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let json_out = args
        .iter()
        .position(|a| a == "--json")
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from);
    assert!(
        nix::unistd::geteuid().is_root(),
        "the benchmark attaches tracers: run it as root (cargo xtask bench)"
    );
    let guest = args.iter().any(|a| a == "--guest");
    let settings = if quick {
        Settings {
            guest,
            runs: 5,
            opens: 30_000,
            seconds: 1,
            startups: 5,
        }
    } else {
        Settings {
            guest,
            runs: 11,
            opens: 100_000,
            seconds: 3,
            startups: 15,
        }
    };
    let work = tempfile::Builder::new()
        .prefix("gpu-trace-bench-")
        .tempdir()
        .expect("work dir");
    // `--open-loop FILE`: built beforehand, where there is no compiler (the guests).
    let open_loop = match args.iter().position(|a| a == "--open-loop") {
        Some(i) => PathBuf::from(args.get(i + 1).expect("--open-loop FILE")),
        None => build_open_loop(work.path()),
    };
    let scene = Scene::new(work.path());

    let mut results = json!({
        "date": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "machine": machine(),
        "settings": { "runs": settings.runs, "opens": settings.opens, "seconds": settings.seconds },
    });
    // `--only overhead|repeats|throughput|liveness|startup|tenants|workload` runs one group;
    // a guest runs the overhead group (with the repeats) or the repeats alone.
    let only = args
        .iter()
        .position(|a| a == "--only")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let only = if guest {
        Some(
            only.filter(|o| o == "repeats")
                .unwrap_or("overhead".to_string()),
        )
    } else {
        only
    };
    let wanted = |group: &str| only.as_deref().is_none_or(|o| o == group);
    if wanted("overhead") {
        results["open_overhead"] = open_overhead(&settings, &open_loop, &scene);
    }
    // Part of the overhead group; `--only repeats` runs it alone.
    if wanted("overhead") || wanted("repeats") {
        results["repeated_denial"] = repeated_denial(&settings, &open_loop, &scene);
    }
    if wanted("throughput") {
        results["throughput"] = throughput(&settings, &open_loop, &scene);
    }
    if wanted("liveness") {
        let probe = build_c(work.path(), "fresh_probe", FRESH_PROBE_C);
        let probes = if quick { 50 } else { 200 };
        results["liveness"] = liveness::liveness(probes, &open_loop, &probe, &scene);
    }
    if wanted("startup") {
        results["startup"] = startup(&settings, &scene);
    }
    if wanted("workload") {
        results["workload"] = workload(&settings, work.path(), &scene);
    }
    if wanted("tenants") {
        let cgroups = if quick { 10_000 } else { 100_000 };
        results["tenant_cgroups"] = tenant_cgroups(cgroups, &open_loop, &scene);
        let long_paths = if quick { 10_000 } else { 40_000 };
        results["hostile_shapes"] = hostile_shapes(long_paths, &scene);
    }
    print_tables(&results);
    if let Some(path) = json_out {
        let results = match only.as_deref() {
            Some(group) if !guest => merged_into_earlier(&path, results, group),
            _ => results,
        };
        fs::write(&path, serde_json::to_string_pretty(&results).expect("json"))
            .expect("write results");
        println!("\nresults written to {}", path.display());
    }
}

/// One group's fresh figures laid over the file's earlier ones, so that
/// `--only` does not throw away the other groups: each group it replaces
/// gets a `<group>_date` and a `<group>_machine` of its own (these
/// machines are not always the same kind from one day to the next).
fn merged_into_earlier(path: &Path, fresh: Value, group: &str) -> Value {
    let Some(mut earlier) = fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .filter(Value::is_object)
    else {
        return fresh;
    };
    let date = fresh["date"].clone();
    let machine = fresh["machine"].clone();
    for (key, value) in fresh.as_object().expect("an object").iter() {
        if matches!(key.as_str(), "date" | "machine" | "settings") {
            continue;
        }
        earlier[key] = value.clone();
        earlier[format!("{key}_date")] = date.clone();
        earlier[format!("{key}_machine")] = machine.clone();
    }
    eprintln!(
        "bench: --only {group}: the other groups in {} are kept",
        path.display()
    );
    earlier
}

/// A scratch cgroup whose policy denies a stand-in nvidia-uvm major, and
/// the files the workload opens.
struct Scene {
    /// The incident's cgroup, policy and nodes, as selftest and the tests have them.
    incident: Incident,
    denied_node: PathBuf,
    regular_file: PathBuf,
    major: u32,
}

impl Scene {
    fn new(work: &Path) -> Self {
        let mount = cgroup2_mount()
            .expect("mountinfo")
            .expect("cgroup2 mounted");
        let major = CharMajors::read()
            .expect("/proc/devices")
            .unused_dynamic_major()
            .expect("free major");
        let incident = Incident::set_up(
            &mount,
            &format!("gpu-trace-bench-{}", std::process::id()),
            major,
            |_| {},
        )
        .expect("the incident in a scratch cgroup");
        let regular_file = work.join("regular");
        fs::write(&regular_file, "x").expect("regular file");
        Self {
            denied_node: incident.node(UVM_NODE),
            incident,
            regular_file,
            major,
        }
    }

    fn cgroup(&self) -> &Path {
        self.incident.cgroup.path()
    }
}

fn build_open_loop(work: &Path) -> PathBuf {
    build_c(work, "open_loop", OPEN_LOOP_C)
}

/// `source` compiled into `work`/`name`.
fn build_c(work: &Path, name: &str, source_text: &str) -> PathBuf {
    let source = work.join(name).with_extension("c");
    let binary = work.join(name);
    fs::write(&source, source_text).expect("write C source");
    let status = Command::new("cc")
        .args(["-O2", "-o"])
        .arg(&binary)
        .arg(&source)
        .status()
        .expect("cc");
    assert!(status.success(), "compiling {name}");
    binary
}

/// One workload run: ns per open. `cgroup` places it (and what wraps it).
fn run_loop(
    wrapper: &[&str],
    open_loop: &Path,
    target: &Path,
    opens: u64,
    cgroup: Option<&Path>,
) -> f64 {
    let mut command = Command::new(
        wrapper
            .first()
            .copied()
            .unwrap_or(open_loop.to_str().expect("utf-8")),
    );
    if !wrapper.is_empty() {
        command.args(&wrapper[1..]).arg(open_loop);
    }
    command
        .arg(target)
        .arg(opens.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let _procs = cgroup.map(|c| place_child_in(&mut command, &[c]).expect("join cgroup"));
    // Always the first CPU: this machine's CPUs differ in speed from moment
    // to moment, and a baseline on one against a run on the other measured
    // that instead of the tracer. The tracers' readers are left free (the
    // scheduler puts them on the other CPU); strace, which runs the loop as
    // its child, shares CPU 0 with it.
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let mut cpus: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(0, &mut cpus);
            if libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &cpus) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let output = command.output().expect("run the open loop");
    let text = String::from_utf8_lossy(&output.stdout);
    text.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("open loop said {text:?}"))
}

/// A tracer running in the background for a configuration.
struct Background {
    child: Child,
    /// The line it said it was ready with.
    ready: String,
}

impl Background {
    /// Starts `command` and waits until its stderr/stdout line starting with `ready` shows up.
    fn start(mut command: Command, ready: &str, on_stdout: bool) -> Self {
        if on_stdout {
            command.stdout(Stdio::piped()).stderr(Stdio::null());
        } else {
            command.stderr(Stdio::piped());
        }
        let mut child = command.stdin(Stdio::null()).spawn().expect("start tracer");
        let stream: Box<dyn std::io::Read + Send> = if on_stdout {
            Box::new(child.stdout.take().expect("stdout"))
        } else {
            Box::new(child.stderr.take().expect("stderr"))
        };
        let mut lines = BufReader::new(stream).lines();
        let deadline = Instant::now() + Duration::from_secs(60);
        let ready = loop {
            match lines.next() {
                Some(Ok(line)) if line.contains(ready) => break line,
                Some(_) if Instant::now() < deadline => {}
                _ => panic!("the tracer never printed {ready:?}"),
            }
        };
        // Keep draining so the tracer never blocks on a full pipe.
        thread::spawn(move || for _ in lines {});
        Self { child, ready }
    }

    /// SIGINT (a clean detach) and wait.
    fn stop(mut self) {
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGINT);
        let _ = self.child.wait();
    }
}

fn watch(scene: &Scene, extra: &[&str], stdout: Stdio) -> Background {
    Background::start(
        watch_command(scene, extra, stdout),
        "gpu-trace: ready",
        false,
    )
}

/// `watch`'s command line, to be started by the caller.
fn watch_command(scene: &Scene, extra: &[&str], stdout: Stdio) -> Command {
    // --fold 0 unless `extra` folds: every event is written, as the
    // measurements assume.
    let fold: &[&str] = if extra.contains(&"--fold") {
        &[]
    } else {
        &["--fold", "0"]
    };
    let mut command = Command::new(gpu_trace());
    command
        .args(["watch", "--major", &scene.major.to_string()])
        .args(fold)
        .args(extra)
        .stdout(stdout);
    command
}

fn bpftrace() -> Background {
    let mut command = Command::new("bpftrace");
    command.args(["-e", BPFTRACE_SCRIPT]);
    // bpftrace says "Attaching N probes..." on stdout once it is live; its
    // events go there too and are drained.
    Background::start(command, "Attaching", true)
}

fn median_and_spread(mut values: Vec<f64>) -> (f64, f64, f64) {
    values.sort_by(|a, b| a.total_cmp(b));
    let median = values[values.len() / 2];
    (median, values[0], values[values.len() - 1])
}

/// One configuration's row: the median of its figures (under `unit`) and
/// of its ratios to their paired baselines, each with its spread.
fn paired_entry(config: &str, unit: &str, pairs: Vec<(f64, f64)>) -> Value {
    let (values, ratios): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
    let (median, lo, hi) = median_and_spread(values);
    let (ratio, ratio_lo, ratio_hi) = median_and_spread(ratios);
    json!({ "config": config, unit: median, "min": lo, "max": hi,
            "ratio": ratio, "ratio_min": ratio_lo, "ratio_max": ratio_hi })
}

fn open_overhead(settings: &Settings, open_loop: &Path, scene: &Scene) -> Value {
    let out_file = scene.regular_file.with_file_name("watch.jsonl");
    let mut targets: Vec<(&str, &Path, Option<&Path>)> = vec![
        ("getppid (the syscall tax)", Path::new("--getppid"), None),
        ("regular file", &scene.regular_file, None),
        ("/dev/null", Path::new("/dev/null"), None),
    ];
    if !settings.guest {
        targets.push((
            "denied watched node",
            &scene.denied_node,
            Some(scene.cgroup()),
        ));
    }
    let mut rows = Vec::new();
    for (name, target, cgroup) in targets {
        eprintln!("bench: open overhead, {name}");
        let once =
            |wrapper: &[&str], opens: u64| run_loop(wrapper, open_loop, target, opens, cgroup);
        // Each configuration: start what it needs, time the loop, stop it.
        type Config<'a> = (&'a str, Box<dyn Fn() -> f64 + 'a>);
        let under_watch = |extra: &'static [&'static str], to_file: bool| {
            let out_file = &out_file;
            move || {
                let stdout = if to_file {
                    Stdio::from(fs::File::create(out_file).expect("output file"))
                } else {
                    Stdio::null()
                };
                let tracer = watch(scene, extra, stdout);
                let ns = once(&[], settings.opens);
                tracer.stop();
                ns
            }
        };
        // The guests have neither bpftrace (LLVM, headers) nor a disk to
        // write to; where trampolines make full the same as auto, they show
        // what the syscall tracepoints (the route before fexit on the open function) cost.
        let host = !settings.guest;
        let configs: Vec<Config> = [
            Some::<Config>((
                "gpu-trace watch > /dev/null (--opens auto)",
                Box::new(under_watch(&[], false)),
            )),
            host.then(|| -> Config {
                (
                    "gpu-trace watch --format json > file",
                    Box::new(under_watch(&["--format", "json"], true)),
                )
            }),
            Some((
                "gpu-trace watch --opens full > /dev/null",
                Box::new(under_watch(&["--opens", "full"], false)),
            )),
            Some((
                "gpu-trace watch --opens none > /dev/null",
                Box::new(under_watch(&["--opens", "none"], false)),
            )),
            // The kernel programs' drop records on: what they cost where
            // nothing is dropped (off, the default, is the first row).
            Some((
                "gpu-trace watch --bpf-log debug > /dev/null",
                Box::new(under_watch(&["--bpf-log", "debug"], false)),
            )),
            settings.guest.then(|| -> Config {
                (
                    "gpu-trace watch --opens tracepoints > /dev/null",
                    Box::new(under_watch(&["--opens", "tracepoints"], false)),
                )
            }),
            host.then(|| -> Config {
                (
                    "bpftrace opensnoop-like",
                    Box::new(|| {
                        let tracer = bpftrace();
                        let ns = once(&[], settings.opens);
                        tracer.stop();
                        ns
                    }),
                )
            }),
            Some((
                "strace -f -e trace=openat",
                // strace is far slower: fewer opens, same per-open figure.
                Box::new(|| {
                    once(
                        &["strace", "-f", "-e", "trace=openat", "-o", "/dev/null"],
                        settings.opens / 20,
                    )
                }),
            )),
        ]
        .into_iter()
        .flatten()
        .collect();
        // Pairs: a baseline slice right before each configuration's, both
        // on the same CPU (see run_loop). This machine's speed drifts by tens
        // of percent between seconds, and between its CPUs; a ratio within a
        // pair cancels most of that, where one baseline per round did not.
        let mut baseline = Vec::new();
        let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new(); configs.len()];
        for _ in 0..settings.runs {
            for (index, (_, measure)) in configs.iter().enumerate() {
                let base = once(&[], settings.opens);
                let ns = measure();
                baseline.push(base);
                runs[index].push((ns, ns / base));
            }
        }
        let in_kernel = in_kernel_cost(scene, &[], &|| once(&[], settings.opens), settings.opens);
        // The guests are here to measure the fexit route: a kernel that did
        // not take it would pass off another route's figures.
        let route = in_kernel["open_route"].as_str().unwrap_or("");
        assert!(
            !settings.guest
                || route.contains(&format!(
                    "fexit {}",
                    gpu_trace_common::program::OPEN_FUNCTION
                )),
            "watch's default open route in this guest is not fexit: {route:?}"
        );
        let in_kernel_full = in_kernel_cost(
            scene,
            &["--opens", "full"],
            &|| once(&[], settings.opens),
            settings.opens,
        );
        let in_kernel_bpf_log = in_kernel_cost(
            scene,
            &["--bpf-log", "debug"],
            &|| once(&[], settings.opens),
            settings.opens,
        );
        let in_kernel_tracepoints = settings.guest.then(|| {
            in_kernel_cost(
                scene,
                &["--opens", "tracepoints"],
                &|| once(&[], settings.opens),
                settings.opens,
            )
        });
        let (base, base_lo, base_hi) = median_and_spread(baseline);
        let mut entries = vec![
            json!({ "config": "baseline (nothing attached)", "ns_per_open": base, "min": base_lo, "max": base_hi, "ratio": 1.0 }),
        ];
        for ((config, _), values) in configs.iter().zip(runs) {
            entries.push(paired_entry(config, "ns_per_open", values));
        }
        rows.push(
            json!({ "target": name, "configs": entries, "in_kernel_ns_per_open": in_kernel,
                    "in_kernel_ns_per_open_full": in_kernel_full,
                    "in_kernel_ns_per_open_bpf_log_debug": in_kernel_bpf_log,
                    "in_kernel_ns_per_open_tracepoints": in_kernel_tracepoints }),
        );
    }
    let _ = fs::remove_file(&out_file);
    Value::Array(rows)
}

/// The same denial over and over, under watch's default fold: every open
/// but the first of a window is a repeat, which the kernel only counts.
/// What our programs spend on each, and what two producers flooding the
/// denied node keep of their untraced rate (paired, as the rows above).
fn repeated_denial(settings: &Settings, open_loop: &Path, scene: &Scene) -> Value {
    eprintln!("bench: repeated denial (default --fold)");
    const FOLD: [&str; 2] = ["--fold", "5s"];
    let opens = settings.opens * 10;
    let once = || {
        run_loop(
            &[],
            open_loop,
            &scene.denied_node,
            opens,
            Some(scene.cgroup()),
        )
    };
    let in_kernel = in_kernel_cost(scene, &FOLD, &once, opens);
    let with_fold_0 = in_kernel_cost(scene, &[], &once, opens);
    let breakdown = json!({
        "repeat": steps_of_a_denial(scene, &FOLD, &REPEAT_STEPS, &once, opens),
        "first_sighting": steps_of_a_denial(scene, &[], &FIRST_SIGHTING_STEPS, &once, opens),
    });
    // Two producers flat out, one per CPU: denials per second, summed.
    let flood = || -> f64 {
        producers_of_denials(open_loop, scene, 2, opens, None)
            .into_iter()
            .map(|p| {
                let out = p.wait_with_output().expect("producer");
                let text = String::from_utf8_lossy(&out.stdout);
                let ns: f64 = text
                    .split_whitespace()
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("open loop said {text:?}"));
                1e9 / ns
            })
            .sum()
    };
    // The same flood against the device hook alone cut after each step:
    // what each step takes from the tenant's rate, which the run-time
    // statistics of one producer cannot show (two CPUs counting under one
    // key share its cache line).
    let cuts: Vec<Option<&str>> = REPEAT_STEPS
        .iter()
        .map(|s| Some(*s))
        .chain([None])
        .collect();
    let mut cut_pairs: Vec<Vec<(f64, f64)>> = vec![Vec::new(); cuts.len()];
    let mut pairs = Vec::new();
    let mut baseline = Vec::new();
    for _ in 0..settings.runs {
        let base = flood();
        let tracer = watch(scene, &FOLD, Stdio::null());
        let traced = flood();
        tracer.stop();
        baseline.push(base);
        pairs.push((traced, traced / base));
        for (cut, pairs) in cuts.iter().zip(&mut cut_pairs) {
            let mut command = watch_command(
                scene,
                &[&FOLD[..], &["--device-hook-only"]].concat(),
                Stdio::null(),
            );
            if let Some(cut) = cut {
                command.env("GPU_TRACE_BENCH_CUT", cut);
            }
            let tracer = Background::start(command, "gpu-trace: ready", false);
            let traced = flood();
            tracer.stop();
            pairs.push((traced, traced / base));
        }
    }
    let flood_cut: Vec<Value> = cuts
        .iter()
        .zip(cut_pairs)
        .map(|(cut, pairs)| paired_entry(cut.unwrap_or("all"), "denials_per_s", pairs))
        .collect();
    let (base, base_lo, base_hi) = median_and_spread(baseline);
    json!({
        "in_kernel_ns_per_repeat": in_kernel,
        "in_kernel_ns_per_first_sighting": with_fold_0,
        "breakdown": breakdown,
        "identity_changed": identity_changed_cost(scene, settings.runs * 100),
        "flood_cut": flood_cut,
        "flood": [
            { "config": "2 producers, nothing attached", "denials_per_s": base, "min": base_lo, "max": base_hi, "ratio": 1.0 },
            paired_entry("2 producers under watch (--fold 5s)", "denials_per_s", pairs),
        ],
    })
}

/// The device hook's steps for a repeat, in order (gpu_trace_common::bench_cut).
const REPEAT_STEPS: [&str; 4] = ["entry", "verdict", "identity", "short-way"];
/// And for a first sighting, sent whole at the end.
const FIRST_SIGHTING_STEPS: [&str; 9] = [
    "entry",
    "verdict",
    "identity",
    "clock-and-cgroup",
    "command-and-key",
    "saved-registers",
    "ring-reserve",
    "path",
    "programs-in-force",
];

/// Where a denial's time in our programs goes: `watch --device-hook-only`
/// run once per step with the device hook cut after it
/// (GPU_TRACE_BENCH_CUT), then uncut; each step's share is its total less
/// the one before's. The device hook reports alone, so that the steps are
/// the same on every route (with fexit on the open function, the default
/// leaves its sighting to the open's exit, which has no cuts). "entry" is
/// what an empty program costs there (the hook's call and the statistics'
/// own clock reads): the floor under every figure of this group.
fn steps_of_a_denial(
    scene: &Scene,
    extra: &[&str],
    steps: &[&str],
    run: &dyn Fn() -> f64,
    opens: u64,
) -> Value {
    let extra = [extra, &["--device-hook-only"]].concat();
    let mut rows = Vec::new();
    let mut before = 0.0;
    for step in steps.iter().map(|s| Some(*s)).chain([None]) {
        let total = in_kernel_cost_cut(scene, &extra, step, run, opens)["total"]
            .as_f64()
            .expect("a total");
        rows.push(json!({
            "after": step.unwrap_or("all"),
            "total_ns": total,
            "step_ns": total - before,
        }));
        before = total;
    }
    Value::Array(rows)
}

/// The time gpu-trace's own programs spend per open, from the kernel's BPF
/// run-time statistics: a figure the machine's noise barely touches (it
/// leaves out the cost of the tracepoint machinery around the programs).
fn in_kernel_cost(scene: &Scene, extra: &[&str], run: &dyn Fn() -> f64, opens: u64) -> Value {
    in_kernel_cost_cut(scene, extra, None, run, opens)
}

/// `in_kernel_cost` with the device hook cut after `cut` (see steps_of_a_denial).
fn in_kernel_cost_cut(
    scene: &Scene,
    extra: &[&str],
    cut: Option<&str>,
    run: &dyn Fn() -> f64,
    opens: u64,
) -> Value {
    let _stats =
        aya::sys::enable_stats(aya::sys::Stats::RunTime).expect("enable BPF run-time statistics");
    let mut command = watch_command(scene, extra, Stdio::null());
    if let Some(cut) = cut {
        command.env("GPU_TRACE_BENCH_CUT", cut);
    }
    let tracer = Background::start(command, "gpu-trace: ready", false);
    // What the ready line says the open route is and costs.
    let route = tracer
        .ready
        .split_once("; ")
        .map_or("", |(_, route)| route)
        .to_string();
    let before = program_times(&[]);
    run();
    let after = program_times(&[]);
    tracer.stop();
    let mut per_program = serde_json::Map::new();
    let mut total = 0.0;
    for (name, (time_after, runs_after)) in &after {
        let (time_before, runs_before) = before.get(name).copied().unwrap_or((0, 0));
        let ns = (time_after - time_before) as f64 / opens as f64;
        total += ns;
        per_program.insert(
            name.clone(),
            json!({ "ns_per_open": ns, "runs": runs_after - runs_before }),
        );
    }
    json!({ "total": total, "programs": per_program, "open_route": route })
}

/// What the program that keeps a repeat's short way honest costs the
/// host: it runs on every exec (a rename), exit and cgroup move. `processes`
/// runs of `gpu-trace --version` (the guests have no /bin/true) under the
/// default `watch`, each an exec and an exit: its time per run and its runs
/// per process (BPF run-time statistics).
fn identity_changed_cost(scene: &Scene, processes: usize) -> Value {
    let _stats =
        aya::sys::enable_stats(aya::sys::Stats::RunTime).expect("enable BPF run-time statistics");
    let tracer = watch(scene, &["--fold", "5s"], Stdio::null());
    let name = gpu_trace_common::program::as_loaded(gpu_trace_common::program::IDENTITY_CHANGED);
    let before = program_times(&[name]);
    for _ in 0..processes {
        let status = Command::new(gpu_trace())
            .arg("--version")
            .stdout(Stdio::null())
            .status()
            .expect("gpu-trace --version");
        assert!(status.success());
    }
    let after = program_times(&[name]);
    tracer.stop();
    let (time_before, runs_before) = before.get(name).copied().unwrap_or((0, 0));
    let (time_after, runs_after) = after.get(name).copied().unwrap_or((0, 0));
    let runs = runs_after - runs_before;
    assert!(runs > 0, "{name} never ran: not attached?");
    json!({
        "ns_per_run": (time_after - time_before) as f64 / runs as f64,
        "runs_per_process": runs as f64 / processes as f64,
    })
}

/// Accumulated run time (ns) and run count of gpu-trace's loaded device
/// and open programs (or of `only`), by name.
fn program_times(only: &[&str]) -> std::collections::BTreeMap<String, (u64, u64)> {
    use gpu_trace_common::program;
    let ours: Vec<&str> = if only.is_empty() {
        program::DEVICE_HOOKS
            .iter()
            .chain(&program::OPEN_CALLS)
            .map(|name| program::as_loaded(name))
            .collect()
    } else {
        only.to_vec()
    };
    let mut times = std::collections::BTreeMap::new();
    for info in aya::programs::loaded_programs().filter_map(Result::ok) {
        let Some(name) = info.name_as_str().filter(|name| ours.contains(name)) else {
            continue;
        };
        // Summed: two programs whose names share their first 15 bytes are
        // one name to the kernel.
        let (time, runs) = times.entry(name.to_string()).or_insert((0, 0));
        *time += info.run_time().as_nanos() as u64;
        *runs += info.run_count();
    }
    times
}

/// K producers hammer the denied node, with watch writing JSON to a file
/// and then into a pipe; then the same flood folded in the kernel.
fn throughput(settings: &Settings, open_loop: &Path, scene: &Scene) -> Value {
    eprintln!("bench: denied-event throughput");
    let producers: u64 = 2;
    let to_file = paced_steps(settings, open_loop, scene, producers, LineSink::File);
    let to_pipe = paced_steps(settings, open_loop, scene, producers, LineSink::Pipe);
    let collector = collector::Collector::start();
    let to_file_and_otlp = paced_steps(
        settings,
        open_loop,
        scene,
        producers,
        LineSink::FileAndOtlp(&collector),
    );
    let folded = folded_flood(settings, open_loop, scene, producers);
    json!({ "producers": producers, "to_file": to_file, "to_pipe": to_pipe,
            "to_file_and_otlp": to_file_and_otlp, "folded_flood": folded })
}

/// Where watch's lines go in a throughput run.
#[derive(Clone, Copy)]
enum LineSink<'a> {
    /// `> file` in the work directory: every line is copied into page-cache
    /// memory the kernel must find for it.
    File,
    /// `| reader`: a thread of the bench reads the pipe and counts lines, as
    /// a log shipper would; the pipe's few pages are used over and over.
    Pipe,
    /// `> file` and `--otlp` to a collector that counts what arrives: each
    /// record also rendered twice more, queued, batched and sent.
    FileAndOtlp(&'a collector::Collector),
}

/// The lines watch wrote, counted once it has stopped.
enum LinesOut {
    File(PathBuf),
    Pipe(thread::JoinHandle<(u64, u64)>),
}

impl LinesOut {
    /// Lines and bytes.
    fn count(self) -> (u64, u64) {
        match self {
            LinesOut::File(path) => count_lines(fs::File::open(&path).expect("watch's output")),
            LinesOut::Pipe(reader) => reader.join().expect("pipe reader"),
        }
    }
}

/// Lines and bytes read from `from` to its end, through one small buffer:
/// reading a step's gigabyte whole would make the bench itself free that
/// much memory right before the next step (see `reported_to_host_kib`).
fn count_lines(mut from: impl std::io::Read) -> (u64, u64) {
    let mut buf = vec![0u8; 1 << 20];
    let (mut lines, mut bytes) = (0u64, 0u64);
    loop {
        match from.read(&mut buf) {
            Ok(0) => return (lines, bytes),
            Ok(n) => {
                lines += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
                bytes += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("reading watch's lines: {e}"),
        }
    }
}

/// `gpu-trace watch --format json ARGS` into `sink`, once it is ready.
fn watch_into_sink(
    args: &[&str],
    sink: LineSink,
    out_file: &Path,
) -> (Child, WatchStderr, LinesOut) {
    match sink {
        LineSink::File => {
            let (child, stderr) = watch_into_file(args, out_file);
            (child, stderr, LinesOut::File(out_file.to_path_buf()))
        }
        LineSink::FileAndOtlp(collector) => {
            let args = [args, &["--otlp", &collector.url]].concat();
            let (child, stderr) = watch_into_file(&args, out_file);
            (child, stderr, LinesOut::File(out_file.to_path_buf()))
        }
        LineSink::Pipe => {
            let (mut child, stderr) = watch_with_stdout(args, Stdio::piped());
            let pipe = child.stdout.take().expect("watch's stdout");
            let reader = thread::spawn(move || count_lines(pipe));
            (child, stderr, LinesOut::Pipe(reader))
        }
    }
}

/// Flat out first, then paced rates, rising until events are lost, with
/// watch's lines going to `sink`.
fn paced_steps(
    settings: &Settings,
    open_loop: &Path,
    scene: &Scene,
    producers: u64,
    sink: LineSink,
) -> Value {
    let mut steps = Vec::new();
    let mut best_zero_loss = 0.0f64;
    let mut peak_rss_kib = 0u64;
    let mut line_bytes = 0.0f64;
    let mut sink_before = None;
    let out_file = scene.regular_file.with_file_name("throughput.jsonl");
    // The OTLP export's own thread tops out far lower: finer steps there.
    let paced: &[f64] = match sink {
        LineSink::FileAndOtlp(_) => &[5e3, 10e3, 20e3, 30e3, 40e3, 50e3, 75e3, 100e3],
        _ => &[
            50e3, 100e3, 150e3, 200e3, 250e3, 300e3, 400e3, 500e3, 600e3, 800e3,
        ],
    };
    let rates: Vec<f64> = std::iter::once(0.0).chain(paced.iter().copied()).collect();
    for rate in rates {
        let (mut child, stderr, lines_out) = watch_into_sink(
            &["--fold", "0", "--major", &scene.major.to_string()],
            sink,
            &out_file,
        );
        let per_producer = if rate == 0.0 {
            1_000_000_000
        } else {
            (rate / producers as f64 * settings.seconds as f64) as u64
        };
        let cpu_before = watch_thread_cpu(child.id());
        let otlp_cpu_before = thread_cpu(child.id(), "otlp");
        let otlp_before = otlp_collector(sink).map(|c| c.records());
        let producers_cpu_before = waited_children_cpu();
        let reported_before = reported_to_host_kib();
        let started = Instant::now();
        let pace = (rate > 0.0).then(|| rate / producers as f64);
        let workers = producers_of_denials(open_loop, scene, producers, per_producer, pace);
        if rate == 0.0 {
            thread::sleep(Duration::from_secs(settings.seconds));
            for w in &workers {
                // SIGKILL: a shell's background job ignores SIGINT, and so would they.
                let _ = kill(Pid::from_raw(w.id() as i32), Signal::SIGKILL);
            }
        }
        for w in workers {
            let _ = w.wait_with_output();
        }
        let elapsed = started.elapsed().as_secs_f64();
        // Only the producers were waited for since: watch is waited for below.
        let producers_cpu = waited_children_cpu() - producers_cpu_before;
        thread::sleep(Duration::from_millis(300)); // let watch drain
        if let Some(collector) = otlp_collector(sink) {
            // The exporter's backlog too, before its CPU is read: a record
            // sent after the stop would count without its cost.
            collector.wait_until_quiet();
        }
        let cpu_after = watch_thread_cpu(child.id());
        let otlp_cpu_after = thread_cpu(child.id(), "otlp");
        let reported = reported_before
            .zip(reported_to_host_kib())
            .map(|(before, after)| after.saturating_sub(before) as f64 / 1024.0);
        peak_rss_kib = peak_rss_kib.max(peak_rss(child.id()));
        let summary = stop_for_summary(&mut child, stderr);
        let events = summary_number(&summary, "events");
        let lost = summary_number(&summary, "lost");
        let (lines, bytes) = lines_out.count();
        // The exporter has finished (sent or counted all) once watch is gone.
        let otlp_received = otlp_collector(sink)
            .zip(otlp_before)
            .map(|(c, before)| c.records() - before);
        let otlp_dropped = summary_number(&summary, "otlp dropped");
        let received = otlp_received.map_or(lines, |r| r.min(lines));
        if rate == 0.0 && received > 0 && matches!(sink, LineSink::File) {
            // What the file system alone takes in lines of this size, right
            // before the paced steps: the ceiling any writer of them has.
            line_bytes = bytes as f64 / received as f64;
            sink_before = Some(sink_lines_per_s(&out_file, line_bytes as usize));
        }
        let produced = events + lost;
        let rate_seen = produced as f64 / elapsed;
        // watch's own cost per line it wrote, on each of its two threads:
        // steadier than the zero-loss rung, which the producers' share of
        // the CPUs moves as much as watch does.
        let per_line = |before: f64, after: f64| 1e6 * (after - before) / received.max(1) as f64;
        steps.push(json!({
            "target_rate": if rate == 0.0 { Value::from("flat out") } else { Value::from(rate) },
            "produced": produced, "received": received, "lost": lost, "events_per_s": rate_seen,
            "event_thread_us_per_line": per_line(cpu_before.0, cpu_after.0),
            "output_thread_us_per_line": per_line(cpu_before.1, cpu_after.1),
            "otlp_thread_us_per_record": otlp_received.map(|_| per_line(otlp_cpu_before, otlp_cpu_after)),
            "otlp_received": otlp_received, "otlp_dropped": otlp_received.map(|_| otlp_dropped),
            // What one denied open costs its producer (the kernel's open path
            // and our programs): the CPUs the producers take at a given rate.
            "producer_us_per_denial": 1e6 * producers_cpu / produced.max(1) as f64,
            // Free memory the guest handed back to its hypervisor meanwhile,
            // where the kernel counts it: memory the next new page of the
            // file pays a fault in the hypervisor for.
            "reported_to_host_mib": reported,
        }));
        if lost == 0 && received == produced && otlp_dropped == 0 {
            best_zero_loss = best_zero_loss.max(rate_seen);
        } else if rate > 0.0 {
            break;
        }
    }
    let sink_after = sink_before.map(|_| sink_lines_per_s(&out_file, line_bytes as usize));
    let _ = fs::remove_file(&out_file);
    // The CPU budget at the busiest paced step: what one event costs the
    // producer, watch's event thread and its output thread together, and so
    // the most events per second this machine's CPUs could carry with no
    // time to spare for bursts; and what watch alone could take, its busier
    // thread given a CPU of its own.
    let busiest = steps.last().filter(|s| s["target_rate"].is_number());
    let cpu_budget = busiest.map(|s| {
        let cost = |field: &str| s[field].as_f64().unwrap_or(0.0);
        let watch = cost("event_thread_us_per_line").max(cost("output_thread_us_per_line"));
        let total = cost("producer_us_per_denial")
            + cost("event_thread_us_per_line")
            + cost("output_thread_us_per_line")
            + cost("otlp_thread_us_per_record");
        json!({ "at_rate": s["target_rate"], "us_per_event": total, "cpus": cpus(),
                "cpus_carry_events_per_s": cpus() as f64 * 1e6 / total,
                "watch_alone_events_per_s": 1e6 / watch })
    });
    json!({ "sink": match sink { LineSink::File => "file", LineSink::Pipe => "pipe", LineSink::FileAndOtlp(_) => "file and otlp" },
            "steps": steps, "highest_zero_loss_events_per_s": best_zero_loss,
            "cpu_budget": cpu_budget,
            "line_bytes": (line_bytes > 0.0).then_some(line_bytes),
            "sink_lines_per_s": { "before": sink_before, "after": sink_after },
            "peak_rss_mib": peak_rss_kib as f64 / 1024.0 })
}

/// What this guest has handed back to its hypervisor as free (free page
/// reporting), in KiB, where its kernel counts it.
fn reported_to_host_kib() -> Option<u64> {
    fs::read_to_string("/sys/module/page_reporting/parameters/reported_kib")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Lines of `line_bytes` written flat out to a fresh `file` (where watch's
/// log goes), in writes of about 1 MiB as watch's output thread gets them,
/// by this one thread: the rate the file system takes them at, with nothing
/// to decode or render.
fn sink_lines_per_s(file: &Path, line_bytes: usize) -> f64 {
    const LINES: usize = 1_000_000;
    let mut line = vec![b'x'; line_bytes.max(2)];
    *line.last_mut().expect("a line") = b'\n';
    let per_write = ((1usize << 20) / line.len()).max(1);
    let batch = line.repeat(per_write);
    let _ = fs::remove_file(file);
    let mut out = fs::File::create(file).expect("sink file");
    let started = Instant::now();
    let writes = LINES.div_ceil(per_write);
    for _ in 0..writes {
        out.write_all(&batch).expect("write to the sink file");
    }
    let rate = (writes * per_write) as f64 / started.elapsed().as_secs_f64();
    drop(out);
    let _ = fs::remove_file(file);
    rate
}

/// Producers denied flat out with watch's default fold: the repeats are
/// counted in the kernel, and the sum of `count` over the log must equal
/// what the producers made (each makes a fixed number and exits).
fn folded_flood(settings: &Settings, open_loop: &Path, scene: &Scene, producers: u64) -> Value {
    eprintln!("bench: denied flood, folded in the kernel");
    let out_file = scene.regular_file.with_file_name("folded.jsonl");
    let (mut child, stderr) = watch_into_file(&["--major", &scene.major.to_string()], &out_file);
    let per_producer = settings.seconds * 1_000_000;
    let cpu_before = cpu_seconds(child.id());
    let producers_cpu_before = waited_children_cpu();
    let started = Instant::now();
    let workers = producers_of_denials(open_loop, scene, producers, per_producer, None);
    for w in workers {
        let _ = w.wait_with_output();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let producers_cpu = waited_children_cpu() - producers_cpu_before;
    let watch_cpu = cpu_seconds(child.id()) - cpu_before;
    let summary = stop_for_summary(&mut child, stderr);
    let text = fs::read_to_string(&out_file).unwrap_or_default();
    let counted: u64 = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|r| r["count"].as_u64())
        .sum();
    let _ = fs::remove_file(&out_file);
    let produced = producers * per_producer;
    json!({
        "produced": produced, "counted": counted, "records": text.lines().count(),
        "lost": summary_number(&summary, "lost"),
        "denials_per_s": produced as f64 / elapsed,
        "watch_cpu_share": watch_cpu / elapsed,
        "producer_us_per_denial": 1e6 * producers_cpu / produced as f64,
    })
}

/// `producers` open loops in the scratch cgroup, each making `opens`
/// denied opens, at `pace` per second each or flat out.
fn producers_of_denials(
    open_loop: &Path,
    scene: &Scene,
    producers: u64,
    opens: u64,
    pace: Option<f64>,
) -> Vec<Child> {
    (0..producers)
        .map(|_| {
            let mut c = Command::new(open_loop);
            c.arg(&scene.denied_node).arg(opens.to_string());
            if let Some(rate) = pace {
                c.arg(rate.to_string());
            }
            c.stdout(Stdio::piped());
            let _procs = place_child_in(&mut c, &[scene.cgroup()]).expect("join cgroup");
            c.spawn().expect("producer")
        })
        .collect()
}

/// A real workload's wall time under each tracer, paired with a baseline
/// run just before it: compiling a small C project with `make -j2`, and
/// unpacking a tarball of small files (opens of regular files, by the
/// thousand, and every other syscall a build makes).
fn workload(settings: &Settings, work: &Path, scene: &Scene) -> Value {
    eprintln!("bench: real workloads");
    let project = c_project(work);
    let tarball = source_tarball(work);
    // Unpacked into memory where /dev/shm is there: the disk's writeback
    // would swing the figures by tens of percent between runs.
    let shm = tempfile::Builder::new()
        .prefix("gpu-trace-bench-")
        .tempdir_in("/dev/shm")
        .ok();
    let unpack_into = shm
        .as_ref()
        .map_or_else(|| work.join("unpacked"), |d| d.path().join("unpacked"));
    /// A workload, run behind a wrapper (none, or strace).
    type Job<'a> = Box<dyn Fn(&[&str]) + 'a>;
    let jobs: [(&str, Job); 2] = [
        (
            "make -j2 (a 64-file C project)",
            Box::new(|wrapper: &[&str]| {
                run_quietly(
                    wrapper,
                    &[
                        "make",
                        "-s",
                        "-C",
                        project.to_str().expect("utf-8"),
                        "clean",
                    ],
                );
                run_quietly(
                    wrapper,
                    &["make", "-s", "-j2", "-C", project.to_str().expect("utf-8")],
                );
            }),
        ),
        (
            "tar -x (4 000 small files)",
            Box::new(|wrapper: &[&str]| {
                let _ = fs::remove_dir_all(&unpack_into);
                fs::create_dir_all(&unpack_into).expect("unpack dir");
                run_quietly(
                    wrapper,
                    &[
                        "tar",
                        "-xf",
                        tarball.to_str().expect("utf-8"),
                        "-C",
                        unpack_into.to_str().expect("utf-8"),
                    ],
                );
            }),
        ),
    ];
    let runs = settings.runs;
    let mut rows = Vec::new();
    for (name, job) in &jobs {
        eprintln!("bench: workload, {name}");
        let timed = |wrapper: &[&str]| {
            let started = Instant::now();
            job(wrapper);
            started.elapsed().as_secs_f64() * 1e3
        };
        job(&[]); // warm the page cache
        let under_watch = |extra: &'static [&'static str]| {
            move || {
                let tracer = watch(scene, extra, Stdio::null());
                let ms = timed(&[]);
                tracer.stop();
                ms
            }
        };
        type Config<'a> = (&'a str, Box<dyn Fn() -> f64 + 'a>);
        let configs: Vec<Config> = vec![
            ("gpu-trace watch (--opens auto)", Box::new(under_watch(&[]))),
            (
                "gpu-trace watch --opens full",
                Box::new(under_watch(&["--opens", "full"])),
            ),
            (
                "bpftrace opensnoop-like",
                Box::new(|| {
                    let tracer = bpftrace();
                    let ms = timed(&[]);
                    tracer.stop();
                    ms
                }),
            ),
            (
                "strace -f -e trace=openat",
                Box::new(|| timed(&["strace", "-f", "-e", "trace=openat", "-o", "/dev/null"])),
            ),
        ];
        let mut entries = Vec::new();
        for (config, measure) in &configs {
            let mut pairs = Vec::new();
            for _ in 0..runs {
                let base = timed(&[]);
                let ms = measure();
                pairs.push((ms, ms / base));
            }
            entries.push(paired_entry(config, "ms", pairs));
        }
        rows.push(json!({ "workload": name, "configs": entries }));
    }
    let _ = fs::remove_dir_all(&unpack_into);
    Value::Array(rows)
}

/// Runs `command` (behind `wrapper`, e.g. strace) with its output dropped;
/// it must succeed.
fn run_quietly(wrapper: &[&str], command: &[&str]) {
    let all: Vec<&str> = wrapper.iter().chain(command).copied().collect();
    let status = Command::new(all[0])
        .args(&all[1..])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run workload");
    assert!(status.success(), "{all:?} failed");
}

/// 64 C files of a few functions each, and a Makefile that builds them
/// into one program.
fn c_project(work: &Path) -> PathBuf {
    let dir = work.join("project");
    fs::create_dir_all(&dir).expect("project dir");
    let mut objects = Vec::new();
    for i in 0..64 {
        let body: String = (0..8)
            .map(|f| {
                format!(
                    "int f{i}_{f}(int x) {{ int s = 0; for (int k = 0; k < x; k++) s += k * {f} ^ {i}; return s; }}\n"
                )
            })
            .collect();
        fs::write(
            dir.join(format!("m{i}.c")),
            format!("#include <stdio.h>\n{body}"),
        )
        .expect("C file");
        objects.push(format!("m{i}.o"));
    }
    fs::write(dir.join("main.c"), "int main(void) { return 0; }\n").expect("main.c");
    objects.push("main.o".into());
    let objects = objects.join(" ");
    fs::write(
        dir.join("Makefile"),
        format!(
            "CFLAGS = -O2\nall: prog\nprog: {objects}\n\t$(CC) -o $@ $^\nclean:\n\trm -f prog *.o\n"
        ),
    )
    .expect("Makefile");
    dir
}

/// A tarball of 4 000 small files in 40 directories.
fn source_tarball(work: &Path) -> PathBuf {
    let tree = work.join("tree");
    for d in 0..40 {
        let dir = tree.join(format!("d{d}"));
        fs::create_dir_all(&dir).expect("tree dir");
        for f in 0..100 {
            fs::write(
                dir.join(format!("f{f}.txt")),
                format!("{d} {f}\n").repeat(20),
            )
            .expect("tree file");
        }
    }
    let tarball = work.join("tree.tar");
    run_quietly(
        &[],
        &[
            "tar",
            "-cf",
            tarball.to_str().expect("utf-8"),
            "-C",
            work.to_str().expect("utf-8"),
            "tree",
        ],
    );
    let _ = fs::remove_dir_all(&tree);
    tarball
}

/// User and system CPU time of a process so far, in seconds.
fn cpu_seconds(pid: u32) -> f64 {
    stat_cpu_seconds(&format!("/proc/{pid}/stat"))
}

/// User and system CPU time so far of `pid`'s event thread (the process's
/// first) and of its output thread, in seconds.
fn watch_thread_cpu(pid: u32) -> (f64, f64) {
    (
        stat_cpu_seconds(&format!("/proc/{pid}/task/{pid}/stat")),
        thread_cpu(pid, "gpu-trace-sink"),
    )
}

/// User and system CPU time so far of `pid`'s threads named `name`.
fn thread_cpu(pid: u32, name: &str) -> f64 {
    fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|task| fs::read_to_string(task.path().join("comm")).is_ok_and(|c| c.trim() == name))
        .map(|task| stat_cpu_seconds(&task.path().join("stat").to_string_lossy()))
        .sum()
}

fn otlp_collector<'a>(sink: LineSink<'a>) -> Option<&'a collector::Collector> {
    match sink {
        LineSink::FileAndOtlp(collector) => Some(collector),
        _ => None,
    }
}

/// User and system CPU time of this process's children that were waited
/// for, so far, in seconds.
fn waited_children_cpu() -> f64 {
    // SAFETY: getrusage fills the struct it is given and nothing else.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage);
        usage
    };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}

/// utime + stime of a /proc stat file, in seconds.
fn stat_cpu_seconds(stat_file: &str) -> f64 {
    let stat = fs::read_to_string(stat_file).unwrap_or_default();
    // After the command name in parentheses: state is field 3, utime 14, stime 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no memory effects.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / per_second
}

/// Stops `watch` with SIGINT and returns its closing line ("detached; ...").
fn stop_for_summary(child: &mut Child, stderr: WatchStderr) -> String {
    let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGINT);
    let summary = stderr
        .map_while(Result::ok)
        .find(|l| l.contains("detached;"))
        .unwrap_or_default();
    let _ = child.wait();
    summary
}

fn summary_number(summary: &str, word: &str) -> u64 {
    summary
        .split([',', ';'])
        .find_map(|part| {
            part.trim()
                .strip_prefix(word)
                .and_then(|n| n.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn peak_rss(pid: u32) -> u64 {
    status_kib(pid, "VmHWM:")
}

/// A "Name:   N kB" figure of /proc/PID/status.
fn status_kib(pid: u32, field: &str) -> u64 {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix(field)
                    .map(|v| v.trim().trim_end_matches(" kB").parse().unwrap_or(0))
            })
        })
        .unwrap_or(0)
}

/// watch's stderr lines still to come (the closing summary among them).
type WatchStderr = std::io::Lines<BufReader<std::process::ChildStderr>>;

/// `gpu-trace watch --format json ARGS > out_file`, once it is ready.
fn watch_into_file(args: &[&str], out_file: &Path) -> (Child, WatchStderr) {
    let file = fs::File::create(out_file).expect("output file");
    watch_with_stdout(args, Stdio::from(file))
}

/// `gpu-trace watch --format json ARGS` with `stdout`, once it is ready.
fn watch_with_stdout(args: &[&str], stdout: Stdio) -> (Child, WatchStderr) {
    let mut child = Command::new(gpu_trace())
        .args(["watch", "--format", "json"])
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .stdin(Stdio::null())
        .spawn()
        .expect("watch");
    let mut stderr = BufReader::new(child.stderr.take().expect("stderr")).lines();
    for line in stderr.by_ref() {
        if line.expect("stderr").starts_with("gpu-trace: ready") {
            break;
        }
    }
    (child, stderr)
}

/// A tenant that makes `count` cgroups, each with one denied open: watch's
/// peak memory, its memory once they are removed, and whether a steady
/// 10 000 denials/s still get through with that many cgroups present
/// (unresolved ids must not turn into walks on the event path).
fn tenant_cgroups(count: usize, open_loop: &Path, scene: &Scene) -> Value {
    eprintln!("bench: {count} tenant cgroups");
    let out_file = scene.regular_file.with_file_name("tenants.jsonl");
    let (mut child, stderr) = watch_into_file(&["--major", &scene.major.to_string()], &out_file);
    let home = own_cgroup(scene);
    let enter = |dir: &Path| fs::write(dir.join("cgroup.procs"), "0").expect("enter cgroup");
    // The bench process itself visits each cgroup: far cheaper than a
    // process per cgroup.
    let tenant = scene.cgroup().join("tenant");
    fs::create_dir(&tenant).expect("tenant cgroup");
    let started = Instant::now();
    let mut dirs = Vec::with_capacity(count);
    for n in 0..count {
        let dir = tenant.join(format!("c{n}"));
        fs::create_dir(&dir).expect("make cgroup");
        enter(&dir);
        let _ = fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&scene.denied_node);
        dirs.push(dir);
    }
    enter(&home);
    let made_s = started.elapsed().as_secs_f64();
    thread::sleep(Duration::from_secs(2)); // let watch drain
    let peak_mib = peak_rss(child.id()) as f64 / 1024.0;

    // A steady stream from the scene's cgroup, with every tenant cgroup present.
    let seconds = 3u64;
    let rate = 10_000u64;
    let mut producer = Command::new(open_loop);
    producer
        .arg(&scene.denied_node)
        .arg((rate * seconds).to_string())
        .arg(rate.to_string())
        .stdout(Stdio::piped());
    let _procs = place_child_in(&mut producer, &[scene.cgroup()]).expect("join cgroup");
    let _ = producer.output().expect("producer");
    thread::sleep(Duration::from_millis(500));

    for dir in dirs.iter().rev() {
        let _ = fs::remove_dir(dir);
    }
    let _ = fs::remove_dir(&tenant);
    // The tick sees fewer cgroups and asks for a walk, which runs after a
    // rest of ten times the last walk's length: wait for it to land.
    let mut after_kib = rss(child.id());
    for _ in 0..30 {
        thread::sleep(Duration::from_secs(1));
        after_kib = after_kib.min(rss(child.id()));
    }
    let after_mib = after_kib as f64 / 1024.0;
    let summary = stop_for_summary(&mut child, stderr);
    json!({
        "cgroups": count,
        "made_in_s": made_s,
        "peak_rss_mib": peak_mib,
        "rss_after_removal_mib": after_mib,
        "steady_rate": rate,
        "steady_seconds": seconds,
        "events": summary_number(&summary, "events"),
        "lost": summary_number(&summary, "lost"),
    })
}

/// Two hostile tenants' shapes. A tree of `count` cgroups with 3.9 KB paths
/// (16 nested names of 240 characters, then the fan-out) and two denials
/// from the scene's cgroup: watch's peak RSS, against the DaemonSet's
/// 64 MiB. Then one cgroup cycling 2 000 minors of the denied major for
/// 5 s (each minor a problem that repeats every window): the lines per
/// second written, against the per-cgroup budget per window (1 s here).
fn hostile_shapes(count: usize, scene: &Scene) -> Value {
    eprintln!("bench: {count} cgroups with 3.9 KB paths; a cycle of 2 000 minors");
    let out_file = scene.regular_file.with_file_name("hostile.jsonl");
    let major = scene.major.to_string();
    let (mut child, stderr) = watch_into_file(&["--major", &major], &out_file);
    let nested: PathBuf = (0..16)
        .map(|level| format!("{level:x}").repeat(240))
        .collect();
    let bottom = scene.cgroup().join("tree").join(&nested);
    fs::create_dir_all(&bottom).expect("the nested names");
    for n in 0..count {
        fs::create_dir(bottom.join(format!("c{n}"))).expect("make cgroup");
    }
    for _ in 0..2 {
        let mut opener = Command::new("cat");
        opener.arg(&scene.denied_node).stderr(Stdio::null());
        let _procs = place_child_in(&mut opener, &[scene.cgroup()]).expect("join cgroup");
        let _ = opener.status();
    }
    thread::sleep(Duration::from_secs(2));
    let peak_mib = peak_rss(child.id()) as f64 / 1024.0;
    for n in 0..count {
        let _ = fs::remove_dir(bottom.join(format!("c{n}")));
    }
    let mut dir = bottom;
    while dir.starts_with(scene.cgroup().join("tree")) {
        let _ = fs::remove_dir(&dir);
        dir.pop();
    }
    stop_for_summary(&mut child, stderr);

    let per_cgroup = 20u32;
    let (mut child, stderr) = watch_into_file(
        &[
            "--major",
            &major,
            "--fold",
            "1s",
            "--budget-per-cgroup",
            &per_cgroup.to_string(),
        ],
        &out_file,
    );
    let seconds = 5u64;
    let node = scene.regular_file.with_file_name("cycled-node");
    // The bench process itself is the tenant: in the scene's cgroup, each
    // mknod is refused by its policy.
    let home = own_cgroup(scene);
    fs::write(scene.cgroup().join("cgroup.procs"), "0").expect("enter the cgroup");
    let until = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < until {
        for minor in 0..2_000 {
            let _ = nix::sys::stat::mknod(
                &node,
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(0o600),
                nix::sys::stat::makedev(scene.major.into(), minor),
            );
        }
    }
    fs::write(home.join("cgroup.procs"), "0").expect("leave the cgroup");
    thread::sleep(Duration::from_millis(1_500));
    let summary = stop_for_summary(&mut child, stderr);
    let lines = fs::read_to_string(&out_file).map_or(0, |t| t.lines().count());
    json!({
        "long_path_cgroups": count,
        "long_path_peak_rss_mib": peak_mib,
        "cycle_seconds": seconds,
        "cycle_budget_per_cgroup": per_cgroup,
        "cycle_lines_per_s": lines as f64 / (seconds as f64 + 1.5),
        "cycle_denied": summary_number(&summary, "denied"),
        "cycle_lost": summary_number(&summary, "lost"),
    })
}

/// The bench process's own cgroup directory, to come back to.
fn own_cgroup(scene: &Scene) -> PathBuf {
    let own = fs::read_to_string("/proc/self/cgroup").expect("own cgroup");
    let relative = own
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .expect("cgroup2 line")
        .trim_start_matches('/')
        .to_string();
    let mount = scene.cgroup().parent().expect("under the mount");
    mount.join(relative)
}

fn rss(pid: u32) -> u64 {
    status_kib(pid, "VmRSS:")
}

/// exec -> attached and reporting, and `run -- true` end to end.
fn startup(settings: &Settings, scene: &Scene) -> Value {
    eprintln!("bench: start-up");
    let mut idle_rss_kib = Vec::new();
    let attach: Vec<f64> = (0..settings.startups)
        .map(|_| {
            let started = Instant::now();
            let tracer = watch(scene, &[], Stdio::null());
            let ms = started.elapsed().as_secs_f64() * 1e3;
            // Idle: ready, and a tick of its event loop later.
            thread::sleep(Duration::from_millis(1100));
            idle_rss_kib.push(rss(tracer.child.id()) as f64);
            tracer.stop();
            ms
        })
        .collect();
    let run_true: Vec<f64> = (0..settings.startups)
        .map(|_| {
            let started = Instant::now();
            let status = Command::new(gpu_trace())
                .args(["run", "--", "true"])
                .stderr(Stdio::null())
                .status()
                .expect("run");
            assert!(status.success());
            started.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    let (attach_ms, attach_lo, attach_hi) = median_and_spread(attach);
    let (run_ms, run_lo, run_hi) = median_and_spread(run_true);
    let (idle, idle_lo, idle_hi) = median_and_spread(idle_rss_kib);
    json!({
        "watch_exec_to_ready_ms": { "median": attach_ms, "min": attach_lo, "max": attach_hi },
        "watch_idle_rss_mib": { "median": idle / 1024.0, "min": idle_lo / 1024.0, "max": idle_hi / 1024.0 },
        "run_true_ms": { "median": run_ms, "min": run_lo, "max": run_hi },
    })
}

fn machine() -> String {
    let cpu = fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())
            })
        })
        .unwrap_or_default();
    let kernel = fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    format!("{} CPUs, {cpu}, kernel {}", cpus(), kernel.trim())
}

fn cpus() -> usize {
    thread::available_parallelism().map_or(0, |n| n.get())
}

fn print_tables(results: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "gpu-trace benchmark, {} on {}",
        results["date"].as_str().unwrap_or(""),
        results["machine"].as_str().unwrap_or("")
    );
    let _ = writeln!(out, "\nOverhead (median ns per getppid(), or per open()+close() [min-max]; median ratio to a baseline slice run just before, on the same CPU [min-max]):");
    for row in results["open_overhead"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "  {}", row["target"].as_str().unwrap_or(""));
        let in_kernel = |key: &str| row[key]["total"].as_f64().unwrap_or(0.0);
        let _ = writeln!(
            out,
            "    gpu-trace's programs in the kernel: {:.0} ns per call, {:.0} with --opens full, {:.0} with --bpf-log debug (BPF run-time stats)",
            in_kernel("in_kernel_ns_per_open"),
            in_kernel("in_kernel_ns_per_open_full"),
            in_kernel("in_kernel_ns_per_open_bpf_log_debug"),
        );
        if !row["in_kernel_ns_per_open_tracepoints"].is_null() {
            let _ = writeln!(
                out,
                "    with --opens tracepoints: {:.0} ns per call",
                in_kernel("in_kernel_ns_per_open_tracepoints")
            );
        }
        let _ = writeln!(
            out,
            "    watch's default open route: {}",
            row["in_kernel_ns_per_open"]["open_route"]
                .as_str()
                .unwrap_or("")
        );
        for c in row["configs"].as_array().into_iter().flatten() {
            let _ = writeln!(out, "{}", paired_line(c, "ns_per_open", " ns"));
        }
    }
    print_repeated_denial(&mut out, &results["repeated_denial"]);
    liveness::print(&mut out, &results["liveness"]);
    let t = &results["throughput"];
    if t.is_null() {
        print_startup(&mut out, &results["startup"]);
        print_tenants(&mut out, &results["tenant_cgroups"]);
        print_hostile_shapes(&mut out, &results["hostile_shapes"]);
        return print_workload(&mut out, &results["workload"]);
    }
    for (sink, title) in [
        ("to_file", "watch --format json > file"),
        (
            "to_pipe",
            "watch --format json | a reader that counts lines",
        ),
        (
            "to_file_and_otlp",
            "watch --format json > file --otlp URL, to a collector that counts records",
        ),
    ] {
        print_paced_steps(&mut out, &t[sink], &t["producers"], title);
    }
    let f = &t["folded_flood"];
    let _ = writeln!(
        out,
        "\nDenied flood folded in the kernel ({} producers flat out, watch's default --fold 5s):\n    produced {}, sum of count {}, in {} records, lost {}, {:.0} denials/s ({:.2} µs of CPU each), watch used {:.1} % of one CPU",
        t["producers"],
        f["produced"],
        f["counted"],
        f["records"],
        f["lost"],
        f["denials_per_s"].as_f64().unwrap_or(0.0),
        f["producer_us_per_denial"].as_f64().unwrap_or(0.0),
        100.0 * f["watch_cpu_share"].as_f64().unwrap_or(0.0),
    );
    print_startup(&mut out, &results["startup"]);
    print_tenants(&mut out, &results["tenant_cgroups"]);
    print_workload(&mut out, &results["workload"]);
}

fn print_repeated_denial(out: &mut impl Write, r: &Value) {
    if r.is_null() {
        return;
    }
    let per_program = |key: &str| {
        let programs = r[key]["programs"].as_object().cloned().unwrap_or_default();
        let parts: Vec<String> = programs
            .iter()
            .filter(|(_, p)| p["runs"].as_u64().unwrap_or(0) > 0)
            .map(|(name, p)| format!("{name} {:.0}", p["ns_per_open"].as_f64().unwrap_or(0.0)))
            .collect();
        format!(
            "{:.0} ns ({})",
            r[key]["total"].as_f64().unwrap_or(0.0),
            parts.join(", ")
        )
    };
    let _ = writeln!(
        out,
        "\nA repeated denial (the denied node opened over and over; watch's default --fold 5s):\n    gpu-trace's programs per repeat: {}\n    per first sighting (--fold 0): {}",
        per_program("in_kernel_ns_per_repeat"),
        per_program("in_kernel_ns_per_first_sighting"),
    );
    for c in r["flood"].as_array().into_iter().flatten() {
        let _ = writeln!(out, "{}", paired_line(c, "denials_per_s", "/s"));
    }
    for (kind, title) in [
        ("repeat", "a repeat"),
        ("first_sighting", "a first sighting (--fold 0)"),
    ] {
        let steps: Vec<String> = r["breakdown"][kind]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| {
                format!(
                    "{} {:+.0}",
                    s["after"].as_str().unwrap_or("?"),
                    s["step_ns"].as_f64().unwrap_or(0.0)
                )
            })
            .collect();
        if !steps.is_empty() {
            let _ = writeln!(out, "    {title}, ns per step: {}", steps.join(", "));
        }
    }
    let cut: Vec<String> = r["flood_cut"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            format!(
                "{} x{:.3}",
                c["config"].as_str().unwrap_or("?"),
                c["ratio"].as_f64().unwrap_or(0.0)
            )
        })
        .collect();
    if !cut.is_empty() {
        let _ = writeln!(
            out,
            "    2 producers, the device hook alone cut after each step (median ratio): {}",
            cut.join(", ")
        );
    }
    let identity = &r["identity_changed"];
    if !identity.is_null() {
        let _ = writeln!(
            out,
            "    what keeps the short way honest (identity_changed): {:.0} ns per run, {:.2} runs per process started and ended",
            identity["ns_per_run"].as_f64().unwrap_or(0.0),
            identity["runs_per_process"].as_f64().unwrap_or(0.0),
        );
    }
}

/// One configuration of a paired measurement (`paired_entry`): its median
/// `value` with `unit`, the spread, and its ratio to the baseline.
fn paired_line(c: &Value, value: &str, unit: &str) -> String {
    let number = |key: &str| c[key].as_f64().unwrap_or(0.0);
    let mut line = format!(
        "    {:<48} {:>11.0}{unit}  [{:.0}-{:.0}]  x{:.3}",
        c["config"].as_str().unwrap_or(""),
        number(value),
        number("min"),
        number("max"),
        number("ratio"),
    );
    if c.get("ratio_min").is_some() {
        line += &format!(" [x{:.3}-x{:.3}]", number("ratio_min"), number("ratio_max"));
    }
    line
}

/// One sink's throughput steps, zero-loss rung and CPU budget.
fn print_paced_steps(out: &mut impl Write, t: &Value, producers: &Value, title: &str) {
    if t.is_null() {
        return;
    }
    let _ = writeln!(
        out,
        "\nDenied-event throughput ({producers} producers, {title}):"
    );
    for s in t["steps"].as_array().into_iter().flatten() {
        let reported = s["reported_to_host_mib"]
            .as_f64()
            .map(|mib| format!("; freed memory handed to the hypervisor meanwhile {mib:.0} MiB"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "    rate {:>10}: produced {:>9}, received {:>9}, lost {:>8}, {:>9.0} events/s; CPU per event: producer {:.2} µs, watch {:.2} µs + {:.2} µs output{reported}",
            s["target_rate"].to_string().trim_matches('"'),
            s["produced"],
            s["received"],
            s["lost"],
            s["events_per_s"].as_f64().unwrap_or(0.0),
            s["producer_us_per_denial"].as_f64().unwrap_or(0.0),
            s["event_thread_us_per_line"].as_f64().unwrap_or(0.0),
            s["output_thread_us_per_line"].as_f64().unwrap_or(0.0),
        );
        if let Some(otlp) = s["otlp_thread_us_per_record"].as_f64() {
            let _ = writeln!(
                out,
                "        OTLP: {} records at the collector, {} dropped; the exporter thread {otlp:.2} µs per record",
                s["otlp_received"], s["otlp_dropped"],
            );
        }
    }
    let _ = writeln!(
        out,
        "  highest rate with zero loss: {:.0} events/s",
        t["highest_zero_loss_events_per_s"].as_f64().unwrap_or(0.0)
    );
    let budget = &t["cpu_budget"];
    if let Some(total) = budget["us_per_event"].as_f64() {
        let _ = writeln!(
            out,
            "  CPU per event at the {} step, producer and watch together: {total:.2} µs; the {} CPUs carry at most {:.0} events/s at that cost, and watch alone (its busier thread on a CPU of its own) could take {:.0}",
            budget["at_rate"],
            budget["cpus"],
            budget["cpus_carry_events_per_s"].as_f64().unwrap_or(0.0),
            budget["watch_alone_events_per_s"].as_f64().unwrap_or(0.0),
        );
    }
    let sink = &t["sink_lines_per_s"];
    if let (Some(before), Some(after)) = (sink["before"].as_f64(), sink["after"].as_f64()) {
        let _ = writeln!(
            out,
            "  the file system alone, {:.0}-byte lines from one writer: {before:.0} lines/s before the paced steps, {after:.0} after",
            t["line_bytes"].as_f64().unwrap_or(0.0)
        );
    }
    let _ = writeln!(
        out,
        "  peak RSS of watch: {:.1} MiB",
        t["peak_rss_mib"].as_f64().unwrap_or(0.0)
    );
}

fn print_workload(out: &mut impl Write, w: &Value) {
    if w.is_null() {
        return;
    }
    let _ = writeln!(out, "\nReal workloads (median ms [min-max]; median ratio to a baseline run just before [min-max]):");
    for row in w.as_array().into_iter().flatten() {
        let _ = writeln!(out, "  {}", row["workload"].as_str().unwrap_or(""));
        for c in row["configs"].as_array().into_iter().flatten() {
            let number = |key: &str| c[key].as_f64().unwrap_or(0.0);
            let _ = writeln!(
                out,
                "    {:<40} {:>8.0} ms  [{:.0}-{:.0}]  x{:.3} [x{:.3}-x{:.3}]",
                c["config"].as_str().unwrap_or(""),
                number("ms"),
                number("min"),
                number("max"),
                number("ratio"),
                number("ratio_min"),
                number("ratio_max"),
            );
        }
    }
}

fn print_tenants(out: &mut impl Write, t: &Value) {
    if t.is_null() {
        return;
    }
    let mib = |key: &str| t[key].as_f64().unwrap_or(0.0);
    let _ = writeln!(
        out,
        "\n{} tenant cgroups, one denied open each (made in {:.1} s):",
        t["cgroups"],
        mib("made_in_s")
    );
    let _ = writeln!(
        out,
        "    watch RSS: peak {:.1} MiB, {:.1} MiB within 30 s of their removal",
        mib("peak_rss_mib"),
        mib("rss_after_removal_mib")
    );
    let _ = writeln!(
        out,
        "    then {} denials/s for {} s beside them: events {} in all, lost {}",
        t["steady_rate"], t["steady_seconds"], t["events"], t["lost"]
    );
}

fn print_hostile_shapes(out: &mut impl Write, h: &Value) {
    if h.is_null() {
        return;
    }
    let _ = writeln!(
        out,
        "\n{} cgroups with 3.9 KB paths: watch's peak RSS {:.1} MiB (the DaemonSet allows 64)",
        h["long_path_cgroups"],
        h["long_path_peak_rss_mib"].as_f64().unwrap_or(0.0)
    );
    let _ = writeln!(
        out,
        "one cgroup cycling 2 000 denied minors for {} s: {:.0} lines/s (budget {} per 1 s window); denied {}, lost {}",
        h["cycle_seconds"],
        h["cycle_lines_per_s"].as_f64().unwrap_or(0.0),
        h["cycle_budget_per_cgroup"],
        h["cycle_denied"],
        h["cycle_lost"]
    );
}

fn print_startup(out: &mut impl Write, s: &Value) {
    if s.is_null() {
        return;
    }
    let _ = writeln!(out, "\nStart-up (median [min-max]):");
    for (name, key, unit) in [
        ("watch: exec to ready", "watch_exec_to_ready_ms", "ms"),
        ("run -- true, end to end", "run_true_ms", "ms"),
        ("watch: idle RSS", "watch_idle_rss_mib", "MiB"),
    ] {
        let _ = writeln!(
            out,
            "    {:<28} {:>6.1} {unit:<3} [{:.1}-{:.1}]",
            name,
            s[key]["median"].as_f64().unwrap_or(0.0),
            s[key]["min"].as_f64().unwrap_or(0.0),
            s[key]["max"].as_f64().unwrap_or(0.0)
        );
    }
}
