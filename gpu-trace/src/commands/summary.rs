//! `gpu-trace summary`: what watch's logs add up to over a period, without
//! privileges or a kernel: read, tally, report.

use std::{
    io::{self, BufRead, Read, Write},
    path::{Path, PathBuf},
};

use anyhow::Context;

use crate::{
    analysis::log_summary::{LogSummary, Period, MAX_LINE},
    cli::SummaryArgs,
    host::log_files::open_log,
    render::{output::Format, summary_report},
    text::terminal::escape,
};

pub fn run(args: SummaryArgs) -> anyhow::Result<()> {
    let period = Period {
        since: args.since,
        until: args.until,
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
        Format::Human => summary_report::write_human(&mut out, &summary, &period, args.top.into())?,
        Format::Json => summary_report::write_json(&mut out, &summary, &period, args.top.into())?,
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
    let reading = || format!("reading {}", log.display());
    loop {
        line.clear();
        // At most MAX_LINE bytes held: a line with no end (a gzip bomb of
        // one line, say) is skipped past and counted as malformed.
        let read = (&mut reader)
            .take(MAX_LINE as u64 + 1)
            .read_until(b'\n', &mut line)
            .with_context(reading)?;
        if read == 0 {
            return Ok(());
        }
        if line.len() > MAX_LINE {
            skip_to_next_line(&mut reader).with_context(reading)?;
            summary.add_malformed();
        } else {
            summary.add_line(&line, period);
        }
    }
}

/// Consumes up to and including the next newline, holding nothing.
fn skip_to_next_line(reader: &mut impl BufRead) -> io::Result<()> {
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(());
        }
        match buffer.iter().position(|&b| b == b'\n') {
            Some(end) => {
                reader.consume(end + 1);
                return Ok(());
            }
            None => {
                let all = buffer.len();
                reader.consume(all);
            }
        }
    }
}
