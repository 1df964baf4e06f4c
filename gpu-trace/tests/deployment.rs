//! The deployment files in contrib/ parse and say what the README promises.
//! No privileges needed.

use std::{fs, path::PathBuf};

use yaml_rust2::{Yaml, YamlLoader};

fn contrib(file: &str) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../contrib")
        .join(file);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The YAML document in contrib/`file` (each holds one); panics when it
/// does not parse.
fn contrib_yaml(file: &str) -> Yaml {
    YamlLoader::load_from_str(&contrib(file))
        .unwrap_or_else(|e| panic!("{file}: {e}"))
        .remove(0)
}

/// `[Section]` -> key=value lines of a systemd unit.
fn unit_sections(text: &str) -> Vec<(String, Vec<(String, String)>)> {
    let mut sections: Vec<(String, Vec<(String, String)>)> = Vec::new();
    for line in text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            sections.push((name.to_string(), Vec::new()));
        } else {
            let (key, value) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("not key=value: {line}"));
            sections
                .last_mut()
                .expect("a key before any section")
                .1
                .push((key.into(), value.into()));
        }
    }
    sections
}

#[test]
fn systemd_unit_runs_watch_with_output_and_metrics_and_restarts() {
    let sections = unit_sections(&contrib("gpu-trace.service"));
    let names: Vec<&str> = sections.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["Unit", "Service", "Install"]);
    let service = &sections[1].1;
    let get = |key: &str| {
        service
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    };
    let exec = get("ExecStart").expect("ExecStart");
    assert!(
        exec.starts_with("/usr/bin/gpu-trace watch ")
            && exec.contains("--output /var/log/gpu-trace/denied.jsonl")
            && exec.contains("--metrics "),
        "{exec}"
    );
    assert_eq!(get("Restart"), Some("on-failure"));
    assert_eq!(get("ExecReload"), Some("/bin/kill -HUP $MAINPID"));
    // The sandbox: where it may write, what it may do.
    for (key, value) in [
        ("LogsDirectory", "gpu-trace"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("MemoryMax", "256M"),
        (
            "CapabilityBoundingSet",
            "CAP_BPF CAP_PERFMON CAP_NET_ADMIN CAP_SYS_ADMIN CAP_SYS_RESOURCE CAP_SYS_PTRACE CAP_DAC_READ_SEARCH",
        ),
    ] {
        assert_eq!(get(key), Some(value), "{key}");
    }
}

/// The unit with its ExecStart pointed at the binary under test, in a
/// fresh directory, for systemd-analyze (which wants the binary to exist).
fn unit_for_analysis() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().expect("temp dir");
    let unit = dir.path().join("gpu-trace.service");
    let text =
        contrib("gpu-trace.service").replace("/usr/bin/gpu-trace", env!("CARGO_BIN_EXE_gpu-trace"));
    fs::write(&unit, text).expect("write unit");
    (dir, unit)
}

fn systemd_analyze(test: &str) -> bool {
    let found = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        skip::cannot_run(test, "no systemd-analyze (Debian's systemd package)");
    }
    found
}

#[test]
fn systemd_unit_verifies_and_its_exposure_is_low() {
    if !systemd_analyze("systemd_unit_verifies") {
        return;
    }
    let (_dir, unit) = unit_for_analysis();
    // verify exits 0 even for unknown keys and bad values: it says so on stderr.
    let verify = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&unit)
        .output()
        .expect("systemd-analyze verify");
    assert!(verify.status.success(), "{verify:?}");
    assert_eq!(
        String::from_utf8_lossy(&verify.stderr),
        "",
        "verify complains"
    );
    let security = std::process::Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&unit)
        .output()
        .expect("systemd-analyze security");
    let text = String::from_utf8_lossy(&security.stdout);
    let exposure: f64 = text
        .lines()
        .find_map(|l| l.split("exposure level for gpu-trace.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level: {text}"));
    // 9.6 unsandboxed; 4.8 with the unit's settings (root with
    // CAP_SYS_ADMIN can go no lower without a syscall filter).
    assert!(exposure <= 5.0, "exposure {exposure}: {text}");
}

#[test]
fn logrotate_snippet_signals_instead_of_copytruncate() {
    let text = contrib("gpu-trace.logrotate");
    assert!(text.contains("/var/log/gpu-trace/denied.jsonl {"));
    assert!(text.contains("--signal=HUP gpu-trace.service"));
    assert!(!text.lines().any(|l| l.trim() == "copytruncate"));
    assert_eq!(text.matches('{').count(), text.matches('}').count());
}

