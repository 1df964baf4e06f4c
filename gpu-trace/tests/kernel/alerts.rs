//! The fleet's own engines, end to end: a real Prometheus scrapes
//! `watch --metrics` with the shipped alert rules loaded, and a real
//! Alertmanager routes what fires to a webhook receiver this test runs.
//!
//! Intervals are short here, not as shipped: Prometheus scrapes and
//! evaluates every second, Alertmanager waits 1 s before a group's first
//! notification, and the rules are contrib/prometheus/gpu-trace-rules.yaml
//! with their look-back windows (5 and 10 minutes) cut to 15 s, so that an
//! alert resolves within the test; their expressions are otherwise as shipped.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::TcpListener,
    path::PathBuf,
    sync::{Arc, Mutex},
};

use crate::{bounds::cycling_test, common::*, promtool};

/// A server the test started, killed on drop.
struct Server(std::process::Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Alertmanager's webhook notifications, as received.
struct Webhook {
    url: String,
    notifications: Arc<Mutex<Vec<Value>>>,
}

impl Webhook {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the receiver");
        let url = format!("http://{}/", listener.local_addr().expect("addr"));
        let notifications = Arc::new(Mutex::new(Vec::new()));
        let received = Arc::clone(&notifications);
        thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let mut reader = BufReader::new(stream);
                let mut length = 0;
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line != "\r\n" {
                    if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = value.trim().parse().unwrap_or(0);
                    }
                    line.clear();
                }
                let mut body = vec![0; length];
                if reader.read_exact(&mut body).is_ok() {
                    if let Ok(notification) = serde_json::from_slice::<Value>(&body) {
                        received.lock().expect("lock").push(notification);
                    }
                }
                let _ = reader.get_mut().write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                );
            }
        });
        Self { url, notifications }
    }

    /// The alerts named `alertname` with `status` (firing, resolved) in
    /// every notification so far.
    fn alerts(&self, alertname: &str, status: &str) -> Vec<Value> {
        self.notifications
            .lock()
            .expect("lock")
            .iter()
            .flat_map(|n| n["alerts"].as_array().cloned().unwrap_or_default())
            .filter(|a| a["status"] == status && a["labels"]["alertname"] == alertname)
            .collect()
    }

    fn firing(&self, alertname: &str) -> Vec<Value> {
        self.alerts(alertname, "firing")
    }

    /// The first `alertname` with `status`; else fails, with the servers'
    /// logs in `dir`.
    fn wait_for(&self, alertname: &str, status: &str, dir: &Path) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(alert) = self.alerts(alertname, status).into_iter().next() {
                return alert;
            }
            let log = |name: &str| fs::read_to_string(dir.join(name)).unwrap_or_default();
            assert!(
                Instant::now() < deadline,
                "no {status} {alertname} within 60 s: {:#?}\nprometheus: {}\nalertmanager: {}",
                self.notifications.lock().expect("lock"),
                log("prometheus.log"),
                log("alertmanager.log"),
            );
            thread::sleep(Duration::from_millis(50));
        }
    }
}

fn start(binary: &PathBuf, args: &[String], log: PathBuf) -> Server {
    let log = fs::File::create(log).expect("log");
    Server(
        Command::new(binary)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start the server"),
    )
}

fn alertmanager(binary: &PathBuf, dir: &Path, addr: &str, receiver: &str) -> Server {
    let config = dir.join("alertmanager.yml");
    fs::write(
        &config,
        format!(
            "route:\n  receiver: test\n  group_by: [alertname, instance, container, device]\n  group_wait: 1s\n  group_interval: 1s\n  repeat_interval: 1h\nreceivers:\n  - name: test\n    webhook_configs:\n      - url: {receiver}\n        send_resolved: true\n"
        ),
    )
    .expect("write alertmanager.yml");
    let args = [
        format!("--config.file={}", config.display()),
        format!("--storage.path={}", dir.join("am").display()),
        format!("--web.listen-address={addr}"),
        "--cluster.listen-address=".to_string(),
    ];
    // Debian's build reads its default template from
    // /usr/share/prometheus/alertmanager: an unpacked package (not
    // installed, whose postinst would start a server) shows it there to
    // Alertmanager alone, /usr/share overlaid in a mount namespace of its own.
    let share = binary
        .parent()
        .and_then(Path::parent)
        .map(|usr| usr.join("share"));
    match share
        .filter(|s| s.join("prometheus/alertmanager").is_dir() && *s != Path::new("/usr/share"))
    {
        Some(share) => {
            let overlay = format!(
                "mount -t overlay overlay -o lowerdir={}:/usr/share /usr/share && exec \"$0\" \"$@\"",
                share.display()
            );
            let mut all = vec![
                "--mount".to_string(),
                "--propagation".into(),
                "private".into(),
            ];
            all.extend([
                "sh".into(),
                "-c".into(),
                overlay,
                binary.display().to_string(),
            ]);
            all.extend(args);
            start(
                &PathBuf::from("unshare"),
                &all,
                dir.join("alertmanager.log"),
            )
        }
        None => start(binary, &args, dir.join("alertmanager.log")),
    }
}

fn prometheus(
    binary: &PathBuf,
    dir: &Path,
    addr: &str,
    target: &str,
    alertmanager: &str,
) -> Server {
    let shipped =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../contrib/prometheus/gpu-trace-rules.yaml");
    let rules = dir.join("gpu-trace-rules.yaml");
    fs::write(
        &rules,
        with_short_windows(&fs::read_to_string(shipped).expect("rules")),
    )
    .expect("write the rules");
    let config = dir.join("prometheus.yml");
    fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files: ['{}']\nalerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{alertmanager}']\nscrape_configs:\n  - job_name: gpu-trace\n    static_configs:\n      - targets: ['{target}']\n",
            rules.display()
        ),
    )
    .expect("write prometheus.yml");
    start(
        binary,
        &[
            format!("--config.file={}", config.display()),
            format!("--storage.tsdb.path={}", dir.join("tsdb").display()),
            format!("--web.listen-address={addr}"),
        ],
        dir.join("prometheus.log"),
    )
}

