//! The closing report of `gpu-trace run`: each distinct problem once, with
//! how often it happened, its cause and its fix.

use std::io::{self, Write};

use rustc_hash::FxHashMap;
use serde_json::{json, Value};

use crate::{
    model::{diagnosis::Diagnosis, record::Record},
    render::output::{errno_name, record_json},
    text::{style, terminal::TerminalLines},
};

/// What makes two problems the same one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ProblemKey {
    cgroup_id: u64,
    path: Option<Vec<u8>>,
    device: (bool, u32, u32),
    access: u16,
    ret: Option<i32>,
    cause: Option<&'static str>,
}

impl ProblemKey {
    fn of(record: &Record) -> Self {
        let a = &record.access;
        Self {
            cgroup_id: a.cgroup_id,
            path: a.open.as_ref().map(|o| o.path.clone()),
            device: (a.device_seen, a.major, a.minor),
            access: a.access,
            ret: a.open.as_ref().and_then(|o| o.ret),
            cause: record.diagnosis.as_ref().map(|d| d.cause.id()),
        }
    }
}

/// Distinct problems listed one by one; a program that fails on ever new
/// paths must not make the report (or gpu-trace's memory) grow without end.
const MAX_LISTED: usize = 1_000;

#[derive(Debug, Default)]
pub struct Report {
    /// First record of each problem, and how many times it happened; in order of first sight.
    problems: Vec<(Record, u64)>,
    index: FxHashMap<ProblemKey, usize>,
    /// Accesses of problems beyond `MAX_LISTED`, counted only.
    unlisted: u64,
}

impl Report {
    pub fn add(&mut self, record: &Record) {
        let key = ProblemKey::of(record);
        if let Some(&i) = self.index.get(&key) {
            self.problems[i].1 += 1;
        } else if self.problems.len() < MAX_LISTED {
            self.index.insert(key, self.problems.len());
            self.problems.push((record.clone(), 1));
        } else {
            self.unlisted += 1;
        }
    }

    pub fn is_empty(&self) -> bool {
        self.problems.is_empty()
    }

    /// `paint`: colour the verdicts, causes and fixes (text/style.rs).
    pub fn write_human(
        &self,
        out: &mut impl Write,
        command: &str,
        status: &str,
        paint: bool,
    ) -> io::Result<()> {
        let mut out = TerminalLines::painted(out, paint);
        out.line(format_args!("gpu-trace: `{command}` {status}"))?;
        if self.problems.is_empty() {
            return out.line(format_args!(
                "gpu-trace: no denied or failed GPU device access by it or its children"
            ));
        }
        let n = self.problems.len();
        out.line(format_args!(
            "gpu-trace: {n} problem{} with GPU devices:",
            if n == 1 { "" } else { "s" }
        ))?;
        for (i, (record, count)) in self.problems.iter().enumerate() {
            write_problem(&mut out, i + 1, record, *count)?;
        }
        if self.unlisted > 0 {
            out.line(format_args!(
                "  ... and {} more accesses of problems past the first {MAX_LISTED}, not listed one by one",
                self.unlisted
            ))?;
        }
        Ok(())
    }

    pub fn to_json(&self, command: &[String], exit_status: i32) -> Value {
        let problems: Vec<Value> = self
            .problems
            .iter()
            .map(|(record, count)| json!({ "count": count, "event": record_json(record) }))
            .collect();
        json!({ "report": {
            "command": command,
            "exit_status": exit_status,
            "problems": problems,
            "unlisted": self.unlisted,
        } })
    }
}

/// Problem `number` of the list: its verdict, how often, the path and
/// device, the errno and who; its cause and fix below when diagnosed.
fn write_problem<W: Write>(
    out: &mut TerminalLines<W>,
    number: usize,
    record: &Record,
    count: u64,
) -> io::Result<()> {
    let a = &record.access;
    let (verdict, verdict_style) = if a.verdict.is_denied() {
        ("DENIED", style::DENIED)
    } else {
        ("FAILED", style::FAILED)
    };
    let path = a
        .open
        .as_ref()
        .map_or_else(|| "(not an open call)".into(), |o| o.shown_path());
    let device = if a.device_seen {
        format!(
            "{} c {}:{} {}",
            record.device.as_deref().unwrap_or("(no driver)"),
            a.major,
            a.minor,
            a.access_letters()
        )
    } else {
        record.device.clone().unwrap_or_default()
    };
    let errno = a
        .open
        .as_ref()
        .and_then(|o| o.errno())
        .map(errno_name)
        .unwrap_or_default();
    out.parts(&[
        (None, &format!("  {number}. ")),
        (Some(verdict_style), verdict),
        (
            None,
            &format!(
                " x{count}  {path}  {device}  {errno}  in {}",
                crate::runtime::label(&record.container)
            ),
        ),
    ])?;
    if let Some(diagnosis) = &record.diagnosis {
        write_diagnosis(out, diagnosis)?;
    }
    Ok(())
}

/// A problem's cause and the steps of its fix, under its line.
fn write_diagnosis<W: Write>(out: &mut TerminalLines<W>, diagnosis: &Diagnosis) -> io::Result<()> {
    out.parts(&[
        (None, "     "),
        (
            Some(style::CAUSE),
            &format!("cause ({}):", diagnosis.cause.id()),
        ),
        (None, " "),
        (None, &diagnosis.explanation),
    ])?;
    for (j, step) in diagnosis.fix.iter().enumerate() {
        let label = if j == 0 { "fix:" } else { "    " };
        out.parts(&[
            (None, "     "),
            (Some(style::FIX), label),
            (None, " "),
            (None, step),
        ])?;
    }
    Ok(())
}
