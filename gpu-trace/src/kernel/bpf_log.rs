//! `--bpf-log`: the kernel programs' own records of what they drop, count
//! instead of sending, or cut (gpu-trace-ebpf/src/why_dropped.rs), read
//! with aya-log and printed on stderr as `gpu-trace: bpf: LEVEL: KIND: ...`.
//!
//! The level is set in the programs before they load: at `off` the
//! verifier removes the records' bodies (aya-log's 128 KiB ring is still
//! made). A flood of drops must not become a flood of lines: the programs
//! make at most 10 records of a kind a second and count the rest
//! (`DROP_RECORD_BUDGET`), and this side prints at most `LINES_PER_KIND` a
//! second of a kind; what either left out is counted and said.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use aya::{
    maps::{Array, MapData},
    Ebpf,
};
use aya_log::EbpfLogger;
use gpu_trace_common::{map, DropRecordBudget, DROP_RECORD_KINDS, EVENT_PROGRAMS};

use crate::{kernel::attach::take_map, text::terminal::printable};

/// The user's choice; the order is aya-log's (error is 1, debug 4).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum BpfLogLevel {
    #[default]
    Off,
    Error,
    Warn,
    Info,
    Debug,
}

impl BpfLogLevel {
    /// The value of the programs' `AYA_LOG_LEVEL`: records at or below it
    /// are made.
    pub fn in_kernel(self) -> u8 {
        self as u8
    }
}

/// The global aya-log's kernel side reads its level from.
pub const LEVEL_GLOBAL: &str = "AYA_LOG_LEVEL";

/// Lines per kind of record and second; the rest are counted.
const LINES_PER_KIND: u32 = 10;
const RATE_WINDOW: Duration = Duration::from_secs(1);
/// Kinds kept apart for the rate limit: the programs have a handful.
const KINDS_LIMIT: usize = 64;

/// Reads the records and prints them; None when the level is off.
pub struct BpfLog {
    reader: EbpfLogger<Shared>,
    lines: Arc<Lines>,
    budgets: Array<MapData, DropRecordBudget>,
    /// Of each kind, the records the programs left out, as last said.
    left_out_in_kernel: [u64; DROP_RECORD_KINDS.len()],
}

impl BpfLog {
    /// Takes the records' ring buffer and their budgets out of `ebpf`,
    /// once the programs are loaded.
    pub fn start(ebpf: &mut Ebpf, level: BpfLogLevel) -> anyhow::Result<Option<Self>> {
        if level == BpfLogLevel::Off {
            return Ok(None);
        }
        let lines = Arc::new(Lines::default());
        let reader = EbpfLogger::init_with_logger(ebpf, Shared(Arc::clone(&lines)))
            .map_err(|e| anyhow::anyhow!("reading the kernel programs' log records: {e}"))?;
        let budgets = Array::try_from(take_map(ebpf, map::DROP_RECORD_BUDGET)?)?;
        Ok(Some(Self {
            reader,
            lines,
            budgets,
            left_out_in_kernel: [0; DROP_RECORD_KINDS.len()],
        }))
    }

    /// Prints what the programs recorded since the last call, and says how
    /// many were left out by the rate limit in windows that closed.
    pub fn flush(&mut self) {
        self.read();
        self.say_left_out_in_kernel();
    }

    /// The records alone, without asking the kernel for its counts (a
    /// lookup per kind): for after each drain of the event ring.
    pub fn read(&mut self) {
        self.reader.flush();
        self.lines.say_left_out(false);
    }

    /// At the end: everything, the counts of what was left out included.
    pub fn finish(&mut self) {
        self.reader.flush();
        self.lines.say_left_out(true);
        self.say_left_out_in_kernel();
    }

    fn say_left_out_in_kernel(&mut self) {
        for (index, kind) in DROP_RECORD_KINDS.iter().enumerate() {
            let Ok(budget) = self.budgets.get(&(index as u32), 0) else {
                continue;
            };
            let new = budget.left_out - self.left_out_in_kernel[index];
            if new > 0 {
                eprintln!("gpu-trace: bpf: {new} more {kind} records left out by the kernel programs (at most 10 a second)");
                self.left_out_in_kernel[index] = budget.left_out;
            }
        }
    }
}

