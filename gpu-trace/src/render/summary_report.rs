//! `summary`'s report: totals, the top containers, devices and causes, and
//! problems per hour as a bar chart, as text or one JSON object.

use std::io::{self, Write};

use chrono::{DateTime, SecondsFormat, Utc};
use serde::Serialize;

use crate::{
    analysis::log_summary::{LogSummary, Period, Seen, Table, MAX_HOURS},
    text::{json, terminal::TerminalLines},
};

/// Width of the longest bar, in cells.
const BAR_WIDTH: u64 = 40;

fn time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

#[derive(Serialize)]
struct JsonSeen<'a> {
    name: &'a str,
    count: u64,
    first_seen: String,
    last_seen: String,
}

#[derive(Serialize)]
struct JsonHour {
    hour: String,
    count: u64,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    since: Option<String>,
    until: Option<String>,
    first_seen: Option<String>,
    last_seen: Option<String>,
    lines: u64,
    malformed: u64,
    allowed: u64,
    outside_period: u64,
    problems: u64,
    denied: u64,
    failed: u64,
    containers: Vec<JsonSeen<'a>>,
    devices: Vec<JsonSeen<'a>>,
    causes: Vec<JsonSeen<'a>>,
    hours: Vec<JsonHour>,
    /// Problems in hours past the chart's limit (MAX_HOURS distinct hours).
    unplotted: u64,
}

fn top(table: &Table, n: usize) -> Vec<JsonSeen<'_>> {
    table
        .top(n)
        .into_iter()
        .map(|(name, seen)| JsonSeen {
            name,
            count: seen.count,
            first_seen: time(seen.first_seen),
            last_seen: time(seen.last_seen),
        })
        .collect()
}

pub fn write_json(
    out: &mut impl Write,
    summary: &LogSummary,
    period: &Period,
    n: usize,
) -> io::Result<()> {
    let report = JsonReport {
        since: period.since.map(time),
        until: period.until.map(time),
        first_seen: summary.first_seen.map(time),
        last_seen: summary.last_seen.map(time),
        lines: summary.lines,
        malformed: summary.malformed,
        allowed: summary.allowed,
        outside_period: summary.outside,
        problems: summary.problems,
        denied: summary.denied,
        failed: summary.problems.saturating_sub(summary.denied),
        containers: top(&summary.containers, n),
        devices: top(&summary.devices, n),
        causes: top(&summary.causes, n),
        hours: summary
            .hours
            .iter()
            .map(|(&hour, &count)| JsonHour {
                hour: time(hour),
                count,
            })
            .collect(),
        unplotted: summary.unplotted,
    };
    json::write(&mut *out, &report)?;
    writeln!(out)
}

pub fn write_human(
    out: &mut impl Write,
    summary: &LogSummary,
    period: &Period,
    n: usize,
) -> io::Result<()> {
    let mut out = TerminalLines::new(out);
    let bound = |t: Option<DateTime<Utc>>, open: &str| t.map_or(open.to_string(), time);
    out.line(format_args!(
        "gpu-trace summary: {} to {}",
        bound(period.since, "the start of the logs"),
        bound(period.until, "their end")
    ))?;
    match (summary.first_seen, summary.last_seen) {
        (Some(first), Some(last)) => out.line(format_args!(
            "problems: {} ({} denied, {} failed), first seen {}, last seen {}",
            summary.problems,
            summary.denied,
            summary.problems.saturating_sub(summary.denied),
            time(first),
            time(last)
        ))?,
        _ => out.line(format_args!("problems: none in this period"))?,
    }
    out.line(format_args!(
        "lines: {} read, {} malformed (skipped), {} outside the period",
        summary.lines, summary.malformed, summary.outside
    ))?;
    if summary.allowed > 0 {
        out.line(format_args!(
            "allowed accesses (watch --all): {}",
            summary.allowed
        ))?;
    }
    for (title, table) in [
        ("containers", &summary.containers),
        ("devices", &summary.devices),
        ("causes", &summary.causes),
    ] {
        if table.is_empty() {
            continue;
        }
        out.blank()?;
        out.line(format_args!(
            "top {title} ({} of {}):",
            n.min(table.len()),
            table.len()
        ))?;
        for (name, seen) in table.top(n) {
            write_seen(&mut out, name, seen)?;
        }
    }
    if !summary.hours.is_empty() {
        out.blank()?;
        out.line(format_args!("problems per hour (UTC):"))?;
        write_hours(&mut out, summary)?;
        if summary.unplotted > 0 {
            out.line(format_args!(
                "  ({} more problems in hours past the first {MAX_HOURS} charted)",
                summary.unplotted
            ))?;
        }
    }
    Ok(())
}

