//! `watch --metrics ADDR`: counters for Prometheus, in the OpenMetrics text
//! format, over HTTP. The label sets tenants can vary are capped
//! (`--metrics-series`). prometheus-client (the Prometheus project's Rust
//! client) renders them; metrics_server.rs serves them.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
};

use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{counter::Counter, family::Family, gauge::Gauge},
    registry::Registry,
};

use crate::{
    kernel::attach::Hook, model::record::Record, stream::metrics_server, text::terminal::escape,
};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeniedLabels {
    container: String,
    device: String,
    major: String,
    minor: String,
    access: String,
    /// The cause's id (a fixed set), empty for a denial without one.
    cause: &'static str,
}

/// One per cause of the catalogue: a fixed set, so no cap.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CauseLabels {
    cause: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct HookLabels {
    hook: String,
}

/// `--otlp`'s records: "sent" or "dropped".
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OtlpLabels {
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct BuildLabels {
    version: String,
    commit: String,
}

impl DeniedLabels {
    /// Where denials go once `max_series` label sets exist.
    fn other() -> Self {
        let other = || "other".to_string();
        Self {
            container: other(),
            device: other(),
            major: other(),
            minor: other(),
            access: other(),
            cause: "other",
        }
    }
}

pub struct Metrics {
    denied: Family<DeniedLabels, Counter>,
    /// Label sets of `denied` a tenant may create (containers, minors):
    /// beyond it, denials count under `other`, so the sum stays exact.
    max_series: usize,
    /// Label sets of `denied` made so far (Family does not say).
    series: AtomicUsize,
    causes: Family<CauseLabels, Counter>,
    events: Counter,
    lost: Counter,
    otlp: Family<OtlpLabels, Counter>,
    registry: Arc<Registry>,
}

impl Metrics {
    pub fn new(hooks: &[Hook], max_series: usize) -> Self {
        let mut registry = Registry::default();
        let denied = Family::<DeniedLabels, Counter>::default();
        registry.register(
            "gpu_trace_denied",
            "Denied GPU device accesses",
            denied.clone(),
        );
        let causes = Family::<CauseLabels, Counter>::default();
        registry.register(
            "gpu_trace_problems",
            "Denied or failed device opens with a diagnosis, by cause",
            causes.clone(),
        );
        let events = Counter::default();
        registry.register(
            "gpu_trace_events",
            "Device access events received from the kernel",
            events.clone(),
        );
        let lost = Counter::default();
        registry.register(
            "gpu_trace_events_lost",
            "Events the kernel could not hand over (ring buffer full)",
            lost.clone(),
        );
        let otlp = Family::<OtlpLabels, Counter>::default();
        registry.register(
            "gpu_trace_otlp_records",
            "Records sent to the OTLP collector (--otlp), or dropped: its queue full or every try failed",
            otlp.clone(),
        );
        let attached = Family::<HookLabels, Gauge>::default();
        registry.register(
            "gpu_trace_hook_attached",
            "1 for each hook in place, 0 for one the kernel refused",
            attached.clone(),
        );
        for hook in hooks {
            attached
                .get_or_create(&HookLabels {
                    hook: hook.name.clone(),
                })
                .set(i64::from(hook.refused.is_none()));
        }
        let build = Family::<BuildLabels, Gauge>::default();
        registry.register(
            "gpu_trace_build_info",
            "The running gpu-trace",
            build.clone(),
        );
        build
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").into(),
                commit: env!("GPU_TRACE_COMMIT").into(),
            })
            .set(1);
        Self {
            denied,
            causes,
            max_series,
            series: AtomicUsize::new(0),
            events,
            lost,
            otlp,
            registry: Arc::new(registry),
        }
    }

    /// Counts `record.count` accesses: 1, or the repeats the kernel folded.
    pub fn observe(&self, record: &Record) {
        let count = record.count;
        self.events.inc_by(count);
        if let Some(diagnosis) = &record.diagnosis {
            self.causes
                .get_or_create(&CauseLabels {
                    cause: diagnosis.cause.id(),
                })
                .inc_by(count);
        }
        let a = &record.access;
        if a.verdict.is_denied() {
            let labels = DeniedLabels {
                // Label values reach terminals (curl) and alert texts: the
                // client escapes only quotes, backslashes and newlines.
                container: escaped(crate::runtime::label(&record.container)),
                device: escape(record.device.as_deref().unwrap_or_default()).into_owned(),
                major: a.major.to_string(),
                minor: a.minor.to_string(),
                access: a.access_letters(),
                cause: record.diagnosis.as_ref().map_or("", |d| d.cause.id()),
            };
            if let Some(series) = self.denied.get(&labels) {
                series.inc_by(count);
            } else if self.series.load(Ordering::Relaxed) < self.max_series {
                self.series.fetch_add(1, Ordering::Relaxed);
                self.denied.get_or_create(&labels).inc_by(count);
            } else {
                self.denied
                    .get_or_create(&DeniedLabels::other())
                    .inc_by(count);
            }
        }
    }

    /// Brings the lost counter up to the kernel's running total.
    pub fn set_lost(&self, total: u64) {
        let seen = self.lost.get();
        if total > seen {
            self.lost.inc_by(total - seen);
        }
    }

    /// Brings the OTLP counters up to the exporter's running totals.
    pub fn set_otlp(&self, sent: u64, dropped: u64) {
        for (result, total) in [("sent", sent), ("dropped", dropped)] {
            let counter = self.otlp.get_or_create(&OtlpLabels { result });
            let seen = counter.get();
            if total > seen {
                counter.inc_by(total - seen);
            }
        }
    }

    /// Serves /metrics on `addr`, on a thread of its own (metrics_server.rs).
    pub fn serve(&self, addr: SocketAddr) -> anyhow::Result<()> {
        metrics_server::serve(Arc::clone(&self.registry), addr)
    }
}