#[test]
fn daemonset_is_privileged_host_pid_with_mounts_and_scrape_annotation() {
    let ds = contrib_yaml("kubernetes/daemonset.yaml");
    assert_eq!(ds["kind"].as_str(), Some("DaemonSet"));
    assert_eq!(ds["apiVersion"].as_str(), Some("apps/v1"));
    let pod = &ds["spec"]["template"];
    assert_eq!(
        pod["metadata"]["annotations"]["prometheus.io/scrape"].as_str(),
        Some("true")
    );
    assert_eq!(pod["spec"]["hostPID"].as_bool(), Some(true));
    let container = &pod["spec"]["containers"][0];
    assert_eq!(
        container["securityContext"]["privileged"].as_bool(),
        Some(true)
    );
    let args: Vec<&str> = container["args"]
        .as_vec()
        .expect("args")
        .iter()
        .filter_map(Yaml::as_str)
        .collect();
    assert_eq!(args[0], "watch");
    // The tag `cargo xtask image` builds, never a floating one.
    assert_eq!(
        container["image"].as_str(),
        Some(format!("gpu-trace:{}", env!("CARGO_PKG_VERSION")).as_str())
    );
    // Metrics on the pod's IP, never on every address of the pod; bracketed,
    // which `--metrics` reads for IPv4 and IPv6 alike (a unit test in cli.rs).
    let at = args
        .iter()
        .position(|a| *a == "--metrics")
        .expect("--metrics");
    assert_eq!(args[at + 1], "[$(POD_IP)]:9745");
    assert_eq!(
        container["env"][0]["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("status.podIP")
    );
    let mounts: Vec<&str> = container["volumeMounts"]
        .as_vec()
        .expect("mounts")
        .iter()
        .filter_map(|m| m["mountPath"].as_str())
        .collect();
    for needed in [
        "/sys/fs/cgroup",
        "/sys/fs/bpf",
        "/dev",
        "/run/containerd/io.containerd.runtime.v2.task",
        "/var/lib/kubelet/pod-resources",
        "/run/systemd/transient",
    ] {
        assert!(mounts.contains(&needed), "{needed} mounted: {mounts:?}");
    }
    let volumes = pod["spec"]["volumes"].as_vec().expect("volumes");
    assert_eq!(volumes.len(), mounts.len(), "every mount has a volume");
}

#[test]
fn the_network_policy_lets_only_prometheus_reach_the_metrics() {
    let policy = contrib_yaml("kubernetes/networkpolicy.yaml");
    assert_eq!(policy["kind"].as_str(), Some("NetworkPolicy"));
    assert_eq!(
        policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/name"].as_str(),
        Some("gpu-trace")
    );
    let rule = &policy["spec"]["ingress"][0];
    assert_eq!(rule["ports"][0]["port"].as_i64(), Some(9745));
    assert_eq!(
        rule["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/name"].as_str(),
        Some("prometheus")
    );
}

#[path = "support/promtool.rs"]
mod promtool;
#[path = "support/skip.rs"]
mod skip;

fn contrib_dir(dir: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../contrib")
        .join(dir)
}

/// promtool's verdict, with its output on failure.
fn assert_promtool_passes(promtool: &PathBuf, args: &[&str], dir: &std::path::Path) {
    let out = std::process::Command::new(promtool)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let Some(promtool) = promtool::promtool("the_alert_rules_pass_promtool") else {
        return;
    };
    let dir = contrib_dir("prometheus");
    assert_promtool_passes(&promtool, &["check", "rules", "gpu-trace-rules.yaml"], &dir);
    assert_promtool_passes(
        &promtool,
        &["test", "rules", "gpu-trace-rules.test.yaml"],
        &dir,
    );
    // Every alert has a unit test that expects it to fire.
    let rules = contrib_yaml("prometheus/gpu-trace-rules.yaml");
    let tests = contrib("prometheus/gpu-trace-rules.test.yaml");
    for rule in rules["groups"][0]["rules"].as_vec().expect("rules") {
        let alert = rule["alert"].as_str().expect("an alert");
        assert!(
            tests.contains(&format!(
                "alertname: {alert}\n        exp_alerts:\n          - "
            )),
            "no test makes {alert} fire"
        );
    }
}

/// The metrics `watch --metrics` exports (docs/watch.md#metrics).
const EXPORTED: [&str; 6] = [
    "gpu_trace_denied_total",
    "gpu_trace_problems_total",
    "gpu_trace_events_total",
    "gpu_trace_events_lost_total",
    "gpu_trace_hook_attached",
    "gpu_trace_build_info",
];

/// Every `expr` of the dashboard's panels, with Grafana's variables
/// replaced by what they stand for at query time.
fn dashboard_queries() -> Vec<(String, String)> {
    let dashboard: serde_json::Value =
        serde_json::from_str(&contrib("grafana/gpu-trace.json")).expect("dashboard JSON");
    let mut queries = Vec::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().expect("title");
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            let promql = expr
                .replace("$__rate_interval", "5m")
                .replace("$__range", "1h")
                .replace("$instance", ".*");
            assert!(!promql.contains('$'), "{title}: unknown variable in {expr}");
            queries.push((title.to_string(), promql));
        }
    }
    queries
}

#[test]
fn every_dashboard_query_is_valid_promql_over_the_exported_metrics() {
    let queries = dashboard_queries();
    let mut used = std::collections::BTreeSet::new();
    for (title, promql) in &queries {
        for word in promql.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
            if word.starts_with("gpu_trace_") {
                assert!(EXPORTED.contains(&word), "{title}: {word} is not exported");
                used.insert(word);
            }
        }
    }
    // The panels the dashboard promises: denials by container and device,
    // causes, lost events, hooks, build info.
    assert_eq!(used.len(), EXPORTED.len(), "unused: {used:?}");
    let Some(promtool) = promtool::promtool("every_dashboard_query_is_valid_promql") else {
        return;
    };
    // Each query as a recording rule, which promtool parses and checks.
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, (_, promql)) in queries.iter().enumerate() {
        rules.push_str(&format!(
            "      - record: dashboard:panel_{i}\n        expr: {}\n",
            serde_json::to_string(promql).expect("quoted")
        ));
    }
    let dir = tempfile::tempdir().expect("temp dir");
    fs::write(dir.path().join("dashboard.yaml"), rules).expect("write rules");
    assert_promtool_passes(&promtool, &["check", "rules", "dashboard.yaml"], dir.path());
}
