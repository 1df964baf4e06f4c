//! The command line.

use std::{ffi::OsString, path::PathBuf};

use clap::{Args, Parser, Subcommand};

use crate::{
    host::proc_devices::CharMajors,
    kernel::{
        bpf_log::BpfLogLevel, device_hook::HookChoice, open_route::OpensChoice,
        tracer::TracerConfig,
    },
    render::output::Format,
    text::style::ColorWhen,
};

#[derive(Debug, Parser)]
#[command(
    name = "gpu-trace",
    version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("GPU_TRACE_COMMIT"), ")"),
    about = "Shows denied GPU device accesses live: which device policy refused which device for which cgroup",
    after_help = "Exit status: 0 ok, 1 failure (selftest FAIL, runtime error), 2 usage error, \
3 not root, 4 no cgroup2 mount, 5 kernel older than 5.8, 6 a required hook refused by the kernel, \
7 kernel in lockdown (confidentiality)."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Colour human output: auto (a terminal that shows colour; NO_COLOR turns it off,
    /// CLICOLOR_FORCE on), always or never. Files, pipes and JSON get none in auto.
    #[arg(long, global = true, value_enum, default_value_t = ColorWhen::Auto, value_name = "WHEN")]
    pub color: ColorWhen,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Stream every denied access to a watched device, host-wide, until Ctrl-C.
    #[command(after_help = "EXAMPLES:
    gpu-trace watch                      denied NVIDIA device accesses, one line each
    gpu-trace watch --format json        the same as JSON lines
    gpu-trace watch --all                allowed accesses too: who opens the GPUs
    gpu-trace watch --major 511 -x       also major 511; -x: every device
    gpu-trace watch -o /var/log/gpu-trace/denied.jsonl --fold 10s
    gpu-trace watch --container 200 --device nvidia-uvm")]
    Watch(Box<WatchArgs>),
    /// Run CMD, follow its process tree, and report each denied GPU device access with its cause and fix.
    #[command(
        after_help = "gpu-trace's own lines go to stderr; CMD's output passes through untouched. \
Exits with CMD's status (128+N when killed by signal N; 127 when CMD cannot be found, 126 when it cannot be run).

EXAMPLES:
    gpu-trace run -- python3 -c 'import torch; torch.cuda.init()'
    gpu-trace run --container 200 -- ./cuda-probe        under CT 200's device policy, from the host
    gpu-trace run --cgroup /system.slice/ollama.service -- nvidia-smi
    gpu-trace run --format json -- ./train.sh 2> trace.jsonl"
    )]
    Run(RunArgs),
    /// Which NVIDIA devices a cgroup may open, decided by the device policies in force on it.
    #[command(
        after_help = "Evaluates the cgroup_device programs attached to the cgroup and its ancestors (and, \
with --pid or --container, the process's cgroup v1 devices.list) for every NVIDIA node on the host and in \
the target's mount namespace; flags stale majors, missing nodes and the nvidia_uvm module.

Exit status: 0 when nvidiactl, nvidia-uvm and a GPU node are present, current and allowed in the target's \
view; 1 when any is denied, missing or stale; 2 on error.

EXAMPLES:
    gpu-trace check --container 200            a Proxmox CT, by id
    gpu-trace check --pid 4242 --format json
    gpu-trace check --cgroup /system.slice/ollama.service"
    )]
    Check(CheckArgs),
    /// Add up watch's JSON logs: totals, top containers, devices and causes, problems per hour.
    #[command(
        after_help = "Reads JSON lines written by `gpu-trace watch` (plain or gzip'd, as \
logrotate leaves them; `-` or no LOG: stdin). Counts are sums of each record's `count`, so folded \
repeats weigh what they stand for. Lines that are not watch's records are counted and skipped. \
Loads nothing into the kernel. Exit status: 0, 1 when a LOG cannot be read, 2 for a bad option.