#[derive(Default)]
pub struct Lines {
    rate: Mutex<BTreeMap<String, Rate>>,
}

struct Rate {
    window: Instant,
    printed: u32,
    left_out: u64,
}

impl Lines {
    fn say_left_out(&self, everything: bool) {
        let mut rate = self.rate.lock().unwrap_or_else(|e| e.into_inner());
        for (kind, r) in rate.iter_mut() {
            if r.left_out > 0 && (everything || r.window.elapsed() >= RATE_WINDOW) {
                eprintln!(
                    "gpu-trace: bpf: {} more {kind} records left out (at most {LINES_PER_KIND} a second)",
                    r.left_out
                );
                r.left_out = 0;
            }
        }
    }

    /// True when a record of `kind` may be printed now.
    fn admit(&self, kind: &str) -> bool {
        let mut rate = self.rate.lock().unwrap_or_else(|e| e.into_inner());
        if !rate.contains_key(kind) && rate.len() >= KINDS_LIMIT {
            rate.clear();
        }
        let r = rate.entry(kind.to_string()).or_insert(Rate {
            window: Instant::now(),
            printed: 0,
            left_out: 0,
        });
        if r.window.elapsed() >= RATE_WINDOW {
            if r.left_out > 0 {
                eprintln!(
                    "gpu-trace: bpf: {} more {kind} records left out (at most {LINES_PER_KIND} a second)",
                    r.left_out
                );
            }
            *r = Rate {
                window: Instant::now(),
                printed: 0,
                left_out: 0,
            };
        }
        if r.printed < LINES_PER_KIND {
            r.printed += 1;
            true
        } else {
            r.left_out += 1;
            false
        }
    }
}

/// The printer as the reader holds it, shared with `BpfLog` for the
/// counts of what was left out.
struct Shared(Arc<Lines>);

impl log::Log for Shared {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }

    fn log(&self, record: &log::Record) {
        self.0.print(record);
    }

    fn flush(&self) {}
}

impl Lines {
    fn print(&self, record: &log::Record) {
        let text = with_program_named(&record.args().to_string());
        let kind = text.split(':').next().unwrap_or("").trim();
        let kind = printable(kind.as_bytes());
        if self.admit(&kind) {
            let level = record.level().as_str().to_ascii_lowercase();
            eprintln!("gpu-trace: bpf: {level}: {}", printable(text.as_bytes()));
        }
    }
}

/// The record's "in program N" (a `PROGRAM_*` number, all the kernel side
/// can print cheaply) as the program's name.
fn with_program_named(text: &str) -> String {
    const MARK: &str = "in program ";
    let Some(at) = text.find(MARK) else {
        return text.to_string();
    };
    let rest = &text[at + MARK.len()..];
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let name = rest[..digits]
        .parse::<usize>()
        .ok()
        .and_then(|n| EVENT_PROGRAMS.get(n))
        .unwrap_or(&EVENT_PROGRAMS[0]);
    format!("{}in {name}{}", &text[..at], &rest[digits..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_names_its_program() {
        assert_eq!(
            with_program_named("ring-full: event lost in program 2: pid 7 cgroup 1 device 511:0"),
            "ring-full: event lost in observe_device (the cgroup_device observer): pid 7 cgroup 1 device 511:0"
        );
        assert_eq!(
            with_program_named("path-cut: cut in program 99: pid 7"),
            "path-cut: cut in an unknown program: pid 7"
        );
        assert_eq!(with_program_named("no program here"), "no program here");
    }

    #[test]
    fn each_kind_gets_its_own_lines_a_second() {
        let lines = Lines::default();
        let admitted = (0..25).filter(|_| lines.admit("ring-full")).count();
        assert_eq!(admitted, LINES_PER_KIND as usize);
        assert!(lines.admit("path-cut"));
        let rate = lines.rate.lock().unwrap();
        assert_eq!(rate["ring-full"].left_out, 15);
    }

    #[test]
    fn levels_are_aya_logs_numbers() {
        assert_eq!(BpfLogLevel::Off.in_kernel(), 0);
        assert_eq!(BpfLogLevel::Error.in_kernel(), 1);
        assert_eq!(BpfLogLevel::Debug.in_kernel(), 4);
    }
}
