//! `summary`: watch's JSON lines added up over a period. Every count is the
//! sum of the records' `count`, so folded repeats and per-cgroup summaries
//! weigh what they stand for. A line that is not one of watch's records is
//! counted and skipped.

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, TimeDelta, Utc};
use serde::Deserialize;

use crate::model::container::Container;

/// Distinct names kept per table: the names come from tenants, and a month
/// of logs must not grow memory without end. The rest count under `OTHER`.
pub const MAX_NAMES: usize = 10_000;
pub const OTHER: &str = "(other)";
/// Distinct hours charted: more than a year of them. Timestamps come from
/// files, and a crafted log could name a new hour on every line.
pub const MAX_HOURS: usize = 10_000;
/// The longest line read as a record; a longer one is malformed.
pub const MAX_LINE: usize = 1 << 20;
/// Where a summary record's count goes in the device and cause tables: it
/// stands for several problems and shows only the last one's device.
pub const NOT_ITEMIZED: &str = "(summary record: not itemized)";

/// The records that count: `last_seen` in [since, until).
#[derive(Debug, Clone, Copy, Default)]
pub struct Period {
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
}

impl Period {
    fn contains(&self, time: DateTime<Utc>) -> bool {
        self.since.is_none_or(|s| time >= s) && self.until.is_none_or(|u| time < u)
    }
}

/// How often one name appeared, and when first and last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    pub count: u64,
    pub first_seen: DateTime<Utc>,
    pub last_seen: DateTime<Utc>,
}

impl Seen {
    fn add(&mut self, count: u64, first: DateTime<Utc>, last: DateTime<Utc>) {
        // Counts come from files: a crafted one must not wrap the sums.
        self.count = self.count.saturating_add(count);
        self.first_seen = self.first_seen.min(first);
        self.last_seen = self.last_seen.max(last);
    }
}

/// One table of the summary: name -> Seen, capped at MAX_NAMES names.
#[derive(Debug, Default)]
pub struct Table(HashMap<String, Seen>);

impl Table {
    fn add(&mut self, name: String, count: u64, first: DateTime<Utc>, last: DateTime<Utc>) {
        let name = if self.0.len() >= MAX_NAMES && !self.0.contains_key(&name) {
            OTHER.to_string()
        } else {
            name
        };
        self.0
            .entry(name)
            .and_modify(|seen| seen.add(count, first, last))
            .or_insert(Seen {
                count,
                first_seen: first,
                last_seen: last,
            });
    }