EXAMPLES:
    gpu-trace summary /var/log/gpu-trace/denied.jsonl*
    gpu-trace summary --since 24h /var/log/gpu-trace/denied.jsonl
    gpu-trace summary --since 2026-11-01 --until 2026-12-01 --format json denied.jsonl*
    kubectl logs -n kube-system ds/gpu-trace | gpu-trace summary"
    )]
    Summary(SummaryArgs),
    /// Reproduce the nvidia-uvm incident in a scratch cgroup and show the tracer catching it.
    #[command(
        after_help = "Needs root and no GPU. Prints PASS (exit 0) or FAIL with the reason (exit 1).

EXAMPLES:
    sudo gpu-trace selftest
    gpu-trace watch --major 511 & gpu-trace selftest    the denial also shows up live in watch"
    )]
    Selftest(TracerArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    #[command(after_help = "EXAMPLES:
    gpu-trace completions bash > /etc/bash_completion.d/gpu-trace
    gpu-trace completions zsh > \"${fpath[1]}/_gpu-trace\"")]
    Completions { shell: clap_complete::Shell },
    /// Internal: print the man page (roff), for packaging.
    #[command(name = "__man", hide = true)]
    Man,
    /// Internal: the child process selftest and the tests run inside a cgroup.
    #[command(name = "__probe", hide = true)]
    Probe {
        /// open:r|w|rw:PATH or mknod:MAJOR:MINOR:PATH
        ops: Vec<String>,
    },
}

#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Output format [default: human; json with --output].
    #[arg(short, long, value_enum)]
    pub format: Option<Format>,
    /// Append to FILE instead of writing to stdout; SIGHUP reopens it (log rotation).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Fold identical denials (cgroup, device, access, command) within this window
    /// into one record with a count; the first is always written at once. 0 disables.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = crate::stream::fold::parse_window)]
    pub fold: std::time::Duration,
    /// Records written per fold window (first occurrences and counts of
    /// repeats), in all; past it (or past --budget-per-cgroup) a cgroup's
    /// problems become one summary record per window with their exact
    /// count. 0: no limit here (the kernel still sends at most 64 first
    /// sightings per cgroup and window, and counts the rest).
    #[arg(long, value_name = "N", default_value_t = 500)]
    pub budget: u32,
    /// Records written per fold window for one cgroup. 0: no limit.
    #[arg(long, value_name = "N", default_value_t = 50)]
    pub budget_per_cgroup: u32,
    /// Serve Prometheus/OpenMetrics counters over HTTP at ADDR/metrics (e.g. 127.0.0.1:9745,
    /// [::1]:9745; an IPv4 address may be bracketed too, so `[$(POD_IP)]:9745` fits both).
    /// They count every event, whatever the filters below show.
    #[arg(long, value_name = "ADDR", value_parser = listen_address)]
    pub metrics: Option<std::net::SocketAddr>,
    /// At most N series of gpu_trace_denied_total (one per container, device and
    /// access); denials beyond them count under the label value "other".
    #[arg(long, value_name = "N", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    pub metrics_series: u32,
    /// Also show allowed accesses to watched devices.
    #[arg(short, long)]
    pub all: bool,
    #[command(flatten)]
    pub devices: DeviceSelection,
    #[command(flatten)]
    pub tracer: TracerArgs,
    /// Only this container (LXC name or CT id, container id or name).
    #[arg(long, value_name = "NAME-OR-ID")]
    pub container: Option<String>,
    /// Only this Kubernetes namespace's pods.
    #[arg(long, value_name = "NAMESPACE")]
    pub namespace: Option<String>,
    /// Only this Kubernetes pod.
    #[arg(long, value_name = "NAMESPACE/POD", value_parser = crate::model::container::PodQuery::parse)]
    pub pod: Option<crate::model::container::PodQuery>,
    /// Only this cgroup and the cgroups below it (relative to the cgroup2 mount).
    #[arg(long, value_name = "PATH")]
    pub cgroup: Option<PathBuf>,
    /// Only this process.
    #[arg(short, long)]
    pub pid: Option<u32>,
    /// Only processes with this command name.
    #[arg(long)]
    pub comm: Option<String>,
    /// Only this device: a node or driver name (nvidia-uvm), a major, or MAJ:MIN.
    #[arg(long, value_name = "DEVICE", value_parser = crate::stream::filter::DeviceFilter::parse)]
    pub device: Option<crate::stream::filter::DeviceFilter>,
    #[command(flatten)]
    pub pod_resources: PodResourcesArg,
    /// Also send every record written to an OpenTelemetry Collector as an
    /// OTLP log record (HTTP/protobuf): its base URL, `http://HOST:4318` or
    /// `https://HOST:4318`, or its `/v1/logs` URL. Never waits on it: a
    /// record it cannot take in time is counted as dropped (the closing
    /// line, at most 8 MiB queued).
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,
    /// Headers for every OTLP request, `Name: value` a line (a bearer
    /// token, a tenant id), from a file kept out of the command line.
    #[arg(long, value_name = "FILE", requires = "otlp")]
    pub otlp_headers: Option<PathBuf>,
    /// For an https:// collector: the CA certificates (PEM) its certificate
    /// must chain to, instead of the system's
    /// (/etc/ssl/certs/ca-certificates.crt); for a private CA. The
    /// collector's certificate is always verified.
    #[arg(long, value_name = "FILE", requires = "otlp")]
    pub otlp_ca: Option<PathBuf>,
}