/// `text` terminal-escaped, reusing its allocation when it needs nothing
/// (every denial passes here).
fn escaped(text: String) -> String {
    match escape(&text) {
        std::borrow::Cow::Borrowed(_) => text,
        std::borrow::Cow::Owned(safe) => safe,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{analysis::test_support::record, model::access::Verdict};

    #[test]
    fn label_values_carry_no_terminal_control() {
        let metrics = Metrics::new(&[], 10);
        let r = record(
            "/lxc/a\u{1b}]0;pwned\u{7}\u{202e}b",
            "/dev/nvidia-uvm",
            509,
            0,
            Verdict::DeniedByBpfPolicy,
            -1,
        );
        metrics.observe(&r);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry).expect("encodes");
        let series = text
            .lines()
            .find(|l| l.starts_with("gpu_trace_denied_total{"))
            .expect("a series");
        assert!(
            !series.chars().any(crate::text::terminal::needs_escape),
            "{series:?}"
        );
        assert!(series.contains("pwned"), "{series:?}");
    }

    #[test]
    fn tenant_chosen_minors_cannot_grow_the_series_without_end() {
        let metrics = Metrics::new(&[], 3);
        for minor in 0..10 {
            let r = record(
                "/lxc/200",
                "/dev/nvidia-uvm",
                509,
                minor,
                Verdict::DeniedByBpfPolicy,
                -1,
            );
            metrics.observe(&r);
        }
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &metrics.registry).expect("encodes");
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("gpu_trace_denied_total{"))
            .collect();
        assert_eq!(series.len(), 4, "three and other: {text}");
        let sum: u64 = series
            .iter()
            .map(|l| {
                l.rsplit(' ')
                    .next()
                    .and_then(|n| n.parse::<u64>().ok())
                    .expect("a count")
            })
            .sum();
        assert_eq!(sum, 10);
        assert!(
            series
                .iter()
                .any(|l| l.contains("minor=\"other\"") && l.ends_with(" 7")),
            "{text}"
        );
    }
}
