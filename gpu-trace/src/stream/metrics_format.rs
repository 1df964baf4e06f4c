//! The two text formats a scraper may ask for. prometheus-client writes
//! OpenMetrics, which Prometheus asks for in its Accept header; curl,
//! `promtool check metrics` and older scrapers read the classic text
//! format (0.0.4), where a counter's HELP and TYPE name the `_total`
//! sample itself and there is no `# EOF`.

pub const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
pub const CLASSIC_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// True when the Accept header names OpenMetrics (whatever its weight:
/// a scraper lists it only if it can read it).
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    accept.is_some_and(|a| a.contains("application/openmetrics-text"))
}

/// The classic text format of an OpenMetrics exposition.
pub fn classic_text(openmetrics: &str) -> String {
    let counters: Vec<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let meta = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| Some((p, line.strip_prefix(p)?)));
        match meta {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(prefix);
                out.push_str(name);
                if counters.contains(&name) {
                    out.push_str("_total");
                }
                out.push(' ');
                out.push_str(tail);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_named_by_their_sample_and_eof_goes() {
        let om = "# HELP gpu_trace_events Events.\n# TYPE gpu_trace_events counter\n\
                  gpu_trace_events_total 3\n# HELP gpu_trace_up Up.\n# TYPE gpu_trace_up gauge\n\
                  gpu_trace_up 1\n# EOF\n";
        assert_eq!(
            classic_text(om),
            "# HELP gpu_trace_events_total Events.\n# TYPE gpu_trace_events_total counter\n\
             gpu_trace_events_total 3\n# HELP gpu_trace_up Up.\n# TYPE gpu_trace_up gauge\n\
             gpu_trace_up 1\n"
        );
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert!(wants_openmetrics(Some(prometheus)));
        assert!(!wants_openmetrics(Some("*/*")));
        assert!(!wants_openmetrics(None));
    }
}