    /// The `n` largest, largest first (ties by name, so the order is stable).
    pub fn top(&self, n: usize) -> Vec<(&str, &Seen)> {
        let mut all: Vec<(&str, &Seen)> = self.0.iter().map(|(k, v)| (k.as_str(), v)).collect();
        all.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
        all.truncate(n);
        all
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The fields of a record `summary` reads; the rest of the line is ignored.
#[derive(Deserialize)]
struct LogRecord {
    kind: Option<String>,
    count: u64,
    first_seen: String,
    last_seen: String,
    verdict: String,
    container: Container,
    device: Option<String>,
    major: Option<u32>,
    minor: Option<u32>,
    path: Option<String>,
    errno: Option<String>,
    cause: Option<String>,
}

/// Everything `summary` reports.
#[derive(Debug, Default)]
pub struct LogSummary {
    /// Lines read, in all.
    pub lines: u64,
    /// Lines that are not a record of watch's: counted, skipped.
    pub malformed: u64,
    /// Records outside the period.
    pub outside: u64,
    /// Allowed accesses (`watch --all`): counted, not problems.
    pub allowed: u64,
    /// Sum of `count` over the period, and the part denied by a policy.
    pub problems: u64,
    pub denied: u64,
    pub first_seen: Option<DateTime<Utc>>,
    pub last_seen: Option<DateTime<Utc>>,
    pub containers: Table,
    pub devices: Table,
    pub causes: Table,
    /// Hour (its start) -> problems whose last_seen falls in it.
    pub hours: BTreeMap<DateTime<Utc>, u64>,
    /// Problems in hours past MAX_HOURS distinct ones: counted, not charted.
    pub unplotted: u64,
}

impl LogSummary {
    /// A line too long to be a record, skipped unread.
    pub fn add_malformed(&mut self) {
        self.lines += 1;
        self.malformed += 1;
    }

    /// Adds one line of a log (blank lines are not counted at all).
    pub fn add_line(&mut self, line: &[u8], period: &Period) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        self.lines += 1;
        let Some((record, first, last)) = parse(line) else {
            self.malformed += 1;
            return;
        };
        if !period.contains(last) {
            self.outside += 1;
            return;
        }
        let count = record.count;
        // An allowed access is a problem when it was diagnosed: a stale node
        // passes the device check and then fails with ENXIO.
        if record.verdict == "allowed" && record.cause.is_none() {
            self.allowed = self.allowed.saturating_add(count);
            return;
        }
        self.problems = self.problems.saturating_add(count);
        if record.verdict == "denied" {
            self.denied = self.denied.saturating_add(count);
        }
        self.first_seen = Some(self.first_seen.map_or(first, |f| f.min(first)));
        self.last_seen = Some(self.last_seen.map_or(last, |l| l.max(last)));
        self.containers
            .add(crate::runtime::label(&record.container), count, first, last);
        let itemized = record.kind.as_deref() != Some("summary");
        let (device, cause) = if itemized {
            (device_name(&record), cause_name(&record))
        } else {
            (NOT_ITEMIZED.to_string(), NOT_ITEMIZED.to_string())
        };
        self.devices.add(device, count, first, last);
        self.causes.add(cause, count, first, last);
        let hour =
            DateTime::from_timestamp(last.timestamp().div_euclid(3_600) * 3_600, 0).unwrap_or(last);
        if self.hours.len() < MAX_HOURS || self.hours.contains_key(&hour) {
            let slot = self.hours.entry(hour).or_default();
            *slot = slot.saturating_add(count);
        } else {
            self.unplotted = self.unplotted.saturating_add(count);
        }
    }
}

fn parse(line: &[u8]) -> Option<(LogRecord, DateTime<Utc>, DateTime<Utc>)> {
    let record: LogRecord = serde_json::from_slice(line).ok()?;
    let time = |text: &str| {
        DateTime::parse_from_rfc3339(text)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    };
    let first = time(&record.first_seen)?;
    let last = time(&record.last_seen)?;
    Some((record, first, last))
}

/// "nvidia-uvm (c 509:0)", "c 240:0", or the path of a failed open.
fn device_name(record: &LogRecord) -> String {
    match (&record.device, record.major, record.minor) {
        (Some(name), Some(major), Some(minor)) => format!("{name} (c {major}:{minor})"),
        (None, Some(major), Some(minor)) => format!("c {major}:{minor}"),
        _ => match (&record.path, &record.errno) {
            (Some(path), Some(errno)) => format!("{path} ({errno})"),
            (Some(path), None) => path.clone(),
            _ => "(unknown device)".to_string(),
        },
    }
}

fn cause_name(record: &LogRecord) -> String {
    record
        .cause
        .clone()
        .unwrap_or_else(|| "(no diagnosis)".to_string())
}

/// A bound of the period as the user gives it: an RFC 3339 time, a date
/// (midnight UTC), or a duration before now (`30m`, `24h`, `7d`).
pub fn parse_time_bound(text: &str, now: DateTime<Utc>) -> Result<DateTime<Utc>, String> {
    if let Ok(time) = DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&Utc));
    }
    if let Ok(date) = chrono::NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        return Ok(date.and_time(chrono::NaiveTime::MIN).and_utc());
    }
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(0);
    let (number, unit) = text.split_at(split);
    let unit_seconds = match unit {
        "s" => Some(1),
        "m" => Some(60),
        "h" => Some(3_600),
        "d" => Some(86_400),
        _ => None,
    };
    number
        .parse::<i64>()
        .ok()
        .zip(unit_seconds)
        .and_then(|(n, unit)| TimeDelta::try_seconds(n.checked_mul(unit)?))
        .and_then(|ago| now.checked_sub_signed(ago))
        .ok_or_else(|| {
            format!("{text:?} is not a time: give 2026-11-30T10:00:00Z, 2026-11-30, or an age like 30m, 24h, 7d")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(kind: &str, count: u64, last: &str, container_id: &str, device: &str) -> String {
        serde_json::json!({
            "time": last, "kind": kind, "count": count,
            "first_seen": "2026-11-30T09:59:00Z", "last_seen": last,
            "verdict": "denied",
            "container": {"runtime": "docker", "id": container_id, "name": null, "cgroup": "/docker/x"},
            "device": device, "major": 509, "minor": 0, "path": "/dev/nvidia-uvm",
            "errno": "EPERM", "cause": "dynamic-major-not-allowed",
        })
        .to_string()
    }

    #[test]
    fn counts_are_sums_of_count_and_malformed_lines_are_skipped() {
        let mut s = LogSummary::default();
        let all = Period::default();
        let id = "3f2a9c1b0d4e5f60718293a4b5c6d7e8";
        s.add_line(
            line("event", 1, "2026-11-30T10:00:01Z", id, "nvidia-uvm").as_bytes(),
            &all,
        );
        s.add_line(
            line("repeats", 41, "2026-11-30T10:00:06Z", id, "nvidia-uvm").as_bytes(),
            &all,
        );
        s.add_line(
            line("summary", 100, "2026-11-30T11:30:00Z", id, "nvidia0").as_bytes(),
            &all,
        );
        s.add_line(b"{not json", &all);
        s.add_line(br#"{"count": 3}"#, &all);
        s.add_line(b"   ", &all);
        assert_eq!(
            (s.lines, s.malformed, s.problems, s.denied),
            (5, 2, 142, 142)
        );
        let containers = s.containers.top(10);
        assert_eq!(containers[0].0, "docker 3f2a9c1b0d4e");
        assert_eq!(containers[0].1.count, 142);
        let devices = s.devices.top(10);
        assert_eq!(devices[0], (NOT_ITEMIZED, &devices[0].1.clone()));
        assert_eq!(devices[0].1.count, 100);
        assert_eq!(devices[1].0, "nvidia-uvm (c 509:0)");
        assert_eq!(devices[1].1.count, 42);
        let hours: Vec<u64> = s.hours.values().copied().collect();
        assert_eq!(hours, [42, 100]);
    }

    #[test]
    fn the_period_is_last_seen_in_since_until() {
        let now = DateTime::parse_from_rfc3339("2026-11-30T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let period = Period {
            since: Some(parse_time_bound("2026-11-30T10:00:05Z", now).unwrap()),
            until: Some(parse_time_bound("1h", now).unwrap()),
        };
        let mut s = LogSummary::default();
        for last in [
            "2026-11-30T10:00:01Z",
            "2026-11-30T10:00:06Z",
            "2026-11-30T11:00:00Z",
        ] {
            s.add_line(line("event", 1, last, "a", "nvidia0").as_bytes(), &period);
        }
        assert_eq!((s.problems, s.outside), (1, 2));
        assert_eq!(
            parse_time_bound("2026-11-29", now).unwrap().to_rfc3339(),
            "2026-11-29T00:00:00+00:00"
        );
        assert_eq!(
            parse_time_bound("7d", now).unwrap().to_rfc3339(),
            "2026-11-23T12:00:00+00:00"
        );
        assert!(parse_time_bound("yesterday", now).is_err());
        assert!(parse_time_bound("99999999999999d", now).is_err());
    }

    #[test]
    fn diagnosed_allowed_opens_are_problems_and_crafted_lines_stay_bounded() {
        let mut s = LogSummary::default();
        let all = Period::default();
        // A stale node: the device check allowed it, the open failed (ENXIO).
        let mut stale: serde_json::Value =
            serde_json::from_str(&line("event", 2, "2026-11-30T10:00:00Z", "a", "nvidia-uvm"))
                .unwrap();
        stale["verdict"] = "allowed".into();
        stale["cause"] = "stale-major".into();
        s.add_line(stale.to_string().as_bytes(), &all);
        stale["cause"] = serde_json::Value::Null;
        s.add_line(stale.to_string().as_bytes(), &all);
        assert_eq!((s.problems, s.allowed, s.denied), (2, 2, 0));
        assert_eq!(s.causes.top(1)[0].0, "stale-major");
        // Counts that would wrap a sum, and a time no calendar can hold.
        s.add_line(
            line("event", u64::MAX, "2026-11-30T10:00:01Z", "a", "x").as_bytes(),
            &all,
        );
        s.add_line(
            line("event", 5, "2026-11-30T10:00:02Z", "a", "x").as_bytes(),
            &all,
        );
        assert_eq!(s.problems, u64::MAX);
        s.add_line(
            line("event", 1, "+262000-01-01T00:00:00Z", "a", "x").as_bytes(),
            &all,
        );
        assert_eq!(s.malformed, 1);
        // A new hour on every line: at most MAX_HOURS are charted.
        let mut hours = LogSummary::default();
        for h in 0..MAX_HOURS as i64 + 10 {
            let t = DateTime::from_timestamp(h * 3_600, 0).unwrap().to_rfc3339();
            hours.add_line(line("event", 1, &t, "a", "x").as_bytes(), &all);
        }
        assert_eq!((hours.hours.len(), hours.unplotted), (MAX_HOURS, 10));
    }

    #[test]
    fn tenant_chosen_names_cannot_grow_a_table_without_end() {
        let mut s = LogSummary::default();
        for i in 0..MAX_NAMES + 50 {
            let id = format!("c{i}");
            s.add_line(
                line("event", 1, "2026-11-30T10:00:01Z", &id, "nvidia0").as_bytes(),
                &Period::default(),
            );
        }
        assert_eq!(s.containers.len(), MAX_NAMES + 1);
        let other = s.containers.0.get(OTHER).expect("other");
        assert_eq!(other.count, 50);
    }
}