fn write_seen<W: Write>(out: &mut TerminalLines<'_, W>, name: &str, seen: &Seen) -> io::Result<()> {
    out.line(format_args!(
        "  {:>10}  {name}  (first {}, last {})",
        seen.count,
        time(seen.first_seen),
        time(seen.last_seen)
    ))
}

/// One bar per hour from the first to the last with problems; a run of
/// empty hours is one line that says how many.
fn write_hours<W: Write>(out: &mut TerminalLines<'_, W>, summary: &LogSummary) -> io::Result<()> {
    let most = summary.hours.values().copied().max().unwrap_or(1).max(1);
    let mut previous: Option<DateTime<Utc>> = None;
    for (&hour, &count) in &summary.hours {
        if let Some(before) = previous {
            let empty = (hour - before).num_hours() - 1;
            if empty > 0 {
                out.line(format_args!("  ({empty} hours without problems)"))?;
            }
        }
        // At least one cell for any problem at all, so none looks like zero.
        let cells = (u128::from(count) * u128::from(BAR_WIDTH)).div_ceil(u128::from(most)) as usize;
        out.line(format_args!(
            "  {} {} {count}",
            hour.format("%Y-%m-%d %H:00"),
            "█".repeat(cells)
        ))?;
        previous = Some(hour);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary() -> LogSummary {
        let mut s = LogSummary::default();
        for (last, count, comm) in [
            ("2026-11-30T10:10:00Z", 10, "a"),
            ("2026-11-30T13:20:00Z", 40, "b\u{1b}]0;x\u{7}"),
        ] {
            let line = serde_json::json!({
                "kind": "event", "count": count,
                "first_seen": last, "last_seen": last, "verdict": "denied",
                "container": {"runtime": "cgroup", "id": format!("/t/{comm}"), "name": null, "cgroup": "/t"},
                "device": "nvidia-uvm", "major": 509, "minor": 0, "cause": "stale-major",
            });
            s.add_line(line.to_string().as_bytes(), &Period::default());
        }
        s
    }

    #[test]
    fn hours_are_bars_scaled_to_the_busiest_and_gaps_are_one_line() {
        let mut out = Vec::new();
        write_human(&mut out, &summary(), &Period::default(), 10).expect("write");
        let text = String::from_utf8(out).expect("UTF-8");
        assert!(
            text.contains(&format!("  2026-11-30 10:00 {} 10\n", "█".repeat(10))),
            "{text}"
        );
        assert!(text.contains("  (2 hours without problems)\n"), "{text}");
        assert!(
            text.contains(&format!("  2026-11-30 13:00 {} 40\n", "█".repeat(40))),
            "{text}"
        );
        assert!(
            text.contains("problems: 50 (50 denied, 0 failed)"),
            "{text}"
        );
        // The tenant's escape sequence in a cgroup name stays inert.
        assert!(!text.contains('\u{1b}'), "{text}");
    }

    #[test]
    fn json_is_one_object_with_the_tables() {
        let mut out = Vec::new();
        write_json(&mut out, &summary(), &Period::default(), 1).expect("write");
        let text = String::from_utf8(out).expect("UTF-8");
        assert_eq!(text.lines().count(), 1);
        let v: serde_json::Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(v["problems"], 50);
        assert_eq!(v["containers"].as_array().expect("containers").len(), 1);
        assert_eq!(v["causes"][0]["name"], "stale-major");
        assert_eq!(v["causes"][0]["count"], 50);
        assert_eq!(v["hours"][1]["hour"], "2026-11-30T13:00:00Z");
    }
}