/// Where the kubelet says which GPUs each container was allocated.
#[derive(Debug, Args, Clone, Default)]
pub struct PodResourcesArg {
    /// The kubelet's PodResources socket: a GPU denied to a pod that was not
    /// allocated it is a probe (cause not-allocated), not an incident. Read
    /// when given, or at its default place when that exists; `none`: never.
    #[arg(long = "pod-resources", value_name = "SOCKET")]
    pub socket: Option<PathBuf>,
}

impl PodResourcesArg {
    /// The socket to read, if any.
    pub fn socket(&self) -> Option<PathBuf> {
        match &self.socket {
            Some(none) if none.as_os_str() == "none" => None,
            Some(socket) => Some(socket.clone()),
            None => {
                let default = PathBuf::from(crate::host::pod_resources::DEFAULT_SOCKET);
                default.exists().then_some(default)
            }
        }
    }
}

impl WatchArgs {
    pub fn budget(&self) -> crate::stream::fold::Budget {
        crate::stream::fold::Budget {
            per_cgroup: self.budget_per_cgroup,
            total: self.budget,
        }
    }

    pub fn format(&self) -> Format {
        self.format.unwrap_or(if self.output.is_some() {
            Format::Json
        } else {
            Format::Human
        })
    }

    pub fn filter(&self) -> crate::stream::filter::Filter {
        crate::stream::filter::Filter {
            container: self.container.clone(),
            namespace: self.namespace.clone(),
            pod: self.pod.clone(),
            cgroup: self
                .cgroup
                .as_ref()
                .map(|c| std::path::Path::new("/").join(c.strip_prefix("/").unwrap_or(c))),
            pid: self.pid,
            comm: self.comm.clone(),
            device: self.device.clone(),
            kinds: self.devices.kinds(),
        }
    }
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// Start CMD inside this cgroup (a path under the cgroup2 mount, or relative to it like /lxc/200).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["container", "pod"])]
    pub cgroup: Option<PathBuf>,
    /// Start CMD inside this container's cgroup: an LXC name or CT id, or a (short) container id.
    #[arg(long, value_name = "NAME-OR-ID")]
    pub container: Option<String>,
    /// Start CMD inside this Kubernetes pod's container (its only one, or the one --container names).
    #[arg(long, value_name = "NAMESPACE/POD", value_parser = crate::model::container::PodQuery::parse)]
    pub pod: Option<crate::model::container::PodQuery>,
    /// Format of gpu-trace's own lines on stderr.
    #[arg(short, long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    #[command(flatten)]
    pub devices: DeviceSelection,
    #[command(flatten)]
    pub tracer: TracerArgs,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// The cgroup to check (a path under the cgroup2 mount, or relative to it).
    #[arg(long, value_name = "PATH", conflicts_with_all = ["pid", "container", "pod"])]
    pub cgroup: Option<PathBuf>,
    /// The cgroup (and mount namespace) of this process.
    #[arg(long, value_name = "PID", conflicts_with_all = ["container", "pod"])]
    pub pid: Option<u32>,
    /// A container: an LXC name or CT id, or a (short) container id.
    #[arg(long, value_name = "NAME-OR-ID")]
    pub container: Option<String>,
    /// A Kubernetes pod's container (its only one, or the one --container names).
    #[arg(long, value_name = "NAMESPACE/POD", value_parser = crate::model::container::PodQuery::parse)]
    pub pod: Option<crate::model::container::PodQuery>,
    /// Judge only this vendor's node set (repeatable): nvidia (CUDA), amd (ROCm),
    /// intel (Level Zero), habana (Gaudi). By default: the vendors present.
    #[arg(long = "vendor", value_name = "NAME", value_parser = crate::model::vendor::Vendor::parse)]
    pub vendors: Vec<crate::model::vendor::Vendor>,
    /// Read CDI specs from DIR (repeatable) instead of /etc/cdi and /var/run/cdi.
    #[arg(long = "cdi-dir", value_name = "DIR")]
    pub cdi_dirs: Vec<PathBuf>,
    #[command(flatten)]
    pub pod_resources: PodResourcesArg,
    #[arg(short, long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
}

