//! How live "live" is: the time from a denied open's sighting in the kernel
//! to its line on watch's stdout and to its record at an OTLP collector,
//! at idle and while another cgroup floods denials, with watch as shipped
//! (the default fold). The probe opens under a new command name each time,
//! so every open is a first sighting: a repeat is folded by design.

use std::{
    fs,
    io::{BufRead, BufReader},
    path::Path,
    process::{Command, Stdio},
    thread,
    time::{Duration, SystemTime},
};

use gpu_trace::cgroup::spawn::place_child_in;
use serde_json::{json, Value};

use super::{collector::Collector, stop_for_summary, summary_number, watch_with_stdout, Scene};

/// The probe's command names: lp00000, lp00001, ...
pub fn is_probe_comm(comm: &str) -> bool {
    comm.len() == 7 && comm.starts_with("lp") && comm[2..].bytes().all(|b| b.is_ascii_digit())
}

/// Probes per second: under the kernel's per-cgroup budget of first
/// sightings in a fold window (64 in 5 s), so none is held back.
const PROBE_RATE: f64 = 10.0;
/// The other cgroup's flood, denials per second.
const FLOOD_RATE: f64 = 100_000.0;

pub fn liveness(probes: u64, open_loop: &Path, fresh_probe: &Path, scene: &Scene) -> Value {
    eprintln!("bench: liveness, from a denied open to its line and to its OTLP record");
    let collector = Collector::start();
    let idle = phase(probes, None, fresh_probe, scene, &collector);
    let flood = phase(probes, Some(open_loop), fresh_probe, scene, &collector);
    json!({ "probe_rate": PROBE_RATE, "idle": idle, "flood": flood,
            "targets_ms": { "line_p99_idle": 20, "line_p99_flood": 200 } })
}

/// One run of `probes` probe opens, with `flood` (the open loop) denied
/// flat out at FLOOD_RATE in a cgroup of its own meanwhile, or not.
fn phase(
    probes: u64,
    flood: Option<&Path>,
    fresh_probe: &Path,
    scene: &Scene,
    collector: &Collector,
) -> Value {
    let major = scene.major.to_string();
    let (mut watch, stderr) = watch_with_stdout(
        &["--major", &major, "--otlp", &collector.url],
        Stdio::piped(),
    );
    let stdout = watch.stdout.take().expect("watch's stdout");
    let lines = thread::spawn(move || line_latencies(stdout));
    let _ = collector.take_probe_latencies();

    let seconds = probes as f64 / PROBE_RATE + 2.0;
    let flood_cgroup = scene.cgroup().join("flood");
    let flooding = flood.map(|open_loop| {
        fs::create_dir_all(&flood_cgroup).expect("the flood's cgroup");
        let mut c = Command::new(open_loop);
        c.arg(&scene.denied_node)
            .arg(((FLOOD_RATE * seconds) as u64).to_string())
            .arg(FLOOD_RATE.to_string())
            .stdout(Stdio::piped());
        let _procs = place_child_in(&mut c, &[&flood_cgroup]).expect("join the flood's cgroup");
        let child = c.spawn().expect("the flood");
        thread::sleep(Duration::from_secs(1));
        child
    });
    let mut probe = Command::new(fresh_probe);
    probe
        .arg(&scene.denied_node)
        .arg(probes.to_string())
        .arg(PROBE_RATE.to_string())
        .stdout(Stdio::piped());
    let _procs = place_child_in(&mut probe, &[scene.cgroup()]).expect("join the scene's cgroup");
    let done = probe.output().expect("the probe");
    assert!(done.status.success(), "the probe: {:?}", done.status);
    let flood_rate = flooding.map(|child| {
        let out = child.wait_with_output().expect("the flood");
        let _ = fs::remove_dir(&flood_cgroup);
        // The open loop prints ns per open: its rate while it ran.
        let text = String::from_utf8_lossy(&out.stdout);
        let ns: f64 = text
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0.0);
        if ns > 0.0 {
            1e9 / ns
        } else {
            0.0
        }
    });
    // The exporter's batch waits up to 0.5 s for company.
    thread::sleep(Duration::from_secs(1));
    let summary = stop_for_summary(&mut watch, stderr);
    let line = lines.join().expect("the line reader");
    let otlp = collector.take_probe_latencies();
    json!({
        "probes": probes, "lines": line.len(), "otlp_records": otlp.len(),
        "line_ms": percentiles(line), "otlp_ms": percentiles(otlp),
        "flood_denials_per_s": flood_rate,
        "lost": summary_number(&summary, "lost"),
        "otlp_dropped": summary_number(&summary, "otlp dropped"),
    })
}

/// Seconds from sighting to the moment each probe line was read.
fn line_latencies(stdout: impl std::io::Read) -> Vec<f64> {
    let mut latencies = Vec::new();
    for line in BufReader::new(stdout).lines().map_while(Result::ok) {
        if !line.contains("\"comm\":\"lp") {
            continue;
        }
        let read_at = SystemTime::now();
        let Ok(record) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if !record["comm"].as_str().is_some_and(is_probe_comm) {
            continue;
        }
        let sighted = record["time"]
            .as_str()
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(SystemTime::from);
        if let Some(lag) = sighted.and_then(|s| read_at.duration_since(s).ok()) {
            latencies.push(lag.as_secs_f64());
        }
    }
    latencies
}

/// p50, p99 and the maximum, in ms (nearest rank).
fn percentiles(mut seconds: Vec<f64>) -> Value {
    if seconds.is_empty() {
        return Value::Null;
    }
    seconds.sort_by(f64::total_cmp);
    let rank =
        |p: f64| seconds[((p * seconds.len() as f64).ceil() as usize).clamp(1, seconds.len()) - 1];
    json!({ "p50": 1e3 * rank(0.50), "p99": 1e3 * rank(0.99), "max": 1e3 * rank(1.0) })
}

pub fn print(out: &mut impl std::io::Write, l: &Value) {
    if l.is_null() {
        return;
    }
    let _ = writeln!(
        out,
        "\nLiveness (a denied open's sighting to its line on stdout and to its record at an OTLP collector; watch as shipped, {} probes/s):",
        l["probe_rate"]
    );
    for (phase, title) in [("idle", "idle"), ("flood", "another cgroup flooding")] {
        let p = &l[phase];
        let ms = |what: &str, at: &str| p[what][at].as_f64().unwrap_or(f64::NAN);
        let flood = p["flood_denials_per_s"]
            .as_f64()
            .map(|r| format!(" at {r:.0} denials/s"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "    {title}{flood}: line p50 {:.1} ms, p99 {:.1} ms ({} of {} probes); OTLP p50 {:.0} ms, p99 {:.0} ms ({} records, {} dropped); lost {}",
            ms("line_ms", "p50"),
            ms("line_ms", "p99"),
            p["lines"],
            p["probes"],
            ms("otlp_ms", "p50"),
            ms("otlp_ms", "p99"),
            p["otlp_records"],
            p["otlp_dropped"],
            p["lost"],
        );
    }
    let _ = writeln!(
        out,
        "  targets: line p99 at most 20 ms idle, 200 ms under the flood; the OTLP exporter batches for up to 500 ms by design"
    );
}
