//! `gpu-trace summary`: what watch's logs add up to over a period, without
//! privileges or a kernel: read, tally, report.

use std::{
    io::{self, BufRead, Write},
    path::{Path, PathBuf},
};

use anyhow::Context;
use chrono::Utc;

use crate::{
    analysis::log_summary::{parse_time_bound, LogSummary, Period},
    cli::SummaryArgs,
    host::log_files::open_log,
    render::{output::Format, summary_report},
    text::terminal::escape,
};

pub fn run(args: SummaryArgs) -> anyhow::Result<()> {
    let now = Utc::now();
    let bound = |text: &Option<String>| {
        text.as_deref()
            .map(|t| parse_time_bound(t, now).map_err(anyhow::Error::msg))
            .transpose()
    };
    let period = Period {
        since: bound(&args.since).context("--since")?,
        until: bound(&args.until).context("--until")?,
    };
    let logs = if args.logs.is_empty() {
        vec![PathBuf::from("-")]
    } else {
        args.logs
    };
    let mut summary = LogSummary::default();
    // A log that cannot be read (or a gzip cut short mid-rotation) is named,
    // and the others are still added up; the exit status then says so.
    let mut unreadable = 0;
    for log in &logs {
        if let Err(e) = add_log(&mut summary, log, &period) {
            eprintln!("gpu-trace: {}", escape(&format!("{e:#}")));
            unreadable += 1;
        }
    }
    let mut out = io::stdout().lock();
    match args.format {
        Format::Human => summary_report::write_human(&mut out, &summary, &period, args.top)?,
        Format::Json => summary_report::write_json(&mut out, &summary, &period, args.top)?,
    }
    out.flush()?;
    anyhow::ensure!(
        unreadable == 0,
        "{unreadable} of {} logs could not be read to the end (named above); the summary holds what was read",
        logs.len()
    );
    Ok(())
}

fn add_log(summary: &mut LogSummary, log: &Path, period: &Period) -> anyhow::Result<()> {
    let mut reader = open_log(log)?;
    let mut line = Vec::new();
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .with_context(|| format!("reading {}", log.display()))?;
        if read == 0 {
            return Ok(());
        }
        summary.add_line(&line, period);
    }
}