#[derive(Debug, Args)]
pub struct SummaryArgs {
    /// Only records last seen at or after TIME: RFC 3339, a date (UTC), or an age (30m, 24h, 7d).
    #[arg(long, value_name = "TIME", value_parser = time_bound)]
    pub since: Option<chrono::DateTime<chrono::Utc>>,
    /// Only records last seen before TIME (same forms as --since).
    #[arg(long, value_name = "TIME", value_parser = time_bound)]
    pub until: Option<chrono::DateTime<chrono::Utc>>,
    /// How many containers, devices and causes to list.
    #[arg(long, value_name = "N", default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    pub top: u16,
    #[arg(short, long, value_enum, default_value_t = Format::Human)]
    pub format: Format,
    /// watch's logs (JSON lines, plain or gzip'd); `-` or none: stdin.
    #[arg(value_name = "LOG")]
    pub logs: Vec<PathBuf>,
}

/// Which devices to watch; shared by the commands that trace.

#[derive(Debug, Args, Clone, Default)]
pub struct DeviceSelection {
    /// Only this vendor's devices (repeatable): nvidia, amd, intel, habana.
    #[arg(long = "vendor", value_name = "NAME", value_parser = crate::model::vendor::Vendor::parse)]
    pub vendors: Vec<crate::model::vendor::Vendor>,
    /// Only nodes of this role (repeatable): compute, render, display,
    /// control, uvm, caps, and beside the GPU rdma, imex, gpudirect, vfio,
    /// nvswitch.
    #[arg(long = "role", value_name = "NAME", value_parser = crate::model::vendor::Role::parse)]
    pub roles: Vec<crate::model::vendor::Role>,
    /// Also watch this char major (repeatable). The accelerators' are always watched.
    #[arg(short, long = "major", value_name = "N",
          value_parser = clap::value_parser!(u32).range(..i64::from(gpu_trace_common::MAJOR_LIMIT)))]
    pub majors: Vec<u32>,
    /// Watch every device, not only the accelerators' and --major ones.
    #[arg(short = 'x', long)]
    pub all_devices: bool,
}

impl DeviceSelection {
    /// What `--vendor` and `--role` let through.
    pub fn kinds(&self) -> crate::stream::filter::KindFilter {
        crate::stream::filter::KindFilter {
            vendors: self.vendors.clone(),
            roles: self.roles.clone(),
        }
    }
}