/// The shipped rules with every look-back window cut to 15 s; fails if the
/// rules no longer have the windows this test knows.
fn with_short_windows(rules: &str) -> String {
    let windows = ["[5m]", "offset 5m", "[10m]", "offset 10m"];
    let mut short = rules.to_string();
    for window in windows {
        assert_eq!(
            short.matches(window).count(),
            1,
            "{window}: the shipped rules changed"
        );
        let cut = if window.starts_with('[') {
            "[15s]"
        } else {
            "offset 15s"
        };
        short = short.replace(window, cut);
    }
    short
}

/// Whether Prometheus has scraped `job` and found it up.
fn scraped(prometheus: &str) -> bool {
    ureq::get(&format!(
        "http://{prometheus}/api/v1/query?query=up%7Bjob%3D%22gpu-trace%22%7D"
    ))
    .call()
    .ok()
    .and_then(|mut r| r.body_mut().read_to_string().ok())
    .and_then(|body| serde_json::from_str::<Value>(&body).ok())
    .is_some_and(|v| v["data"]["result"][0]["value"][1] == "1")
}

#[test]
fn a_denial_pages_once_through_prometheus_and_alertmanager_and_a_flood_pages_losing_events() {
    let Some((incident, mknod_cycle)) = cycling_test("alerts", "alerts") else {
        return;
    };
    let engines = (
        promtool::server("GPU_TRACE_PROMETHEUS", "alerts"),
        promtool::server("GPU_TRACE_ALERTMANAGER", "alerts"),
    );
    let (Some(prometheus_bin), Some(alertmanager_bin)) = engines else {
        return;
    };
    let dir = temp_dir_named("gpu-trace-alerts-");
    let receiver = Webhook::start();
    let metrics = free_local_addr();
    // Unfolded, and nothing written (--pid 1 shows no event): the flood
    // below must overflow the ring; metrics count every record all the same.
    let mut args = crate::bpf_log::unfolded_and_hidden("off").to_vec();
    args.extend(["--metrics", &metrics]);
    let watcher = incident.watch(&args);
    let am_addr = free_local_addr();
    let _alertmanager = alertmanager(&alertmanager_bin, dir.path(), &am_addr, &receiver.url);
    let prom_addr = free_local_addr();
    let _prometheus = prometheus(&prometheus_bin, dir.path(), &prom_addr, &metrics, &am_addr);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !scraped(&prom_addr) {
        assert!(
            Instant::now() < deadline,
            "Prometheus never scraped watch (logs in {})",
            dir.path().display()
        );
        thread::sleep(Duration::from_millis(100));
    }

    let denied_at = Instant::now();
    incident.deny_once();
    let alert = receiver.wait_for("GpuDeviceDenied", "firing", dir.path());
    eprintln!(
        "alerts: the denied open reached the receiver as GpuDeviceDenied after {:.1} s (scrape and evaluation every 1 s, group wait 1 s)",
        denied_at.elapsed().as_secs_f64()
    );
    let labels = &alert["labels"];
    let cgroup = incident.cgroup.relative_path().to_str().expect("utf-8");
    assert_eq!(labels["container"], format!("cgroup {cgroup}"), "{alert:#}");
    assert_eq!(labels["device"], "nvidia-uvm", "{alert:#}");
    assert_eq!(labels["major"], incident.uvm_major.to_string(), "{alert:#}");
    assert_eq!(labels["cause"], "dynamic-major-not-allowed", "{alert:#}");
    assert_eq!(labels["instance"], metrics.as_str(), "{alert:#}");
    assert_eq!(labels["severity"], "warning", "{alert:#}");

    // The same incident again: the alert is already firing; no second page.
    incident.deny_once();
    let last_denial = Instant::now();
    thread::sleep(Duration::from_secs(5));
    assert_eq!(receiver.firing("GpuDeviceDenied").len(), 1, "paged twice");

    // The problem stops: once the window holds no new denial, the alert
    // resolves, for the same labels.
    let resolved = receiver.wait_for("GpuDeviceDenied", "resolved", dir.path());
    eprintln!(
        "alerts: GpuDeviceDenied resolved {:.1} s after the last denial (window 15 s)",
        last_denial.elapsed().as_secs_f64()
    );
    assert_eq!(resolved["labels"], alert["labels"], "{resolved:#}");
    assert_eq!(receiver.firing("GpuDeviceDenied").len(), 1, "paged again");

    // A flood the ring buffer cannot take: events are lost, and counted.
    let scratch = temp_dir_named("gpu-trace-alerts-nodes-");
    let mut cycle = Command::new(&mknod_cycle);
    cycle
        .arg(scratch.path().join("n"))
        .args([&incident.uvm_major.to_string(), "2000", "2"]);
    printed_count(start_in_cgroup(incident.cgroup.path(), cycle));
    let lost = receiver.wait_for("GpuTraceLosingEvents", "firing", dir.path());
    assert_eq!(lost["labels"]["instance"], metrics.as_str(), "{lost:#}");
    let stderr = watcher.stop_cleanly();
    let (summary, count) = summary_counts(&stderr);
    assert!(count("lost") > 0, "the ring took them all: {summary}");
}
