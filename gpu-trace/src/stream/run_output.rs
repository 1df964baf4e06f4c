//! Where `run`'s records go: each problem of the traced tree written to
//! stderr as it happens, and kept for the closing report.

use std::io::{self, Write};

use crate::{
    model::record::Record,
    render::{
        output::{write_record, Format},
        run_report::Report,
    },
    stream::{
        filter::KindFilter,
        session::{Counted, Output},
    },
};

pub struct RunOutput<'a> {
    pub format: Format,
    pub paint: bool,
    /// `--vendor`, `--role`: whose problems are shown.
    pub kinds: &'a KindFilter,
    pub report: Report,
    line: Vec<u8>,
}

impl<'a> RunOutput<'a> {
    pub fn new(format: Format, paint: bool, kinds: &'a KindFilter) -> Self {
        Self {
            format,
            paint,
            kinds,
            report: Report::default(),
            line: Vec::new(),
        }
    }
}

impl Output for RunOutput<'_> {
    fn record(&mut self, record: Record, _counted: Counted) {
        if !record.access.verdict.is_problem() || !self.kinds.shows(&record) {
            return;
        }
        self.line.clear();
        let _ = write_record(&mut self.line, self.format, self.paint, &record);
        let _ = io::stderr().lock().write_all(&self.line);
        self.report.add(&record);
    }
}