/// How the tracer hooks into the kernel; shared by the commands that trace.
#[derive(Debug, Args, Clone, Copy, Default)]
pub struct TracerArgs {
    /// Device hook: auto picks fexit where the kernel allows it (final verdict,
    /// cgroup v1 included), else the cgroup_device observer.
    #[arg(long, value_enum, default_value_t = HookChoice::Auto)]
    pub hook: HookChoice,
    /// How open calls' path and result are traced. auto (watch's default):
    /// fexit on the open function where the kernel has BPF trampolines
    /// (only opens pay);
    /// elsewhere the syscall tracepoints only when this host needs them
    /// (cgroup v1 restrictions, or verdicts from the errno), else none.
    /// full (run's and selftest's default): every open's result, by
    /// fexit or else the syscall tracepoints, which make every
    /// syscall on the host slower. none: the device hook alone; unseen are
    /// missing nodes (ENOENT), absent drivers (ENXIO), EACCES refusals and,
    /// with the observer, cgroup v1 denials.
    #[arg(long, value_enum, value_name = "ROUTE")]
    pub opens: Option<OpensChoice>,
    /// The same as `--opens none`.
    #[arg(long, conflicts_with = "opens")]
    pub device_hook_only: bool,
    /// The kernel programs' own records of what they drop, count instead
    /// of sending, or cut, on stderr as `gpu-trace: bpf: ...` (at most 10
    /// a second of each kind, the rest counted). At off (the default;
    /// selftest's is warn) the records are not made. See
    /// docs/troubleshooting.md.
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub bpf_log: Option<BpfLogLevel>,
}

impl TracerArgs {
    /// The route asked for, or the command's default.
    pub fn opens_or(&self, default: OpensChoice) -> OpensChoice {
        if self.device_hook_only {
            return OpensChoice::None;
        }
        self.opens.unwrap_or(default)
    }
}

/// The kernel-side filter: the accelerators' majors known now plus the user's.
pub fn tracer_config(
    devices: &DeviceSelection,
    majors: &CharMajors,
    report_allowed: bool,
    tracer: TracerArgs,
    default_opens: OpensChoice,
) -> TracerConfig {
    let mut watched = majors.accelerator_majors();
    watched.extend(&devices.majors);
    watched.sort_unstable();
    watched.dedup();
    TracerConfig {
        majors: watched,
        all_devices: devices.all_devices,
        report_allowed,
        follow_process_tree: false,
        hook: tracer.hook,
        opens: tracer.opens_or(default_opens),
        // watch sets its own; run folds in its report.
        fold_window: std::time::Duration::ZERO,
        bpf_log: tracer.bpf_log.unwrap_or_default(),
    }
}

/// `--since`/`--until`: a bad time is a usage error (exit 2), like any option.
fn time_bound(text: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    crate::analysis::log_summary::parse_time_bound(text, chrono::Utc::now())
}

/// A socket address, also as `[IPv4]:PORT`: a template that brackets the
/// address (`[$(POD_IP)]:9745`) then works for either family, where an
/// unbracketed IPv6 address would swallow the port.
fn listen_address(text: &str) -> Result<std::net::SocketAddr, String> {
    let bracketed_v4 = text
        .strip_prefix('[')
        .and_then(|rest| rest.split_once("]:"))
        .and_then(|(ip, port)| Some((ip.parse::<std::net::Ipv4Addr>().ok()?, port.parse().ok()?)));
    match bracketed_v4 {
        Some((ip, port)) => Ok(std::net::SocketAddr::from((ip, port))),
        None => text
            .parse()
            .map_err(|_| format!("{text:?} is not IP:PORT (IPv6 as [IP]:PORT)")),
    }
}

#[cfg(test)]
mod tests {
    use super::listen_address;

    #[test]
    fn listen_addresses_of_either_family_bracketed() {
        assert_eq!(
            listen_address("[10.1.2.3]:9745").unwrap().to_string(),
            "10.1.2.3:9745"
        );
        assert_eq!(
            listen_address("[fd00::1]:9745").unwrap().to_string(),
            "[fd00::1]:9745"
        );
        assert_eq!(
            listen_address("127.0.0.1:9745").unwrap().to_string(),
            "127.0.0.1:9745"
        );
        // What an unbracketed template gives on an IPv6 pod.
        assert!(listen_address("fd00::1:9745").is_err());
        assert!(listen_address("[10.1.2.3]").is_err());
    }
}
